/**
 * The codec engine: ffmpeg run on bytes, behind one interface with two implementations
 * (native `ffmpeg` subprocess, ffmpeg.wasm in a Worker). Both get the same arguments and the
 * same bytes, so either can be forced and tested.
 */
import { MediaServerError } from "../../core/errors.ts";

/** Which implementation runs the jobs. */
export type EngineKind = "native" | "wasm";

/** One ffmpeg run: `ffmpeg <inputArgs> -i <input> <outputArgs> <output>`. */
export interface EngineJob {
  /** Arguments before the input, e.g. `["-f", "mpegts"]`. */
  inputArgs: string[];
  /** The input bytes, whole or as chunks (the native engine streams them to ffmpeg). */
  input: Uint8Array | AsyncIterable<Uint8Array>;
  /** Arguments after the input and before the output; must name the output format (`-f`). */
  outputArgs: string[];
  /** Longest the job may run before it is killed, in milliseconds. */
  timeoutMs?: number;
  /**
   * A chunk of a live conversion (the audio of a played or pushed stream): it waits ahead of
   * whole jobs in a pool's queue, so a burst of snapshots does not stall live media.
   */
  live?: boolean;
}

/** Default longest run of a job, in milliseconds. */
export const defaultJobTimeoutMs = 60_000;

/** Runs ffmpeg jobs. */
export interface CodecEngine {
  readonly kind: EngineKind;
  /** Runs a job; resolves with everything ffmpeg wrote to its output. */
  run(job: EngineJob): Promise<Uint8Array>;
  /**
   * Starts a live job, when the engine can stream (native); engines that only take whole
   * inputs (wasm) lack it and callers convert in chunks instead.
   */
  start?(job: LiveJobOptions): LiveJob;
  /** ffmpeg subprocesses (native) or Workers (wasm) running now, whole and live jobs. */
  readonly runningJobs?: number;
  /** Kills the running jobs (their `run` rejects) and refuses new ones. */
  close(): Promise<void>;
}

/** ffmpeg failed, timed out or was stopped; the message carries ffmpeg's last error lines. */
export class EngineError extends MediaServerError {
  constructor(message: string, options?: ErrorOptions) {
    super(500, "engine failed", message, options);
  }
}

/** The input of a job as one byte array (the wasm engine needs it whole). */
export async function collectInput(input: EngineJob["input"]): Promise<Uint8Array> {
  if (input instanceof Uint8Array) return input;
  const chunks: Uint8Array[] = [];
  let length = 0;
  for await (const chunk of input) {
    chunks.push(chunk);
    length += chunk.length;
  }
  const out = new Uint8Array(length);
  let offset = 0;
  for (const chunk of chunks) {
    out.set(chunk, offset);
    offset += chunk.length;
  }
  return out;
}

/** Keeps the last `maxLines` lines of ffmpeg's log, for error messages. */
export class LogTail {
  #lines: string[] = [];
  constructor(private readonly maxLines = 8) {}
  /** Adds text (may hold several lines). */
  add(text: string): void {
    for (const line of text.split("\n")) {
      if (line.trim() === "") continue;
      this.#lines.push(line.trim());
      if (this.#lines.length > this.maxLines) this.#lines.shift();
    }
  }
  toString(): string {
    return this.#lines.join(" | ");
  }
}

/** A long-running ffmpeg: `ffmpeg <inputArgs> -i <stdin> <outputArgs> <stdout>`. */
export interface LiveJobOptions {
  /** Arguments before the input, e.g. `["-f", "mpegts"]`. */
  inputArgs: string[];
  /** Arguments after the input; must name the output format (`-f`). */
  outputArgs: string[];
  /**
   * Writes that may wait for ffmpeg's stdin before `write` drops (default
   * `maxPendingLiveWrites`); raw video, a megabyte a frame, needs far fewer.
   */
  maxPendingWrites?: number;
}

/** A running live job: bytes in as they come, bytes out as ffmpeg writes them. */
export interface LiveJob {
  /**
   * Queues bytes for ffmpeg's input; false when they were dropped (ffmpeg is behind or gone).
   * `onWritten`, when given, is called once the bytes are no longer needed (written, or the
   * write failed), so their buffer can be reused; not called when the write was refused.
   */
  write(chunk: Uint8Array, onWritten?: () => void): boolean;
  /** ffmpeg's output, chunk by chunk; ends when ffmpeg exits. */
  readonly output: AsyncIterable<Uint8Array>;
  /** ffmpeg's last error lines (why its output ended early). */
  readonly errors: string;
  /** Stops ffmpeg and waits for it to exit (idempotent). */
  close(): Promise<void>;
}
