/** The native engine: one `ffmpeg` subprocess per job, fed on stdin, read from stdout. */
import {
  type CodecEngine,
  defaultJobTimeoutMs,
  EngineError,
  type EngineJob,
  type LiveJob,
  type LiveJobOptions,
  LogTail,
} from "./engine.ts";
import { ServiceUnavailableError } from "../../core/errors.ts";
import { setPriority } from "node:os";

/**
 * Writes a live job may have waiting for ffmpeg's stdin; beyond it input is dropped, so an
 * ffmpeg that falls behind costs its own output, not server memory (about 5 s of audio).
 */
export const maxPendingLiveWrites = 256;

/**
 * Nice value of the ffmpeg of a whole job (snapshot, conversion): a burst of them would
 * otherwise take the cores from the server's event loop (signaling, REST, /health), which
 * answers within milliseconds only if it runs first. Live jobs keep the server's priority.
 */
export const wholeJobNice = 10;

/** Runs jobs with the `ffmpeg` program found on PATH (or the given path). */
export class NativeEngine implements CodecEngine {
  readonly kind = "native";
  #command: string;
  #running = new Set<Deno.ChildProcess>();
  #closed = false;

  constructor(command = "ffmpeg") {
    this.#command = command;
  }

  /** ffmpeg subprocesses running now. */
  get runningJobs(): number {
    return this.#running.size;
  }

  async run(job: EngineJob): Promise<Uint8Array> {
    if (this.#closed) throw new EngineError("the engine is closed");
    const child = this.#spawn(job);
    // A chunk of live audio (sound_on, chunked conversion) is due in real time: only jobs
    // that can wait give way to the server.
    if (!job.live) lowerPriority(child.pid);
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      kill(child);
    }, job.timeoutMs ?? defaultJobTimeoutMs);
    const log = new LogTail();
    const exited = child.status;
    const feeding = feed(child.stdin, job.input, exited);
    try {
      const [output, , status] = await Promise.all([
        readAll(child.stdout),
        readLog(child.stderr, log),
        exited,
      ]);
      await feeding;
      if (timedOut) throw new EngineError(`ffmpeg timed out: ${log}`);
      if (!status.success) {
        throw new EngineError(
          status.signal ? `ffmpeg stopped by ${status.signal}` : `ffmpeg failed: ${log}`,
        );
      }
      return output;
    } finally {
      clearTimeout(timer);
      this.#running.delete(child);
    }
  }

  start(job: LiveJobOptions): LiveJob {
    if (this.#closed) throw new EngineError("the engine is closed");
    const child = this.#spawn(job);
    return new NativeLiveJob(
      child,
      job.maxPendingWrites ?? maxPendingLiveWrites,
      () => this.#running.delete(child),
    );
  }

  /**
   * One ffmpeg reading `job`'s input from stdin and writing its output to stdout. No
   * descriptor left for its pipes is a 503 (the server is at its open-file limit), any other
   * spawn failure an EngineError.
   */
  #spawn(job: { inputArgs: string[]; outputArgs: string[] }): Deno.ChildProcess {
    let child: Deno.ChildProcess;
    try {
      child = this.#process(job);
    } catch (err) {
      if (/os error 24\b|too many open files/i.test((err as Error).message)) {
        throw new ServiceUnavailableError("no file descriptor left to start ffmpeg", {
          cause: err,
        });
      }
      throw new EngineError(`cannot start ${this.#command}: ${(err as Error).message}`, {
        cause: err,
      });
    }
    this.#running.add(child);
    return child;
  }

  /** The ffmpeg subprocess of `job`, spawned. */
  #process(job: { inputArgs: string[]; outputArgs: string[] }): Deno.ChildProcess {
    return new Deno.Command(this.#command, {
      args: [
        ...["-hide_banner", "-loglevel", "error", "-threads", "1"],
        ...job.inputArgs,
        ...["-i", "pipe:0"],
        ...job.outputArgs,
        "pipe:1",
      ],
      stdin: "piped",
      stdout: "piped",
      stderr: "piped",
    }).spawn();
  }

  async close(): Promise<void> {
    this.#closed = true;
    const children = [...this.#running];
    for (const child of children) kill(child);
    await Promise.allSettled(children.map((c) => c.status));
  }
}

/** One live ffmpeg subprocess. */
class NativeLiveJob implements LiveJob {
  readonly output: AsyncIterable<Uint8Array>;
  #child: Deno.ChildProcess;
  #writer: WritableStreamDefaultWriter<Uint8Array>;
  #pending = 0;
  #maxPending: number;
  #exited = false;
  #done: Promise<void>;
  #log = new LogTail();
  readonly #settled = () => {
    this.#pending--;
  };

  constructor(child: Deno.ChildProcess, maxPending: number, onExit: () => void) {
    this.#child = child;
    this.#maxPending = maxPending;
    this.#writer = child.stdin.getWriter();
    this.output = child.stdout;
    this.#done = Promise.all([readLog(child.stderr, this.#log), child.status]).then(() => {
      this.#exited = true;
      onExit();
    });
  }

  get errors(): string {
    return this.#log.toString();
  }

  write(chunk: Uint8Array, onWritten?: () => void): boolean {
    if (this.#exited || this.#pending >= this.#maxPending) return false;
    this.#pending++;
    const written = this.#writer.write(chunk);
    written.then(this.#settled, this.#settled);
    if (onWritten) written.then(onWritten, onWritten);
    return true;
  }

  async close(): Promise<void> {
    // ffmpeg holds nothing worth flushing for a live reader: stop it at once.
    kill(this.#child);
    await this.#writer.abort().catch(() => {});
    await this.#done;
    // Unread output would keep its pipe open after the process is gone.
    if (!this.#child.stdout.locked) await this.#child.stdout.cancel().catch(() => {});
  }
}

/** Renices a whole job's ffmpeg to `wholeJobNice`; where not allowed (no --allow-sys) it keeps the server's. */
function lowerPriority(pid: number): void {
  try {
    setPriority(pid, wholeJobNice);
  } catch {
    // Not permitted, or exited already: it runs at the server's priority.
  }
}

function kill(child: Deno.ChildProcess): void {
  try {
    child.kill("SIGKILL");
  } catch {
    // Already exited.
  }
}

/**
 * Writes the input to ffmpeg's stdin. It stops when ffmpeg exits, even while the input is
 * waiting for its next chunk (a live source), so no pipe outlives the process.
 */
async function feed(
  stdin: WritableStream<Uint8Array>,
  input: EngineJob["input"],
  exited: Promise<unknown>,
): Promise<void> {
  const writer = stdin.getWriter();
  const stop = exited.then(() => undefined);
  const chunks = input instanceof Uint8Array
    ? [input][Symbol.iterator]()
    : input[Symbol.asyncIterator]();
  try {
    for (;;) {
      const next = await Promise.race([chunks.next(), stop]);
      if (next === undefined) {
        // ffmpeg is gone; let the source finish its pending step on its own.
        Promise.resolve(chunks.return?.()).catch(() => {});
        break;
      }
      if (next.done) break;
      await Promise.race([writer.write(next.value), stop]);
    }
    await writer.close();
  } catch {
    // ffmpeg stopped reading: its exit status tells why.
  }
  await writer.abort().catch(() => {});
}

async function readAll(stream: ReadableStream<Uint8Array>): Promise<Uint8Array> {
  return new Uint8Array(await new Response(stream).arrayBuffer());
}

async function readLog(stream: ReadableStream<Uint8Array>, log: LogTail): Promise<void> {
  const decoder = new TextDecoder();
  for await (const chunk of stream) log.add(decoder.decode(chunk, { stream: true }));
}
