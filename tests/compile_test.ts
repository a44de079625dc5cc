/**
 * `deno task compile` builds a binary holding only what its module graph reaches statically;
 * Worker modules, wasm files and modules loaded through `import.meta.resolve` are found at run
 * time, so each must be in the task's `--include` list. This scans the server's sources
 * (main.ts's graph, plus each Worker's graph) for them and checks the list covers every one.
 * It does not run `deno compile`, which downloads its runtime.
 */
import assert from "node:assert/strict";
import { dirname, relative, resolve } from "node:path";
import { fileURLToPath as fromFileUrl } from "node:url";

const root = fromFileUrl(new URL("../", import.meta.url));

/** The `--include` paths of the compile task, relative to the repository. */
function compileIncludes(): string[] {
  const denoJson = JSON.parse(Deno.readTextFileSync(`${root}/deno.json`));
  // The task may build the kernels first: `... && deno compile ...`.
  const command = (denoJson.tasks.compile as string).split("&&").map((c) => c.trim())
    .find((c) => c.startsWith("deno compile "));
  assert.ok(command, "tasks.compile runs no `deno compile`");
  const args = command.split(/\s+/);
  return args.flatMap((arg, i) => arg === "--include" ? [args[i + 1]] : []);
}

/** Local source files of the module graph of `entry` (an absolute path). */
async function localModules(entry: string): Promise<string[]> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["info", "--json", entry],
    cwd: root,
    stdout: "piped",
    stderr: "piped",
  }).output();
  assert.ok(out.success, new TextDecoder().decode(out.stderr));
  const info = JSON.parse(new TextDecoder().decode(out.stdout)) as {
    modules: { specifier: string }[];
  };
  return info.modules
    .map((m) => m.specifier)
    .filter((s) => s.startsWith("file:") && !s.includes("/node_modules/"))
    .map((s) => fromFileUrl(s));
}

/** The directory a `new URL("<literal>", <base>)` base identifier names, if the file defines it. */
function baseDirOf(source: string, file: string, base: string): string | undefined {
  if (base === "import.meta.url") return dirname(file);
  const definition = new RegExp(
    `const ${base}(?::\\s*URL)?\\s*=\\s*new URL\\(\\s*["'\`]([^"'\`]+)["'\`],\\s*import\\.meta\\.url\\s*\\)`,
  ).exec(source);
  return definition ? resolve(dirname(file), definition[1]) : undefined;
}

/** What one source file loads at run time: Worker modules, wasm files, resolved modules. */
function runtimeLoads(file: string): { workers: string[]; files: string[] } {
  const source = Deno.readTextFileSync(file);
  const workers: string[] = [];
  const files: string[] = [];
  // new Worker(new URL("./x.ts", import.meta.url), ...) or new Worker(someUrl, ...).
  for (const match of source.matchAll(/new Worker\(\s*(new URL\(\s*["']([^"']+)["']|(\w+))/g)) {
    let target = match[2];
    if (target === undefined) {
      const definition = new RegExp(
        `const ${
          match[3]
        }(?::\\s*URL)?\\s*=\\s*new URL\\(\\s*["']([^"']+)["'],\\s*import\\.meta\\.url`,
      ).exec(source);
      assert.ok(definition, `${relative(root, file)}: cannot tell which module ${match[3]} is`);
      target = definition[1];
    }
    workers.push(resolve(dirname(file), target));
  }
  // new URL(`${name}.wasm`, base): the folder of the wasm files.
  for (
    const match of source.matchAll(/new URL\(\s*[`"']([^`"']*\.wasm)[`"']\s*,\s*([\w.]+)\s*\)/g)
  ) {
    const dir = baseDirOf(source, file, match[2]);
    assert.ok(dir, `${relative(root, file)}: cannot tell where ${match[1]} is`);
    files.push(match[1].includes("${") ? dir : resolve(dir, match[1]));
  }
  // import.meta.resolve("npm:pkg/file"): a file of a package opened or imported by URL.
  for (const match of source.matchAll(/import\.meta\.resolve\(\s*["']([^"']+)["']\s*\)/g)) {
    files.push(fromFileUrl(import.meta.resolve(match[1])));
  }
  return { workers, files };
}

/** The path with symlinks resolved where it exists (node_modules links into node_modules/.deno). */
function realPath(path: string): string {
  try {
    return Deno.realPathSync(path);
  } catch {
    return path;
  }
}

/** True when `path` is one of `includes` or inside one of them. */
function covered(path: string, includes: string[]): boolean {
  const real = realPath(path);
  return includes.some((include) => {
    const target = realPath(resolve(root, include));
    return real === target || real.startsWith(`${target}/`);
  });
}

Deno.test("deno task compile includes every Worker module and runtime-loaded file of the server", async () => {
  const includes = compileIncludes();
  const seen = new Set<string>();
  const workers: string[] = [];
  const files: string[] = [];
  const queue = [resolve(root, "main.ts")];
  while (queue.length > 0) {
    const entry = queue.shift()!;
    for (const module of await localModules(entry)) {
      if (seen.has(module)) continue;
      seen.add(module);
      const loads = runtimeLoads(module);
      files.push(...loads.files);
      for (const worker of loads.workers) {
        workers.push(worker);
        queue.push(worker);
      }
    }
  }
  // The server's known run-time loads, so a scan that finds nothing cannot pass.
  const rel = (paths: string[]) => [...new Set(paths.map((p) => relative(root, p)))].sort();
  for (const worker of ["media/engine/wasm_worker.ts", "media/mixer/kernel_worker.ts"]) {
    assert.ok(rel(workers).includes(worker), `${worker} not found among ${rel(workers)}`);
  }
  assert.ok(rel(files).includes("wasm/build"), `wasm/build not found among ${rel(files)}`);
  assert.ok(files.some((f) => f.endsWith("ffmpeg-core.wasm")), `ffmpeg-core.wasm: ${rel(files)}`);

  const missing = rel([...workers, ...files].filter((path) => !covered(path, includes)));
  assert.deepEqual(missing, [], `deno.json tasks.compile lacks --include for ${missing}`);
});

Deno.test("every module that compiles wasm is one this test knows how to follow", async () => {
  // A new way of loading wasm needs the scan above taught about it, not silently skipped.
  const loaders: string[] = [];
  for (const module of await localModules(resolve(root, "main.ts"))) {
    const source = Deno.readTextFileSync(module);
    if (/WebAssembly\.(compile|instantiate)(Streaming)?\(/.test(source)) {
      loaders.push(relative(root, module));
    }
  }
  for (const worker of ["media/engine/wasm_worker.ts", "media/mixer/kernel_worker.ts"]) {
    for (const module of await localModules(resolve(root, worker))) {
      const source = Deno.readTextFileSync(module);
      if (/WebAssembly\.(compile|instantiate)(Streaming)?\(/.test(source)) {
        loaders.push(relative(root, module));
      }
    }
  }
  assert.deepEqual([...new Set(loaders)].sort(), [
    "media/engine/wasm.ts",
    "media/engine/wasm_worker.ts",
    "media/mixer/kernel_module.ts",
  ]);
});
