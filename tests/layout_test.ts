/**
 * The layout rule of shared/DESIGN.md: the media plane imports only the leaf helpers of core/
 * (no registry, no services), and those helpers import nothing of core/ but each other.
 */
import assert from "node:assert/strict";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");

/**
 * The core/ files media/ may import. Each is a leaf: errors (typed errors), log (the
 * logger), ids (identifiers), paths (containing a path in a folder), redact (hiding
 * secrets in URIs and text, used by log), limits (capped counters), metrics (the Prometheus
 * counters media updates), accept_loop (a TCP accept loop no accept error ends, shared by
 * the signaling and RTMP listeners, and capped_listener, the RTMP and RTSP listeners' caps
 * around it) with the descriptor guard it asks (fd_guard, fd_limit,
 * libc) and the TLS handshake deadline and socket shutdown it uses (tls_handshake,
 * socket_shutdown) import no registry.
 */
const coreLeaves = new Set([
  "errors.ts",
  "log.ts",
  "log_ring.ts",
  "ids.ts",
  "paths.ts",
  "redact.ts",
  "limits.ts",
  "accept_loop.ts",
  "capped_listener.ts",
  "fd_guard.ts",
  "fd_limit.ts",
  "libc.ts",
  "metrics.ts",
  "tls_handshake.ts",
  "socket_shutdown.ts",
]);

/** Every .ts file under `dir`, recursively. */
function tsFiles(dir: string): string[] {
  const files: string[] = [];
  for (const entry of Deno.readDirSync(dir)) {
    const path = join(dir, entry.name);
    if (entry.isDirectory) files.push(...tsFiles(path));
    else if (entry.name.endsWith(".ts")) files.push(path);
  }
  return files;
}

/** The relative specifiers a file imports or re-exports, resolved to absolute paths. */
function localImports(file: string): string[] {
  const text = Deno.readTextFileSync(file);
  const specifiers = [
    ...text.matchAll(/^\s*(?:import|export)\b[^;]*?\bfrom\s*"(\.[^"]+)"/gms),
    ...text.matchAll(/\bimport\s*\(\s*"(\.[^"]+)"\s*\)/g),
  ].map((match) => match[1]);
  return specifiers.map((specifier) => resolve(dirname(file), specifier));
}

/** The imports of `files` that land in core/ outside the leaf helpers, as "file -> target". */
function nonLeafCoreImports(files: string[]): string[] {
  const core = join(root, "core");
  const bad: string[] = [];
  for (const file of files) {
    for (const target of localImports(file)) {
      if (dirname(target) !== core) {
        if (target.startsWith(core + "/")) {
          bad.push(`${relative(root, file)} -> ${relative(root, target)}`);
        }
        continue;
      }
      if (!coreLeaves.has(relative(core, target))) {
        bad.push(`${relative(root, file)} -> ${relative(root, target)}`);
      }
    }
  }
  return bad;
}

Deno.test("media/ imports from core/ only the leaf helpers", () => {
  const files = tsFiles(join(root, "media"));
  assert.ok(files.length > 50, `found only ${files.length} files under media/`);
  assert.deepEqual(nonLeafCoreImports(files), []);
});

Deno.test("the core/ leaf helpers import nothing of core/ but each other", () => {
  const leaves = [...coreLeaves].map((name) => join(root, "core", name))
    .filter((path) => {
      try {
        return Deno.statSync(path).isFile;
      } catch {
        return false;
      }
    });
  assert.ok(leaves.length >= 3);
  assert.deepEqual(nonLeafCoreImports(leaves), []);
});

Deno.test("the layout check notices a registry import", () => {
  const dir = Deno.makeTempDirSync();
  try {
    const file = join(dir, "probe.ts");
    Deno.writeTextFileSync(
      file,
      `import type { StreamRegistry } from "${
        relative(dir, join(root, "core/stream_registry.ts"))
      }";\n` +
        `import { NotFoundError } from "${relative(dir, join(root, "core/errors.ts"))}";\n`,
    );
    assert.deepEqual(nonLeafCoreImports([file]), [
      `${relative(root, file)} -> core/stream_registry.ts`,
    ]);
    assert.deepEqual(nonLeafCoreImports([join(root, "media/stream.ts")]), []);
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});
