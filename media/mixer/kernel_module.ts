/**
 * The one place that loads the kernel wasm (`wasm/build/*.wasm`). Each call gives a fresh
 * instance with its own memory and heap; the compiled module is shared within a thread.
 */

import { type WasmModuleName, wasmOutputUrl } from "../../wasm/build.ts";
import { KernelError } from "./errors.ts";
import { WasmHeap } from "./wasm_heap.ts";

/** An instantiated kernel module: its exports and the allocator of its memory. */
export interface KernelInstance {
  /** The module's exported functions, by name. */
  exports: WebAssembly.Exports;
  heap: WasmHeap;
}

const compiled = new Map<WasmModuleName, Promise<WebAssembly.Module>>();

async function compile(name: WasmModuleName): Promise<WebAssembly.Module> {
  const url = wasmOutputUrl(name);
  let bytes: Uint8Array<ArrayBuffer>;
  try {
    bytes = await Deno.readFile(url);
  } catch (error) {
    throw new KernelError(
      `cannot read ${url.pathname}; build it with \`deno task build:wasm\``,
      { cause: error },
    );
  }
  return await WebAssembly.compile(bytes);
}

/** Called by AssemblyScript's bounds checks; a trap here means a bug in a kernel. */
function abort(_message: number, _file: number, line: number, column: number): never {
  throw new KernelError(`kernel aborted at line ${line}:${column}`);
}

/** Instantiates the kernel module `name` ("video" or "audio"). */
export async function instantiateKernels(name: WasmModuleName): Promise<KernelInstance> {
  let module = compiled.get(name);
  if (!module) {
    module = compile(name);
    compiled.set(name, module);
    module.catch(() => compiled.delete(name));
  }
  const instance = await WebAssembly.instantiate(await module, { env: { abort } });
  const memory = instance.exports.memory;
  if (!(memory instanceof WebAssembly.Memory)) {
    throw new KernelError(`${name}.wasm exports no memory`);
  }
  return { exports: instance.exports, heap: new WasmHeap(memory) };
}
