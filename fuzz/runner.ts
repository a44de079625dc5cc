/**
 * The fuzz runner: each target of fuzz/targets.ts runs in a Worker over mutated inputs of its
 * seed corpus (fuzz/corpus/<name>/). An input that throws anything but a ParseError is a
 * crash, one that runs longer than `hangMs` a hang (the Worker is ended and restarted after
 * it), one slower than `slowMs` twice in a row a slow input. Findings are saved with their
 * input under `findingsDir`; input `i` of seed `s` can also be made again from those numbers.
 */
import type { FuzzJob, FuzzMessage } from "./worker.ts";
import type { FuzzTarget } from "./targets.ts";

/** What a run does. */
export interface FuzzOptions {
  /** Inputs per target. */
  inputsPerTarget: number;
  /** Seed of the mutations (same seed, same inputs). */
  seed: number;
  /** Names of the targets to run; all when absent. */
  only?: readonly string[];
  /** An input running longer is a hang, in milliseconds. */
  hangMs?: number;
  /** An input running longer (twice) is slow, in milliseconds. */
  slowMs?: number;
  /** Where findings are saved (a folder per target); not saved when absent. */
  findingsDir?: string;
  /** Progress lines. */
  log?: (line: string) => void;
  /** URL of the module whose `targets` are run; fuzz/targets.ts by default. */
  targetsModule?: string;
}

/** One finding. */
export interface Finding {
  kind: "crash" | "hang" | "slow";
  index: number;
  ms: number;
  /** The error of a crash (stack), empty otherwise. */
  error: string;
  /** Where the input was saved, if it was. */
  file?: string;
}

/** What one target did. */
export interface TargetReport {
  name: string;
  inputs: number;
  /** Inputs refused with a ParseError. */
  rejected: number;
  ms: number;
  crashes: Finding[];
  /** Distinct crashes (by error and the first frame in the project). */
  distinctCrashes: number;
  hangs: Finding[];
  slow: Finding[];
}

/** Default hang limit, in milliseconds. */
export const defaultHangMs = 1000;
/** Default slow-input limit, in milliseconds. */
export const defaultSlowMs = 50;
/** Findings of one kind and key saved at most (the rest are counted). */
const maxSavedPerKey = 3;
/** How often the runner looks for a hang, in milliseconds. */
const watchIntervalMs = 100;

const corpusDir = new URL("./corpus/", import.meta.url).pathname;
/** The module of the project's targets. */
export const defaultTargetsModule = new URL("./targets.ts", import.meta.url).href;

/** The seeds of a target: its corpus files, as its `seeds` makes them. */
export function loadSeeds(target: FuzzTarget): Uint8Array[] {
  const dir = `${corpusDir}${target.corpus ?? target.name}`;
  let names: string[] = [];
  try {
    names = [...Deno.readDirSync(dir)].filter((e) => e.isFile).map((e) => e.name).sort();
  } catch (err) {
    if (!(err instanceof Deno.errors.NotFound)) throw err;
  }
  const files = names.map((name) => Deno.readFileSync(`${dir}/${name}`));
  const seeds = target.seeds ? target.seeds(files) : files;
  if (seeds.length === 0) throw new Error(`no seeds for fuzz target ${target.name} in ${dir}`);
  return seeds;
}

/** A crash's identity: the error line without numbers and its first frame in the project. */
function crashKey(error: string): string {
  const lines = error.split("\n");
  const frame = lines.find((l) => /\/(media|signaling|core)\//.test(l)) ?? "";
  return `${lines[0].replace(/\d+/g, "N")} ${frame.trim()}`;
}

/** Runs the targets one after the other; resolves with a report per target. */
export async function runFuzz(options: FuzzOptions): Promise<TargetReport[]> {
  const targetsModule = options.targetsModule ?? defaultTargetsModule;
  const { targets } = await import(targetsModule) as { targets: readonly FuzzTarget[] };
  const reports: TargetReport[] = [];
  for (const target of targets) {
    if (options.only && !options.only.includes(target.name)) continue;
    reports.push(await runTarget(target, { ...options, targetsModule }));
  }
  return reports;
}

async function runTarget(target: FuzzTarget, options: FuzzOptions): Promise<TargetReport> {
  const hangMs = options.hangMs ?? defaultHangMs;
  const slowMs = options.slowMs ?? defaultSlowMs;
  const seeds = loadSeeds(target);
  const control = new SharedArrayBuffer(3 * Int32Array.BYTES_PER_ELEMENT);
  const input = new SharedArrayBuffer(target.maxBytes);
  const report: TargetReport = {
    name: target.name,
    inputs: 0,
    rejected: 0,
    ms: 0,
    crashes: [],
    distinctCrashes: 0,
    hangs: [],
    slow: [],
  };
  const saved = new Map<string, number>();
  const save = async (finding: Finding, bytes: Uint8Array, key: string) => {
    const count = saved.get(key) ?? 0;
    saved.set(key, count + 1);
    if (!options.findingsDir || count >= maxSavedPerKey) return;
    const dir = `${options.findingsDir}/${target.name}`;
    await Deno.mkdir(dir, { recursive: true });
    finding.file = `${dir}/${finding.kind}-${options.seed}-${finding.index}.bin`;
    await Deno.writeFile(finding.file, bytes);
    await Deno.writeTextFile(
      finding.file.replace(/\.bin$/, ".txt"),
      `target ${target.name}, seed ${options.seed}, input ${finding.index}, ${
        finding.ms.toFixed(1)
      } ms\nreplay: deno task fuzz --target ${target.name} --replay ${finding.file}\n\n${finding.error}\n`,
    );
  };

  const started = performance.now();
  let next = 0;
  while (next < options.inputsPerTarget) {
    const outcome = await runWorker(
      target,
      {
        targetsModule: options.targetsModule ?? defaultTargetsModule,
        target: target.name,
        seeds,
        seed: options.seed,
        start: next,
        end: options.inputsPerTarget,
        slowMs,
        control,
        input,
      },
      hangMs,
      async (message) => {
        if (message.kind === "crash") {
          const finding: Finding = {
            kind: "crash",
            index: message.index,
            ms: message.ms,
            error: message.error,
          };
          const key = crashKey(message.error);
          if (!saved.has(key)) {
            report.distinctCrashes++;
            options.log?.(
              `${target.name}: crash at input ${message.index}: ${message.error.split("\n")[0]}`,
            );
          }
          report.crashes.push(finding);
          await save(finding, message.input, key);
        } else if (message.kind === "slow") {
          const finding: Finding = {
            kind: "slow",
            index: message.index,
            ms: message.ms,
            error: "",
          };
          report.slow.push(finding);
          options.log?.(`${target.name}: slow input ${message.index}: ${message.ms.toFixed(0)} ms`);
          await save(finding, message.input, "slow");
        }
      },
    );
    report.inputs += outcome.done;
    report.rejected += outcome.rejected;
    if (outcome.hang) {
      const { index, bytes } = outcome.hang;
      const finding: Finding = { kind: "hang", index, ms: hangMs, error: "" };
      report.hangs.push(finding);
      report.inputs++;
      options.log?.(`${target.name}: hang at input ${index} (> ${hangMs} ms)`);
      await save(finding, bytes, "hang");
      next = index + 1;
    } else {
      next = options.inputsPerTarget;
    }
  }
  report.ms = performance.now() - started;
  return report;
}

/** How a worker ended: all its inputs done, or stopped on a hang. */
interface WorkerOutcome {
  done: number;
  rejected: number;
  hang?: { index: number; bytes: Uint8Array };
}

function runWorker(
  target: FuzzTarget,
  job: FuzzJob,
  hangMs: number,
  onFinding: (message: FuzzMessage) => Promise<void>,
): Promise<WorkerOutcome> {
  const worker = new Worker(new URL("./worker.ts", import.meta.url), { type: "module" });
  const control = new Int32Array(job.control);
  Atomics.store(control, 0, 0);
  const { promise, resolve, reject } = Promise.withResolvers<WorkerOutcome>();
  let rejected = 0;
  let pending = Promise.resolve();
  let watched = { index: -1, since: 0 };
  const finish = (outcome: WorkerOutcome | Error) => {
    clearInterval(watch);
    worker.terminate();
    // Findings posted before the end are saved before the outcome is given.
    pending.then(() => outcome instanceof Error ? reject(outcome) : resolve(outcome), reject);
  };
  const watch = setInterval(() => {
    if (Atomics.load(control, 0) !== 1) return;
    const index = Atomics.load(control, 1);
    const now = performance.now();
    if (index !== watched.index) {
      watched = { index, since: now };
      return;
    }
    if (now - watched.since < hangMs) return;
    const length = Atomics.load(control, 2);
    const bytes = new Uint8Array(job.input).slice(0, length);
    finish({ done: index - job.start, rejected, hang: { index, bytes } });
  }, watchIntervalMs);
  worker.onmessage = (event: MessageEvent<FuzzMessage>) => {
    const message = event.data;
    if (message.kind === "progress") {
      rejected = message.rejected;
    } else if (message.kind === "done") {
      finish({ done: message.done, rejected: message.rejected });
    } else {
      pending = pending.then(() => onFinding(message));
    }
  };
  worker.onerror = (event) => {
    event.preventDefault();
    finish(new Error(`fuzz worker of ${target.name} failed: ${event.message}`));
  };
  worker.postMessage(job);
  return promise;
}
