/**
 * RTSP fan-out: one 2 Mbit/s H.264 + AAC stream (1280x720 25 fps, a file played in real
 * time) to N RTSP players over TCP, the server next to gst-rtsp-server serving the same file
 * as one shared media (bench/support/gst_rtsp_file.py). The players are bare TCP readers in
 * another process (bench/support/rtsp_readers.ts), so only the servers' costs are measured:
 * CPU (share of one core) and resident memory per player added beyond the first, over the
 * same window after a warm-up (memory as the median of samples over it), and the rate each
 * player got (a server that cannot keep up shows it there). The ratio is ours over the peer's.
 * V8 sizes its young generation by allocation, so memory is also worth a run with
 * `DENO_V8_FLAGS=--max-semi-space-size=2`.
 * Run: deno run -A bench/rtsp_fanout.ts
 */
import { silentLogger } from "../core/log.ts";
import { startServer } from "../server.ts";
import { freePort } from "../tests/helpers/process.ts";
import { testConfig } from "../tests/helpers/test_server.ts";

/** Player counts measured, besides the single player every figure is taken against. */
const counts = [50, 200];
/** Time the players run before the window opens, in milliseconds. */
const warmupMs = 3000;
/** Measuring window, in milliseconds. */
const windowMs = 8000;
/** Resident memory samples over the window (their median is taken: one alone moves by MiBs with the collector). */
const rssSamples = 8;
/** Clock ticks per second of /proc/<pid>/stat (USER_HZ on Linux). */
const clockTicksPerSecond = 100;
/** Video bitrate of the source, in bit/s. */
const videoBitrate = 2_000_000;

const here = new URL(".", import.meta.url).pathname;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function cpuTicks(pid: number | "self"): number {
  const stat = Deno.readTextFileSync(`/proc/${pid}/stat`);
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return Number(fields[11]) + Number(fields[12]);
}

function rssMiB(pid: number | "self"): number {
  const kb = Number(/VmRSS:\s+(\d+)/.exec(Deno.readTextFileSync(`/proc/${pid}/status`))?.[1]);
  return kb / 1024;
}

/** What N players cost a server over the window. */
interface Sample {
  players: number;
  cpu: number;
  rssMiB: number;
  /** Bytes per second each player received. */
  rate: number;
  /** Players that received anything. */
  active: number;
}

/** Runs `players` readers of `url` and measures the server process `pid` over the window. */
async function measure(url: string, players: number, pid: number | "self"): Promise<Sample> {
  const readers = new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", `${here}support/rtsp_readers.ts`, url, String(players)],
    stdin: "piped",
    stdout: "piped",
    stderr: "inherit",
  }).spawn();
  const writer = readers.stdin.getWriter();
  const lines = readers.stdout.pipeThrough(new TextDecoderStream()).getReader();
  const rate = async () => {
    await writer.write(new TextEncoder().encode("rate\n"));
    const { value } = await lines.read();
    return JSON.parse(value ?? "{}") as { bytesPerPlayerPerSec: number; active: number };
  };
  try {
    await sleep(warmupMs);
    await rate();
    const ticks = cpuTicks(pid);
    const startMs = performance.now();
    const rss: number[] = [];
    for (let i = 0; i < rssSamples; i++) {
      await sleep(windowMs / rssSamples);
      rss.push(rssMiB(pid));
    }
    rss.sort((a, b) => a - b);
    const seconds = (performance.now() - startMs) / 1000;
    const cpu = (cpuTicks(pid) - ticks) / clockTicksPerSecond / seconds;
    const got = await rate();
    return {
      players,
      cpu,
      rssMiB: rss[rss.length >> 1],
      rate: got.bytesPerPlayerPerSec,
      active: got.active,
    };
  } finally {
    await writer.close().catch(() => {});
    readers.kill("SIGKILL");
    await readers.status;
    await lines.cancel().catch(() => {});
    await sleep(1000);
  }
}

/** Per added player, against the single player's sample. */
function perPlayer(base: Sample, s: Sample) {
  const added = s.players - base.players;
  return {
    cpuPct: ((s.cpu - base.cpu) / added) * 100,
    rssKiB: ((s.rssMiB - base.rssMiB) / added) * 1024,
    kbps: (s.rate * 8) / 1000,
    active: s.active,
  };
}

async function makeSource(): Promise<string> {
  const dir = await Deno.makeTempDir({ prefix: "bench-rtsp-fanout-" });
  const path = `${dir}/source.mp4`;
  const out = await new Deno.Command("ffmpeg", {
    args: [
      ...["-v", "error", "-y", "-f", "lavfi", "-i", "testsrc2=size=1280x720:rate=25"],
      ...["-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000", "-t", "150"],
      ...["-c:v", "libx264", "-preset", "veryfast", "-b:v", String(videoBitrate)],
      ...["-maxrate", String(videoBitrate), "-bufsize", String(videoBitrate), "-g", "50"],
      ...["-pix_fmt", "yuv420p", "-c:a", "aac", "-b:a", "64k", path],
    ],
  }).output();
  if (!out.success) throw new Error(new TextDecoder().decode(out.stderr));
  return path;
}

async function ours(source: string): Promise<Sample[]> {
  const config = testConfig();
  await Deno.mkdir(config.folders.media, { recursive: true });
  await Deno.copyFile(source, `${config.folders.media}/source.mp4`);
  const server = await startServer(config, silentLogger);
  try {
    const vod = server.services.vod;
    await vod.startup("vod-live://source.mp4", "fanout");
    const url = `rtsp://127.0.0.1:${server.rtspPort}/fanout`;
    // A first run warms the server (JIT, heap growth) so the single player's figure is its own.
    await measure(url, 1, "self");
    const samples = [await measure(url, 1, "self")];
    for (const n of counts) samples.push(await measure(url, n, "self"));
    return samples;
  } finally {
    await server.stop();
  }
}

async function peer(source: string): Promise<Sample[]> {
  const port = freePort();
  const child = new Deno.Command("/usr/bin/python3", {
    args: ["-u", `${here}support/gst_rtsp_file.py`, String(port), "/fanout", source],
    stdin: "null",
    stdout: "piped",
    stderr: "inherit",
  }).spawn();
  const reader = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  try {
    const { value } = await reader.read();
    if (!value?.includes("READY")) throw new Error("gst-rtsp-server did not start");
    const url = `rtsp://127.0.0.1:${port}/fanout`;
    await measure(url, 1, child.pid);
    const samples = [await measure(url, 1, child.pid)];
    for (const n of counts) samples.push(await measure(url, n, child.pid));
    return samples;
  } finally {
    child.kill("SIGKILL");
    await child.status;
    await reader.cancel().catch(() => {});
  }
}

const source = await makeSource();
const oursSamples = await ours(source);
const peerSamples = await peer(source);
for (const [i, n] of counts.entries()) {
  const a = perPlayer(oursSamples[0], oursSamples[i + 1]);
  const b = perPlayer(peerSamples[0], peerSamples[i + 1]);
  console.log(
    `RTSP/TCP fan-out, 2 Mbit/s 720p H.264 + AAC, ${n} players: ` +
      `ours ${a.cpuPct.toFixed(3)}% of a core and ${a.rssKiB.toFixed(0)} KiB per player ` +
      `(${a.kbps.toFixed(0)} kbit/s each, ${a.active}/${n} fed); ` +
      `gst-rtsp-server ${b.cpuPct.toFixed(3)}% and ${b.rssKiB.toFixed(0)} KiB ` +
      `(${b.kbps.toFixed(0)} kbit/s each, ${b.active}/${n} fed); ` +
      `ratio CPU ${(a.cpuPct / b.cpuPct).toFixed(2)}, memory ${(a.rssKiB / b.rssKiB).toFixed(2)}`,
  );
}
await Deno.remove(source.replace(/\/[^/]+$/, ""), { recursive: true });
