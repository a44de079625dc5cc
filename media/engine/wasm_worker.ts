/**
 * Worker of the wasm engine: runs one ffmpeg.wasm job off the main thread (an `exec` blocks
 * its thread until done) and posts back the output bytes or the error.
 */
import { LogTail } from "./engine.ts";

/** A job as posted to the worker. */
export interface WasmJobMessage {
  /** The compiled ffmpeg-core module, shared so each job skips compilation. */
  module: WebAssembly.Module;
  /** URL of ffmpeg-core.js. */
  coreUrl: string;
  /** Arguments of ffmpeg after the program name. */
  args: string[];
  input: Uint8Array;
  inputName: string;
  outputName: string;
}

/** The answer of the worker. */
export type WasmJobResult =
  | { ok: true; output: Uint8Array }
  | { ok: false; message: string };

interface FfmpegCore {
  FS: { writeFile(name: string, data: Uint8Array): void; readFile(name: string): Uint8Array };
  exec(...args: string[]): number;
  setLogger(logger: (entry: { type: string; message: string }) => void): void;
}

type CreateCore = (options: Record<string, unknown>) => Promise<FfmpegCore>;

const scope = self as unknown as {
  onmessage: ((event: MessageEvent<WasmJobMessage>) => void) | null;
  postMessage(message: WasmJobResult, transfer?: Transferable[]): void;
};

scope.onmessage = async ({ data: job }) => {
  const log = new LogTail();
  try {
    const { default: createCore } = await import(job.coreUrl) as { default: CreateCore };
    const core = await createCore({
      instantiateWasm: (
        imports: WebAssembly.Imports,
        done: (instance: WebAssembly.Instance) => void,
      ) => {
        WebAssembly.instantiate(job.module, imports).then(done);
        return {};
      },
    });
    core.setLogger(({ message }) => log.add(message));
    core.FS.writeFile(job.inputName, job.input);
    const ret = core.exec(...job.args);
    if (ret !== 0) {
      scope.postMessage({ ok: false, message: `ffmpeg.wasm exited ${ret}: ${log}` });
      return;
    }
    const output = core.FS.readFile(job.outputName);
    scope.postMessage({ ok: true, output }, [output.buffer as ArrayBuffer]);
  } catch (err) {
    scope.postMessage({ ok: false, message: `ffmpeg.wasm failed: ${(err as Error).message}` });
  }
};
