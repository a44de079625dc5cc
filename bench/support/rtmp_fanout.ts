/**
 * RTMP fan-out measurement shared by the benchmarks: a CBR H.264+AAC source looped by an
 * ffmpeg publisher, light RTMP players of our own (all in the bench's process, so a server's
 * figures are its own), windows of CPU time (utime + stime from /proc/<pid>/stat) and lowest
 * resident memory of the serving processes, and per player figures as the least-squares slope
 * from idle through the steps every player kept up with. A step keeps up when every player
 * received at least 95% of the source's bytes over the window.
 */
import { openRtmpClient, type RtmpClientSession } from "../../media/protocols/rtmp/client.ts";
import type { RtmpMessage } from "../../media/protocols/rtmp/message.ts";
import { parseRtmpUrl } from "../../media/protocols/rtmp/url.ts";

/** Length of each measurement window, in milliseconds: whole GOPs, so windows carry alike bytes. */
export const measureMs = 8_000;
/** Interval between RSS samples within a window, in milliseconds. */
const rssSampleMs = 250;
/** Time given to new players to take the cached GOP and settle before measuring, in ms. */
const warmupMs = 2_000;
/** Video bitrate of the source, in kbit/s (plus 96 kbit/s AAC). */
export const videoKbps = 1900;
/** Length of the source file, looped by the publisher, in seconds. */
export const sourceSeconds = 10;
/** Keyframe interval of the source, in frames (2 s at 25 fps). */
const sourceGopFrames = 50;
/** Share of the source's bytes a player must receive to count as keeping up. */
export const keepUpShare = 0.95;
/** Players connecting at once while a step is set up. */
const connectBatch = 25;
/** File descriptors kept free of players in each process (listeners, ffmpeg, files). */
const spareFds = 64;
/** Share of a core above which the players' process (one JS thread) may hold players back. */
const playersCoresLimit = 0.8;
/** Time a published stream is given to become playable, in ms. */
const playableTimeoutMs = 15_000;
/** Linux USER_HZ: the unit of utime and stime in /proc/<pid>/stat. */
const clockTicksPerSecond = 100;

/**
 * The player steps asked in the environment variable `variable` (comma-separated, else
 * `fallback`) that the soft open file limit of this (the players') process can hold.
 */
export function playerSteps(variable: string, fallback: string): number[] {
  const asked = (Deno.env.get(variable) ?? fallback).split(",").map(Number);
  const limits = Deno.readTextFileSync("/proc/self/limits");
  const fds = Number(limits.match(/Max open files\s+(\d+)/)?.[1] ?? 1024);
  const fit = asked.filter((n) => n > 0 && n + spareFds <= fds).sort((a, b) => a - b);
  if (fit.length < asked.length) console.log(`open file limit ${fds}: steps ${fit.join(",")}`);
  if (fit.length === 0) throw new Error("no player step fits the open file limit");
  return fit;
}

interface Usage {
  cpuSeconds: number;
  rssKb: number;
}

function usage(pids: number[]): Usage {
  let ticks = 0;
  let rssKb = 0;
  for (const pid of pids) {
    const stat = Deno.readTextFileSync(`/proc/${pid}/stat`);
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    ticks += Number(fields[11]) + Number(fields[12]); // utime, stime
    const status = Deno.readTextFileSync(`/proc/${pid}/status`);
    rssKb += Number(status.match(/VmRSS:\s+(\d+)/)?.[1] ?? 0);
  }
  return { cpuSeconds: ticks / clockTicksPerSecond, rssKb };
}

/**
 * Usage of one window: cores of the measured pids and of this (the players') process, and
 * the lowest RSS of the pids seen in it: a garbage-collected server's RSS climbs with garbage
 * between collections, at a rate set by the stream rather than the players, and the
 * low-water mark is the least affected by when a collection happened to run.
 */
export interface Window {
  cores: number;
  playersCores: number;
  rssKb: number;
}

/** Measures `ms` of each group of pids (one Window per group, same wall-clock window). */
export async function measureGroups(groups: number[][], ms: number): Promise<Window[]> {
  const before = groups.map((pids) => usage(pids));
  const self = usage([Deno.pid]);
  const started = performance.now();
  const rssKb = before.map((u) => u.rssKb);
  for (let waited = 0; waited < ms; waited += rssSampleMs) {
    await new Promise((r) => setTimeout(r, rssSampleMs));
    groups.forEach((pids, i) => rssKb[i] = Math.min(rssKb[i], usage(pids).rssKb));
  }
  const after = groups.map((pids) => usage(pids));
  const seconds = (performance.now() - started) / 1000;
  const playersCores = (usage([Deno.pid]).cpuSeconds - self.cpuSeconds) / seconds;
  return groups.map((_, i) => ({
    cores: (after[i].cpuSeconds - before[i].cpuSeconds) / seconds,
    playersCores,
    rssKb: rssKb[i],
  }));
}

/** Measures `ms` of `pids` together. */
export async function measure(pids: number[], ms: number): Promise<Window> {
  return (await measureGroups([pids], ms))[0];
}

/** Makes the CBR source (FLV) in a temporary file; the caller removes it. */
export async function makeSource(): Promise<string> {
  const path = await Deno.makeTempFile({ suffix: ".flv" });
  const out = await new Deno.Command("ffmpeg", {
    args: [
      ...["-v", "error", "-y", "-f", "lavfi", "-i", "testsrc2=size=1280x720:rate=25"],
      ...["-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000", "-t", `${sourceSeconds}`],
      ...["-c:v", "libx264", "-preset", "ultrafast", "-g", `${sourceGopFrames}`],
      ...["-pix_fmt", "yuv420p", "-b:v", `${videoKbps}k`, "-minrate", `${videoKbps}k`],
      ...["-maxrate", `${videoKbps}k`, "-bufsize", `${videoKbps}k`, "-x264-params", "nal-hrd=cbr"],
      ...["-threads", "2", "-c:a", "aac", "-b:a", "96k", "-f", "flv", path],
    ],
    stdout: "null",
    stderr: "piped",
  }).output();
  if (!out.success) throw new Error(new TextDecoder().decode(out.stderr));
  return path;
}

/** ffmpeg publishing `source` in real time, looped, to the RTMP `url`. */
export function publishLoop(source: string, url: string): Deno.ChildProcess {
  return new Deno.Command("ffmpeg", {
    args: [
      ...["-v", "error", "-re", "-stream_loop", "-1", "-i", source],
      ...["-c", "copy", "-f", "flv", url],
    ],
    stdin: "null",
    stdout: "null",
    stderr: "null",
  }).spawn();
}

/** Stops a publisher of `publishLoop`. */
export async function stopPublisher(publisher: Deno.ChildProcess): Promise<void> {
  try {
    publisher.kill("SIGKILL");
  } catch {
    // Exited already.
  }
  await publisher.status;
}

/**
 * A player that reads and drops everything; counts the media bytes it got and hands each
 * message to `onMessage` when given (timing benchmarks).
 */
export class LightPlayer {
  bytes = 0;
  #session: RtmpClientSession | undefined;
  #done: Promise<void> | undefined;
  #onMessage?: (message: RtmpMessage) => void;

  constructor(onMessage?: (message: RtmpMessage) => void) {
    this.#onMessage = onMessage;
  }

  async open(url: string): Promise<void> {
    this.#session = await openRtmpClient(parseRtmpUrl(url, "url"), "play");
    const session = this.#session;
    const onMessage = this.#onMessage;
    this.#done = (async () => {
      try {
        for await (const m of session.messages) {
          this.bytes += m.payload.length;
          onMessage?.(m);
        }
      } catch {
        // Closed at the end of the run.
      }
    })();
  }

  async close(): Promise<void> {
    this.#session?.conn.close();
    await this.#done;
  }
}

/** Waits until a probe player of `url` gets media; throws after `playableTimeoutMs`. */
export async function waitUntilPlayable(url: string, label: string): Promise<void> {
  const probe = new LightPlayer();
  const deadline = Date.now() + playableTimeoutMs;
  for (;;) {
    try {
      await probe.open(url);
      await new Promise((r) => setTimeout(r, 1000));
      await probe.close();
      if (probe.bytes > 0) return;
    } catch {
      // Not published yet.
    }
    if (Date.now() > deadline) throw new Error(`${label}: the stream never played`);
    await new Promise((r) => setTimeout(r, 300));
  }
}

/** One step: `players` playing for a window. */
export interface Step {
  players: number;
  window: Window;
  /** Players that received at least `keepUpShare` of the source's bytes. */
  keptUp: number;
  /** Lowest and mean received rate per player, in Mbit/s. */
  minMbps: number;
  meanMbps: number;
}

/** A fan-out run: the idle window and one per step. */
export interface Result {
  label: string;
  idle: Window;
  steps: Step[];
}

/**
 * Measures `pids` idle (no players of this run), then with each step's number of players
 * of `url` (added in batches); closes the players at the end.
 */
export async function fanOut(
  label: string,
  url: string,
  pids: () => number[],
  steps: number[],
  sourceBytesPerSecond: number,
): Promise<Result> {
  const list: LightPlayer[] = [];
  try {
    const idle = await measure(pids(), measureMs);
    const done: Step[] = [];
    for (const players of steps) {
      while (list.length < players) {
        const batch = Array.from(
          { length: Math.min(connectBatch, players - list.length) },
          () => new LightPlayer(),
        );
        list.push(...batch);
        await Promise.all(batch.map((p) => p.open(url)));
      }
      await new Promise((r) => setTimeout(r, warmupMs));
      const before = list.map((p) => p.bytes);
      const window = await measure(pids(), measureMs);
      const seconds = measureMs / 1000;
      const got = list.map((p, i) => p.bytes - before[i]);
      const keptUp = got.filter((b) => b >= keepUpShare * sourceBytesPerSecond * seconds).length;
      const mbps = (bytes: number) => bytes * 8 / seconds / 1e6;
      const minMbps = mbps(Math.min(...got));
      const meanMbps = mbps(got.reduce((sum, b) => sum + b, 0) / players);
      done.push({ players, window, keptUp, minMbps, meanMbps });
    }
    return { label, idle, steps: done };
  } finally {
    await Promise.all(list.map((p) => p.close()));
  }
}

/** Least-squares slope of y over x. */
function slope(points: [number, number][]): number {
  const n = points.length;
  const mx = points.reduce((s, [x]) => s + x, 0) / n;
  const my = points.reduce((s, [, y]) => s + y, 0) / n;
  let num = 0;
  let den = 0;
  for (const [x, y] of points) {
    num += (x - mx) * (y - my);
    den += (x - mx) ** 2;
  }
  return den > 0 ? num / den : 0;
}

/**
 * Per player cost from idle through the steps every player kept up with. `memKbMarginal` is
 * the memory slope over those steps alone (from the first step with players, when two or more
 * kept up): what one more player costs, without what having any player costs once (the
 * stream's shared ring of chunked messages, the code compiled for the path), which the fit
 * from idle spreads over the players.
 */
export function perPlayer(r: Result) {
  const good = r.steps.filter((s) => s.keptUp === s.players);
  const used = good.length > 0 ? good : r.steps;
  const cpu = Math.max(
    0,
    slope([[0, r.idle.cores], ...used.map((s) => [s.players, s.window.cores] as [number, number])]),
  );
  const memKb = Math.max(
    0,
    slope([[0, r.idle.rssKb], ...used.map((s) => [s.players, s.window.rssKb] as [number, number])]),
  );
  const memKbMarginal = used.length >= 2
    ? Math.max(0, slope(used.map((s) => [s.players, s.window.rssKb] as [number, number])))
    : memKb;
  return {
    cpu,
    memKb,
    memKbMarginal,
    perCore: cpu > 0 ? (1 / cpu).toFixed(0) : "n/a",
    largestKeptUp: good.at(-1)?.players ?? 0,
    fitTo: used.at(-1)!.players,
  };
}

/** The table lines of one fan-out run. */
export function fanOutLines(r: Result): string[] {
  const p = perPlayer(r);
  const pct = (cores: number) => `${(cores * 100).toFixed(1)}%`;
  const mib = (kb: number) => `${(kb / 1024).toFixed(1)} MiB`;
  const out = [`${r.label.padEnd(12)} idle ${pct(r.idle.cores)} CPU ${mib(r.idle.rssKb)}`];
  for (const s of r.steps) {
    out.push(
      `${"".padEnd(12)} ${String(s.players).padStart(4)} players ${
        pct(s.window.cores).padStart(6)
      } CPU ${mib(s.window.rssKb).padStart(10)} | ${s.keptUp}/${s.players} kept up, Mbit/s min ${
        s.minMbps.toFixed(2)
      } mean ${s.meanMbps.toFixed(2)} | players' process ${pct(s.window.playersCores)}${
        s.window.playersCores > playersCoresLimit ? " (near a core: players may be the limit)" : ""
      }`,
    );
  }
  out.push(
    `${"".padEnd(12)} per player ${(p.cpu * 100).toFixed(4)}% CPU ${
      p.memKb.toFixed(0)
    } KiB (fit 0..${p.fitTo}; ${
      p.memKbMarginal.toFixed(0)
    } KiB from the first step) | ~${p.perCore} players/core | largest N all kept up: ${p.largestKeptUp}`,
  );
  return out;
}
