/**
 * Builds the AssemblyScript media kernels (`wasm/assembly/*.ts`) into `wasm/build/*.wasm`
 * with SIMD on. Run `deno run -A wasm/build.ts` to build everything, or add `--if-stale` to
 * build only the outputs that are missing or older than their source or this script.
 *
 * The compiler is imported only when something has to be built, so the stale check of
 * `deno task start` and `deno task test` costs a few `stat` calls.
 */

/** The kernel modules: each is one self-contained AssemblyScript entry file. */
export const wasmModuleNames = ["video", "audio"] as const;

/** Name of a kernel module, e.g. "video" for `wasm/build/video.wasm`. */
export type WasmModuleName = typeof wasmModuleNames[number];

/** Folder of the built `.wasm` files (gitignored). */
export const wasmBuildDir: URL = new URL("./build/", import.meta.url);

const sourceDir = new URL("./assembly/", import.meta.url);
const compilerSpecifier = "npm:assemblyscript@0.28.20/asc";
const compilerFlags = ["-O3", "--runtime", "stub", "--enable", "simd"];

/** Where the built module `name` is written. */
export function wasmOutputUrl(name: WasmModuleName): URL {
  return new URL(`${name}.wasm`, wasmBuildDir);
}

function mtimeMs(url: URL): number | undefined {
  try {
    return Deno.statSync(url).mtime?.getTime();
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) return undefined;
    throw error;
  }
}

/** True when `name`'s output is missing or older than its source or this build script. */
export function isStale(name: WasmModuleName): boolean {
  const built = mtimeMs(wasmOutputUrl(name));
  if (built === undefined) return true;
  const inputs = [new URL(`${name}.ts`, sourceDir), new URL(import.meta.url)];
  return inputs.some((input) => (mtimeMs(input) ?? Infinity) > built);
}

/** Options of {@link buildWasm}. */
export interface BuildOptions {
  /** Build only outputs that are missing or stale (default false: build all). */
  ifStale?: boolean;
}

/**
 * Compiles the kernel modules and returns the names it built. Each output is written to a
 * temporary file and renamed, so concurrent builds (parallel test processes) never expose a
 * half-written module.
 */
export async function buildWasm(options: BuildOptions = {}): Promise<WasmModuleName[]> {
  const names = wasmModuleNames.filter((name) => !options.ifStale || isStale(name));
  if (names.length === 0) return [];
  const { default: asc } = await import(compilerSpecifier);
  await Deno.mkdir(wasmBuildDir, { recursive: true });
  for (const name of names) {
    const output = wasmOutputUrl(name);
    const temporary = new URL(`${name}.${Deno.pid}.tmp.wasm`, wasmBuildDir);
    const errors: string[] = [];
    const stderr = {
      write(chunk: string | Uint8Array) {
        errors.push(typeof chunk === "string" ? chunk : new TextDecoder().decode(chunk));
        return true;
      },
    };
    const result = await asc.main(
      [new URL(`${name}.ts`, sourceDir).pathname, ...compilerFlags, "-o", temporary.pathname],
      { stderr },
    );
    if (result.error) {
      await Deno.remove(temporary).catch(() => {});
      throw new Error(`building ${name}.wasm failed: ${result.error.message}\n${errors.join("")}`);
    }
    await Deno.rename(temporary, output);
  }
  return names;
}

if (import.meta.main) {
  const ifStale = Deno.args.includes("--if-stale");
  const built = await buildWasm({ ifStale });
  if (built.length > 0) console.log(`wasm: built ${built.map((n) => `${n}.wasm`).join(", ")}`);
}
