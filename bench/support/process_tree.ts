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
  /** Resident memory of each descendant, in MiB, by pid. */
  childRssMiB: Map<number, number>;
  /** Descendants alive. */
  children: number;
  /**
   * CPU time of the root's threads so far, in clock ticks, by thread name with its number
   * left out ("deno" the main thread, "worker" Workers, "tokio-runtime-w" I/O, "V8
   * DefaultWorke" the engine's helpers such as the garbage collector), each thread by its id.
   */
  threads: Map<number, { name: string; ticks: number }>;
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
  return ticksOf(`/proc/${pid}/stat`);
}

/** utime + stime of the process or thread whose stat file is `path`. */
function ticksOf(path: string): number | undefined {
  try {
    const stat = Deno.readTextFileSync(path);
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
  const childRssMiB = new Map<number, number>();
  const children = descendants(root);
  for (const pid of children) {
    const t = cpuTicks(pid);
    if (t === undefined) continue;
    ticks.set(pid, t);
    const rss = rssMiB(pid);
    childRssMiB.set(pid, rss);
    childrenRssMiB += rss;
  }
  const threads = new Map<number, { name: string; ticks: number }>();
  try {
    for (const task of Deno.readDirSync(`/proc/${root}/task`)) {
      try {
        const tid = Number(task.name);
        const name = Deno.readTextFileSync(`/proc/${root}/task/${tid}/comm`).trim()
          .replace(/-\d+$/, "");
        const t = ticksOf(`/proc/${root}/task/${tid}/stat`);
        if (t !== undefined) threads.set(tid, { name, ticks: t });
      } catch {
        // The thread ended meanwhile.
      }
    }
  } catch {
    // The root exited.
  }
  return {
    ticks,
    threads,
    rootRssMiB: rssMiB(root),
    childrenRssMiB,
    childRssMiB,
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

/**
 * CPU used by the root's threads between two samples, by thread name, as shares of one core,
 * largest first (threads that ended in between are not counted).
 */
export function threadSharesBetween(before: TreeSample, after: TreeSample): [string, number][] {
  const seconds = (after.atMs - before.atMs) / 1000;
  const byName = new Map<string, number>();
  for (const [tid, { name, ticks }] of after.threads) {
    const used = ticks - (before.threads.get(tid)?.ticks ?? 0);
    byName.set(name, (byName.get(name) ?? 0) + used / clockTicksPerSecond / seconds);
  }
  return [...byName].sort((a, b) => b[1] - a[1]);
}
