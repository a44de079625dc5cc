/**
 * The `ffmpeg` CLI as a benchmark's peer: CLIs run side by side in real time (`-re`) and
 * measured over one window, CPU from /proc and output frames from their `-progress` lines.
 */
import { cpuShareBetween, sampleTree } from "./process_tree.ts";

/** What a set of ffmpeg CLIs gives over one window. */
export interface PeerRun {
  /** All the CLIs together, share of one core. */
  cpu: number;
  /** Output frames per second of each CLI (its first output). */
  outFps: number[];
  /** Resident memory of all the CLIs together, in MiB. */
  rssMiB: number;
}

/** When a peer window opens and how long it lasts. */
export interface PeerTiming {
  /** Longest wait for every CLI's first output frame, in milliseconds. */
  flowTimeoutMs: number;
  /** Time from every CLI's first frame to the window, in milliseconds. */
  warmupMs: number;
  /** Measuring window, in milliseconds. */
  windowMs: number;
}

/** Arguments that make ffmpeg quiet and write its progress (`frame=N` lines) on stdout. */
export const peerProgressArgs = [
  ...["-hide_banner", "-loglevel", "error", "-nostats", "-progress", "pipe:1"],
];

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Runs one CLI per argument list (each starting with `peerProgressArgs`) side by side and
 * measures a window once each has encoded and warmed up; every CLI is killed afterwards.
 */
export async function runPeers(argLists: string[][], timing: PeerTiming): Promise<PeerRun> {
  const children = argLists.map((args) =>
    new Deno.Command("ffmpeg", { args, stdin: "null", stdout: "piped", stderr: "inherit" })
      .spawn()
  );
  // Frames each CLI has written (its first output's `frame=` progress line).
  const frames = children.map(() => 0);
  const reading = children.map(async (child, i) => {
    let text = "";
    for await (const chunk of child.stdout.pipeThrough(new TextDecoderStream())) {
      text += chunk;
      const lines = text.split("\n");
      text = lines.pop() ?? "";
      for (const line of lines) {
        const m = /^frame=(\d+)/.exec(line);
        if (m) frames[i] = Number(m[1]);
      }
    }
  });
  try {
    const deadline = performance.now() + timing.flowTimeoutMs;
    while (frames.some((n) => n === 0)) {
      if (performance.now() > deadline) throw new Error("an ffmpeg peer wrote no frame");
      await sleep(50);
    }
    await sleep(timing.warmupMs);
    const pids = children.map((c) => c.pid);
    const sampleAll = () => pids.map((pid) => sampleTree(pid));
    const framesBefore = [...frames];
    const start = sampleAll();
    await sleep(timing.windowMs);
    const end = sampleAll();
    const seconds = (end[0].atMs - start[0].atMs) / 1000;
    return {
      cpu: start.reduce((sum, s, i) => sum + cpuShareBetween(s, end[i]), 0),
      // Progress lines come about every 0.5 s: the count is read at that granularity.
      outFps: frames.map((n, i) => (n - framesBefore[i]) / seconds),
      rssMiB: end.reduce((sum, s) => sum + s.rootRssMiB, 0),
    };
  } finally {
    for (const child of children) {
      try {
        child.kill("SIGKILL");
      } catch {
        // Exited already.
      }
    }
    await Promise.all(children.map((c) => c.status));
    await Promise.all(reading);
  }
}
