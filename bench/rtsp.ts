/**
 * RTSP pull cost per camera stream, next to ONE GStreamer process doing the same pulls.
 *
 * One GStreamer RTSP camera (tests/peers, H.264 640x360 25 fps 800 kbit/s + AAC) is pulled
 * 1, 10 and 50 times over TCP (one shared encoder at the camera):
 * first by the server (in this process, `/rtsp/startup`), then by one GStreamer process
 * (bench/support/gst_pull.py: an rtspsrc per pull, depayloaded into fakesinks; ffmpeg opens
 * its inputs one after another, and a shared camera stalls the early ones meanwhile). Each
 * side gets a fresh camera. CPU (share of one core) and resident memory are measured over the
 * same window once every pull has run a while: the server's as the growth of this process
 * over its idle state, the peer process's whole (its base footprint shared by the pulls; the
 * marginal cost per pull beyond the first is printed too). Figures are per stream; the ratio
 * is ours over the peer's.
 * Run: deno run -A bench/rtsp.ts
 */
import process from "node:process";
import { silentLogger } from "../core/log.ts";
import { type RunningServer, startServer } from "../server.ts";
import { startGstRtsp } from "../tests/helpers/gst_rtsp.ts";
import { testConfig } from "../tests/helpers/test_server.ts";

/** Pull counts measured. */
const counts = [1, 10, 50];
/** Time every pull runs before the window opens, in milliseconds. */
const warmupMs = 2000;
/** Measuring window, in milliseconds. */
const windowMs = 4000;
/** Window over which the idle server's own CPU is measured (subtracted), in milliseconds. */
const idleWindowMs = 1500;
/** Pulls started at once (the camera answers DESCRIBEs one after another). */
const startBatch = 5;
/** Tries of a pull the camera did not answer in time (a loaded machine slows it down). */
const startTries = 3;
/** Below this share of the single pull's rate, the camera could not feed every pull. */
const starvedShare = 0.8;
/** Clock ticks per second of /proc/<pid>/stat (USER_HZ on Linux). */
const clockTicksPerSecond = 100;

interface Cost {
  /** Share of one core, per stream. */
  cpu: number;
  /** Resident memory, per stream, in MiB. */
  rssMiB: number;
  /** Media received per stream at the end of the window, in kbit/s (ours only). */
  kbps?: number;
}

function rssMiB(pid: number | "self"): number {
  const status = Deno.readTextFileSync(`/proc/${pid}/status`);
  const kb = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0);
  return kb / 1024;
}

function cpuTicks(pid: number): number {
  const stat = Deno.readTextFileSync(`/proc/${pid}/stat`);
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return Number(fields[11]) + Number(fields[12]); // utime + stime
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** CPU used by this process during `ms`, as a share of one core. */
async function cpuShare(ms: number): Promise<number> {
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  await sleep(ms);
  const cpu = process.cpuUsage(cpu0);
  return (cpu.user + cpu.system) / 1000 / (performance.now() - t0);
}

/**
 * The URI of pull `i`: distinct for the server (one pull per URI) through its user name,
 * which the camera leaves out of its media key, so every pull shares one encoder there (a
 * query would give each pull an encoder of its own and starve them all past a few).
 */
function pullUri(url: string, i: number): string {
  return url.replace("rtsp://", `rtsp://pull${i}@`);
}

/** Starts one pull, trying again when the camera (a Python process) answered too late. */
async function startPull(server: RunningServer, uri: string, name: string): Promise<void> {
  for (let tries = 1;; tries++) {
    try {
      return await server.services.rtsp.startup(uri, name);
    } catch (err) {
      if (tries >= startTries) throw err;
      await sleep(1000);
    }
  }
}

async function ours(url: string, count: number): Promise<Cost> {
  const server = await startServer(testConfig({ rtsp: { transport: "tcp" } }), silentLogger);
  try {
    await sleep(500);
    const idleRss = rssMiB("self");
    const idle = await cpuShare(idleWindowMs);
    for (let i = 0; i < count; i += startBatch) {
      await Promise.all(
        Array.from(
          { length: Math.min(startBatch, count - i) },
          (_, j) => startPull(server, pullUri(url, i + j), `s${i + j}`),
        ),
      );
    }
    await sleep(warmupMs);
    const busy = await cpuShare(windowMs);
    const rss = rssMiB("self");
    const playing = server.services.rtsp.list().filter((p) => p.status === "PLAYING").length;
    if (playing !== count) throw new Error(`only ${playing} of ${count} pulls playing`);
    // What the pulls received: a starved camera would make every figure look cheap.
    const kbps = server.services.streams.list().reduce((n, s) => n + s.record().bitrate, 0);
    return {
      cpu: Math.max(0, busy - idle) / count,
      rssMiB: Math.max(0, rss - idleRss) / count,
      kbps: kbps / count,
    };
  } finally {
    await server.stop();
  }
}

/** Longest wait for the GStreamer peer to receive video on every pull, in milliseconds. */
const peerReadyTimeoutMs = 60_000;
const peerScript = new URL("./support/gst_pull.py", import.meta.url).pathname;

/**
 * ONE GStreamer process pulling the `count` streams (an rtspsrc each, depayloaded into
 * fakesinks, all started at once), measured once every pull has video and `warmupMs` passed.
 */
async function gstreamer(url: string, count: number): Promise<Cost> {
  // rtspsrc takes no user name without a password; the peer needs no distinct URIs anyway.
  const uris = Array.from({ length: count }, () => url);
  const child = new Deno.Command("/usr/bin/python3", {
    args: ["-u", peerScript, ...uris],
    stdin: "null",
    stdout: "piped",
    stderr: "inherit",
  }).spawn();
  const stdout = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () => reject(new Error(`the GStreamer peer got no video on ${count} pulls`)),
        peerReadyTimeoutMs,
      );
    });
    let out = "";
    while (!out.includes("READY")) {
      const { value, done } = await Promise.race([stdout.read(), timeout]);
      if (done) throw new Error(`the GStreamer peer exited: ${out}`);
      out += value;
    }
    clearTimeout(timer);
    await sleep(warmupMs);
    const ticks0 = cpuTicks(child.pid);
    const t0 = performance.now();
    await sleep(windowMs);
    const ticks = cpuTicks(child.pid) - ticks0;
    const elapsedMs = performance.now() - t0;
    const rss = rssMiB(child.pid);
    return { cpu: ticks / clockTicksPerSecond * 1000 / elapsedMs / count, rssMiB: rss / count };
  } finally {
    clearTimeout(timer);
    try {
      child.kill("SIGTERM");
    } catch {
      // exited already
    }
    await stdout.cancel();
    await child.status;
  }
}

/** Runs `measure` against a camera of its own, so no phase inherits another's clients. */
async function withCamera(measure: (url: string) => Promise<Cost>): Promise<Cost> {
  const camera = await startGstRtsp();
  try {
    return await measure(camera.url);
  } finally {
    await camera.stop();
  }
}

{
  console.log("RTSP pull over TCP, per stream (H.264 640x360 25 fps 800 kbit/s + AAC):");
  console.log("pulls | ours cpu%  rss MiB | one gst cpu%  rss MiB | ratio cpu  rss");
  let peerOne: Cost | undefined;
  let oursOne: Cost | undefined;
  for (const count of counts) {
    const a = await withCamera((url) => ours(url, count));
    const b = await withCamera((url) => gstreamer(url, count));
    peerOne ??= b;
    oursOne ??= a;
    console.log(
      `${String(count).padStart(5)} | ${(a.cpu * 100).toFixed(2).padStart(9)} ${
        a.rssMiB.toFixed(2).padStart(8)
      } | ${(b.cpu * 100).toFixed(2).padStart(12)} ${b.rssMiB.toFixed(2).padStart(8)} | ${
        (a.cpu / b.cpu).toFixed(2).padStart(9)
      } ${(a.rssMiB / b.rssMiB).toFixed(2).padStart(4)}   (ours received ${
        a.kbps?.toFixed(0)
      } kbit/s per pull)`,
    );
    if ((a.kbps ?? 0) < starvedShare * (oursOne.kbps ?? 0)) {
      // Pulls that get less than the stream's rate cost less: the row compares nothing.
      console.log(
        `      | CAMERA STARVED: the pulls got ${a.kbps?.toFixed(0)} of ${
          oursOne.kbps?.toFixed(0)
        } kbit/s each; this row is not a valid comparison`,
      );
    }
    if (count > 1) {
      // The peer's figure holds its base footprint shared by `count`; its cost per added pull:
      const marginal = (b.rssMiB * count - peerOne.rssMiB) / (count - 1);
      console.log(
        `      | one GStreamer process, per pull beyond the first: rss ${
          marginal.toFixed(2)
        } MiB ` +
          `(ratio ours/that ${(a.rssMiB / marginal).toFixed(2)})`,
      );
    }
  }
}
