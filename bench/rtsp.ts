/**
 * RTSP pull cost per camera stream, next to ffmpeg doing the same pulls (about 70 s).
 *
 * One GStreamer RTSP camera (tests/peers, H.264 640x360 25 fps 800 kbit/s + AAC) is pulled
 * 1, 10 and 50 times over TCP: first by the server (in this process, `/rtsp/startup` with
 * distinct URIs), then by as many `ffmpeg -rtsp_transport tcp -i URI -c copy -f null -`
 * processes. For each, CPU (share of one core) and resident memory are measured over the
 * same window once every pull has run a while: the server's as the growth of this process
 * over its idle state (its own timers and heap), ffmpeg's as the sum over its processes
 * (each process's whole footprint: that is what one ffmpeg per camera costs). Figures are per stream; the
 * ratio is ours over ffmpeg's.
 * Run: deno run -A bench/rtsp.ts
 */
import process from "node:process";
import { silentLogger } from "../core/log.ts";
import { startServer } from "../server.ts";
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
const startBatch = 10;
/** Clock ticks per second of /proc/<pid>/stat (USER_HZ on Linux). */
const clockTicksPerSecond = 100;

interface Cost {
  /** Share of one core, per stream. */
  cpu: number;
  /** Resident memory, per stream, in MiB. */
  rssMiB: number;
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
          (_, j) => server.services.rtsp.startup(`${url}?pull=${i + j}`, `s${i + j}`),
        ),
      );
    }
    await sleep(warmupMs);
    const busy = await cpuShare(windowMs);
    const rss = rssMiB("self");
    const playing = server.services.rtsp.list().filter((p) => p.status === "PLAYING").length;
    if (playing !== count) throw new Error(`only ${playing} of ${count} pulls playing`);
    return {
      cpu: Math.max(0, busy - idle) / count,
      rssMiB: Math.max(0, rss - idleRss) / count,
    };
  } finally {
    await server.stop();
  }
}

async function ffmpeg(url: string, count: number): Promise<Cost> {
  const children = Array.from({ length: count }, (_, i) =>
    new Deno.Command("ffmpeg", {
      args: [
        "-nostdin",
        "-v",
        "error",
        "-rtsp_transport",
        "tcp",
        "-i",
        `${url}?pull=${i}`,
        "-c",
        "copy",
        "-f",
        "null",
        "-",
      ],
      stdin: "null",
      stdout: "null",
      stderr: "null",
    }).spawn());
  try {
    // ffmpeg probes the stream for about a second before it copies.
    await sleep(warmupMs + 1500);
    const ticks0 = children.map((c) => cpuTicks(c.pid));
    const t0 = performance.now();
    await sleep(windowMs);
    const ticks = children.reduce((sum, c, i) => sum + cpuTicks(c.pid) - ticks0[i], 0);
    const elapsedMs = performance.now() - t0;
    const rss = children.reduce((sum, c) => sum + rssMiB(c.pid), 0);
    return { cpu: ticks / clockTicksPerSecond * 1000 / elapsedMs / count, rssMiB: rss / count };
  } finally {
    for (const child of children) {
      try {
        child.kill("SIGTERM");
      } catch {
        // exited already
      }
    }
    await Promise.all(children.map((c) => c.status));
  }
}

const camera = await startGstRtsp();
try {
  console.log("RTSP pull over TCP, per stream (H.264 640x360 25 fps 800 kbit/s + AAC):");
  console.log("pulls | ours cpu%  rss MiB | ffmpeg cpu%  rss MiB | ratio cpu  rss");
  for (const count of counts) {
    const a = await ours(camera.url, count);
    const b = await ffmpeg(camera.url, count);
    console.log(
      `${String(count).padStart(5)} | ${(a.cpu * 100).toFixed(2).padStart(9)} ${
        a.rssMiB.toFixed(2).padStart(8)
      } | ${(b.cpu * 100).toFixed(2).padStart(11)} ${b.rssMiB.toFixed(2).padStart(8)} | ${
        (a.cpu / b.cpu).toFixed(2).padStart(9)
      } ${(a.rssMiB / b.rssMiB).toFixed(2).padStart(4)}`,
    );
  }
} finally {
  await camera.stop();
}
