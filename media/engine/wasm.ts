/**
 * The wasm engine: ffmpeg.wasm (@ffmpeg/core, single thread) in one Worker per job, fed the
 * whole input at once. Slower than native ffmpeg (about 2-5x) but needs nothing installed.
 */
import {
  type CodecEngine,
  collectInput,
  defaultJobTimeoutMs,
  EngineError,
  type EngineJob,
} from "./engine.ts";
import type { WasmJobMessage, WasmJobResult } from "./wasm_worker.ts";

const coreUrl = import.meta.resolve("npm:@ffmpeg/core@0.12.10");
const wasmUrl = import.meta.resolve("npm:@ffmpeg/core@0.12.10/wasm");

/** Compiles ffmpeg-core.wasm, read from the local node_modules (deno.json: nodeModulesDir). */
async function loadModule(): Promise<WebAssembly.Module> {
  if (!wasmUrl.startsWith("file:")) {
    throw new EngineError(`@ffmpeg/core is not in a local node_modules folder (${wasmUrl})`);
  }
  return await WebAssembly.compile(await Deno.readFile(new URL(wasmUrl)));
}

/** Runs jobs in ffmpeg.wasm Workers. */
export class WasmEngine implements CodecEngine {
  readonly kind = "wasm";
  #module: Promise<WebAssembly.Module> | undefined;
  #running = new Map<Worker, (err: Error) => void>();
  #closed = false;

  /** ffmpeg.wasm Workers running now. */
  get runningJobs(): number {
    return this.#running.size;
  }

  async run(job: EngineJob): Promise<Uint8Array> {
    if (this.#closed) throw new EngineError("the engine is closed");
    // Compiled once per engine: compiling the 32 MB module is most of a job's start-up.
    this.#module ??= loadModule();
    const [module, input] = await Promise.all([this.#module, collectInput(job.input)]);
    if (this.#closed) throw new EngineError("the engine is closed");
    const message: WasmJobMessage = {
      module,
      coreUrl,
      args: [
        "-hide_banner",
        "-loglevel",
        "error",
        ...job.inputArgs,
        "-i",
        "input",
        ...job.outputArgs,
        "output",
      ],
      input,
      inputName: "input",
      outputName: "output",
    };
    const worker = new Worker(new URL("./wasm_worker.ts", import.meta.url), { type: "module" });
    const { promise, resolve, reject } = Promise.withResolvers<Uint8Array>();
    this.#running.set(worker, reject);
    const timer = setTimeout(
      () => reject(new EngineError("ffmpeg.wasm timed out")),
      job.timeoutMs ?? defaultJobTimeoutMs,
    );
    worker.onmessage = ({ data }: MessageEvent<WasmJobResult>) => {
      if (data.ok) resolve(data.output);
      else reject(new EngineError(data.message));
    };
    worker.onerror = (event) => {
      event.preventDefault();
      reject(new EngineError(`ffmpeg.wasm worker failed: ${event.message}`));
    };
    worker.postMessage(message);
    try {
      return await promise;
    } finally {
      clearTimeout(timer);
      worker.terminate();
      this.#running.delete(worker);
    }
  }

  close(): Promise<void> {
    this.#closed = true;
    for (const [worker, reject] of this.#running) {
      worker.terminate();
      reject(new EngineError("the engine was closed"));
    }
    this.#running.clear();
    return Promise.resolve();
  }
}
