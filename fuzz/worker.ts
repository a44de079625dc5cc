/**
 * Runs one fuzz target over a range of input indexes, in a Worker so the runner can end it
 * when an input hangs. Before each input it publishes the index and the bytes in shared
 * memory (the runner saves them on a hang); crashes and slow inputs are posted back.
 */
/// <reference lib="deno.worker" />
import { makeInput } from "./mutators.ts";
import { type FuzzTarget, isTypedError } from "./targets.ts";

/** What the runner asks of a worker. */
export interface FuzzJob {
  /** URL of the module exporting `targets`. */
  targetsModule: string;
  target: string;
  seeds: Uint8Array[];
  seed: number;
  /** First and one-past-last input index. */
  start: number;
  end: number;
  /** Longer than this an input is slow, in milliseconds. */
  slowMs: number;
  /** Int32 slots: [running flag, current index, current input length]. */
  control: SharedArrayBuffer;
  /** The current input's bytes. */
  input: SharedArrayBuffer;
}

/** What a worker reports. */
export type FuzzMessage =
  | { kind: "progress"; done: number; rejected: number }
  | { kind: "crash"; index: number; input: Uint8Array; error: string; ms: number }
  | { kind: "slow"; index: number; input: Uint8Array; ms: number }
  | { kind: "done"; done: number; rejected: number };

/** Inputs between two progress messages. */
const progressEvery = 2048;

/** The error of one run of `input`, or undefined, and the milliseconds it took. */
async function runOnce(
  run: (input: Uint8Array) => void | Promise<void>,
  input: Uint8Array,
): Promise<{ error: unknown; ms: number }> {
  const t0 = performance.now();
  let error: unknown;
  try {
    await run(input);
  } catch (err) {
    error = err ?? new Error(`thrown ${err}`);
  }
  return { error, ms: performance.now() - t0 };
}

function describe(error: unknown): string {
  return error instanceof Error ? `${error.stack ?? error}` : `thrown non-Error: ${error}`;
}

self.onmessage = async (event: MessageEvent<FuzzJob>) => {
  const job = event.data;
  const { targets } = await import(job.targetsModule) as { targets: readonly FuzzTarget[] };
  const target = targets.find((t) => t.name === job.target);
  if (!target) throw new Error(`no fuzz target ${job.target}`);
  const run = target.run.bind(target);
  const control = new Int32Array(job.control);
  const shared = new Uint8Array(job.input);
  let rejected = 0;
  let done = 0;
  for (let index = job.start; index < job.end; index++) {
    const input = makeInput(job.seeds, job.seed, index, target.maxBytes);
    shared.set(input);
    Atomics.store(control, 2, input.length);
    Atomics.store(control, 1, index);
    Atomics.store(control, 0, 1);
    const first = await runOnce(run, input);
    Atomics.store(control, 0, 0);
    done++;
    if (first.error !== undefined && !isTypedError(target, first.error)) {
      const message: FuzzMessage = {
        kind: "crash",
        index,
        input: input.slice(),
        error: describe(first.error),
        ms: first.ms,
      };
      self.postMessage(message);
    } else if (first.error !== undefined) {
      rejected++;
    }
    if (first.ms > job.slowMs) {
      // A second run tells a slow input from a pause of the machine (GC, other processes).
      const again = await runOnce(run, input);
      const ms = Math.min(first.ms, again.ms);
      if (ms > job.slowMs) {
        const message: FuzzMessage = { kind: "slow", index, input: input.slice(), ms };
        self.postMessage(message);
      }
    }
    if (done % progressEvery === 0) {
      const message: FuzzMessage = { kind: "progress", done, rejected };
      self.postMessage(message);
    }
  }
  const message: FuzzMessage = { kind: "done", done, rejected };
  self.postMessage(message);
};
