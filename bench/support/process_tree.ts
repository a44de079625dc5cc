/**
 * CPU time and resident memory of a process with all its descendants, as the kernel counts
 * them (/proc), for benchmarks whose subject spawns subprocesses (ffmpeg) that it keeps
 * running: a child's CPU reaches its parent's counters only once it exits and is reaped.
 */

/** Clock ticks per second of /proc/<pid>/stat (USER_HZ on Linux). */
const clockTicksPerSecond = 100;

/** One reading of a process tree. */
export interface TreeSample {
  /** CPU time used so far, in clock ticks, by pid (the root and every descendant). */
  ticks: Map<number, number>;
  /** Resident memory of the root, in MiB. */
  rootRssMiB: number;
  /** Resident memory of the descendants together, in MiB. */
  childrenRssMiB: number;
  /** Descendants alive. */
  children: number;
  /** When it was read, from `performance.now()`. */
  atMs: number;
}

/** The pids of `pid`'s descendants (children of every thread, recursively). */
export function descendants(pid: number): number[] {
  const out: number[] = [];
  const visit = (parent: number) => {
    let tasks: Deno.DirEntry[];
    try {
      tasks = [...Deno.readDirSync(`/proc/${parent}/task`)];
    } catch {
      return; // exited meanwhile
    }
    for (const task of tasks) {
      let list = "";
      try {
        list = Deno.readTextFileSync(`/proc/${parent}/task/${task.name}/children`);
      } catch {
        continue;
      }
      for (const child of list.split(" ").filter(Boolean).map(Number)) {
        out.push(child);
        visit(child);
      }
    }
  };
  visit(pid);
  return out;
}

/** utime + stime of `pid` (all its threads), in clock ticks; undefined once it has exited. */
export function cpuTicks(pid: number): number | undefined {
  try {
    const stat = Deno.readTextFileSync(`/proc/${pid}/stat`);
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return Number(fields[11]) + Number(fields[12]);
  } catch {
    return undefined;
  }
}

/** Resident memory of `pid`, in MiB (0 once it has exited). */
export function rssMiB(pid: number): number {
  try {
    const status = Deno.readTextFileSync(`/proc/${pid}/status`);
    return Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0) / 1024;
  } catch {
    return 0;
  }
}

/** Reads the CPU time and memory of `root` and its descendants. */
export function sampleTree(root: number): TreeSample {
  const ticks = new Map<number, number>();
  const rootTicks = cpuTicks(root);
  if (rootTicks !== undefined) ticks.set(root, rootTicks);
  let childrenRssMiB = 0;
  const children = descendants(root);
  for (const pid of children) {
    const t = cpuTicks(pid);
    if (t === undefined) continue;
    ticks.set(pid, t);
    childrenRssMiB += rssMiB(pid);
  }
  return {
    ticks,
    rootRssMiB: rssMiB(root),
    childrenRssMiB,
    children: children.length,
    atMs: performance.now(),
  };
}

/**
 * CPU used by the tree between two samples, as a share of one core. A process that appeared
 * in between counts from zero; one that exited in between is not counted (its last ticks are
 * unknown), so windows should not span process starts and ends. `only` picks the pids counted
 * (all by default).
 */
export function cpuShareBetween(
  before: TreeSample,
  after: TreeSample,
  only?: (pid: number) => boolean,
): number {
  let ticks = 0;
  for (const [pid, t] of after.ticks) {
    if (!only || only(pid)) ticks += t - (before.ticks.get(pid) ?? 0);
  }
  const seconds = (after.atMs - before.atMs) / 1000;
  return ticks / clockTicksPerSecond / seconds;
}
