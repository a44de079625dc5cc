/**
 * Soak: the server (main.ts, its own process under `prlimit --nofile=1024:1024`) takes at
 * once 10,000 Web SDK sessions churned (connect, `connection` message, close; a few hundred at
 * a time), 600 idle RTMP sockets, 200 `/rtsp/startup` to a camera that accepts and never
 * answers, and 100 parallel `/stream/snapshot`. Measured: the server stays up, `/health`
 * latency during the load, refusals per cap, and the server's RSS, open descriptors, threads
 * (Workers are threads) and child processes before, at peak and after the load.
 *
 * Exits 1 when the server died or `/health` stopped answering; the other figures (p99 under
 * 100 ms, the return within 5%) are printed with their verdict. `SOAK_ROUNDS=2` runs the load
 * twice, to tell memory the runtime keeps from memory that leaks.
 *
 * The "before" and "after" readings are taken after a full garbage collection that the bench
 * asks for through the server's V8 inspector (see SOAK_GC below): without it, what V8 had not
 * collected yet read as a leak (30 s after a second round: 47 MiB of heap used and RSS
 * 229 MiB, from 33 and 153; after a collection the heap is back to within 2 MiB). The RSS
 * the runtime reached before that collection is printed too.
 */
import { makeClip } from "../tests/helpers/media_fixtures.ts";
import { freePort, startEnv, startPermissions, waitForHttp } from "../tests/helpers/process.ts";
import { WcsClient } from "../tests/helpers/wcs_client.ts";
import { upgradeRequest } from "../tests/helpers/raw_ws_client.ts";
import { type HeapCount, heapGrowth, Inspector } from "./support/inspector.ts";
import type { ProbeResult } from "./health_probe.ts";
import { setPriority } from "node:os";

const nofile = 1024;
/** Load rounds; a second round shows whether memory keeps growing or has settled. */
const rounds = Number(Deno.env.get("SOAK_ROUNDS") ?? 1);
const sessionCount = 10_000;
/** Sessions connecting or open at once. */
const sessionConcurrency = 300;
const rtmpSockets = 600;
const deadPulls = 200;
const snapshots = 100;
/** Pause between /health probes during the load, in ms. */
const healthIntervalMs = 50;
/** Pause between raw upgrade probes (what a refused Web SDK client is told), in ms. */
const upgradeIntervalMs = 100;
/** Longest wait for the server to come back to idle after the load, in ms. */
const settleTimeoutMs = 30_000;
/**
 * Quiet time before each reading of the server's resources, the one before the load and the
 * one once it is idle again, in ms. V8 shrinks its heap by itself (its memory reducer, a full
 * GC some 10 s after allocation slows, the pages freed some 10 s later) and the server gives
 * the C heap's free memory back every 10 s (core/memory_trim.ts): read after 3 s, a heap that
 * was mostly garbage (30 MiB live of 76 MiB used) counted as if the load had leaked it.
 */
const quietMs = 30_000;
const startTimeoutMs = 15_000;

/** Resources of a process as the kernel counts them. */
interface Usage {
  rssMiB: number;
  /** Resident anonymous memory (heaps, stacks): what the process itself allocated. */
  rssAnonMiB: number;
  /** Resident pages of files (the deno binary's code): the kernel can drop them at will. */
  rssFileMiB: number;
  fds: number;
  threads: number;
  children: number;
}

function usageOf(pid: number): Usage {
  const status = Deno.readTextFileSync(`/proc/${pid}/status`);
  let fds = 0;
  for (const _ of Deno.readDirSync(`/proc/${pid}/fd`)) fds++;
  let children = 0;
  for (const task of Deno.readDirSync(`/proc/${pid}/task`)) {
    const list = Deno.readTextFileSync(`/proc/${pid}/task/${task.name}/children`);
    children += list.split(" ").filter(Boolean).length;
  }
  return {
    rssMiB: Number(status.match(/VmRSS:\s+(\d+)/)?.[1] ?? 0) / 1024,
    rssAnonMiB: Number(status.match(/RssAnon:\s+(\d+)/)?.[1] ?? 0) / 1024,
    rssFileMiB: Number(status.match(/RssFile:\s+(\d+)/)?.[1] ?? 0) / 1024,
    fds,
    threads: Number(status.match(/Threads:\s+(\d+)/)?.[1] ?? 0),
    children,
  };
}

/**
 * Time the server's main thread (the event loop) has run and has waited, runnable, for a core
 * (/proc schedstat), in ms: waiting is latency the machine's other load adds to every answer.
 */
function mainThreadTimes(pid: number): { runMs: number; waitMs: number } {
  const [run, wait] = Deno.readTextFileSync(`/proc/${pid}/task/${pid}/schedstat`).split(" ");
  return { runMs: Number(run) / 1e6, waitMs: Number(wait) / 1e6 };
}

/** The process's threads counted by name (`tokio-runtime-w`, `V8 DefaultWorke`, ...). */
function threadNames(pid: number): string {
  const names = new Tally();
  for (const task of Deno.readDirSync(`/proc/${pid}/task`)) {
    names.add(Deno.readTextFileSync(`/proc/${pid}/task/${task.name}/comm`).trim());
  }
  return String(names);
}

/**
 * CPU time process `pid` has used, in ms (/proc stat, 100 Hz); `withChildren` adds its
 * children that exited and were waited for (the server's ffmpeg).
 */
function cpuMs(pid: number | "self", withChildren = false): number {
  const fields = Deno.readTextFileSync(`/proc/${pid}/stat`).split(") ")[1].split(" ");
  // utime, stime, cutime, cstime are fields 14-17 of stat, 12-15 after the command's name.
  const ticks = Number(fields[11]) + Number(fields[12]) +
    (withChildren ? Number(fields[13]) + Number(fields[14]) : 0);
  return ticks * 10;
}

/** CPU time all cores of the machine have been busy, in ms (/proc/stat, 100 Hz). */
function machineBusyMs(): number {
  const [, ...ticks] = Deno.readTextFileSync("/proc/stat").split("\n")[0].trim().split(/\s+/);
  // user nice system idle iowait irq softirq steal: all but idle and iowait are busy.
  const [user, nice, system, , , irq, softirq, steal] = ticks.map(Number);
  return (user + nice + system + irq + softirq + steal) * 10;
}

function peakOf(a: Usage, b: Usage): Usage {
  return {
    rssMiB: Math.max(a.rssMiB, b.rssMiB),
    rssAnonMiB: Math.max(a.rssAnonMiB, b.rssAnonMiB),
    rssFileMiB: Math.max(a.rssFileMiB, b.rssFileMiB),
    fds: Math.max(a.fds, b.fds),
    threads: Math.max(a.threads, b.threads),
    children: Math.max(a.children, b.children),
  };
}

/**
 * What the server's event loop did while a probe sent `atMs` into the round waited `ms`: its
 * time on a core and waiting for one between the readings around that span.
 */
function loopDuring(samples: [number, number, number][], atMs: number, ms: number): string {
  const from = samples.findLast(([t]) => t <= atMs);
  const to = samples.find(([t]) => t >= atMs + ms);
  if (!from || !to) return "";
  return ` (in ${(to[0] - from[0]).toFixed(0)} ms around it the loop ran ${
    (to[1] - from[1]).toFixed(0)
  } ms and waited ${(to[2] - from[2]).toFixed(0)} ms for a core)`;
}

function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))];
}

/** Counts outcomes by label. */
class Tally {
  readonly counts = new Map<string, number>();
  add(label: string): void {
    this.counts.set(label, (this.counts.get(label) ?? 0) + 1);
  }
  toString(): string {
    return [...this.counts].sort((a, b) => b[1] - a[1]).map(([k, n]) => `${n} ${k}`).join(", ");
  }
}

/**
 * The server's answer to one upgrade request on bare TCP: `101`, or the status and body of a
 * refusal, or `closed without a response`.
 */
async function upgradeOutcome(port: number): Promise<string> {
  const conn = await Deno.connect({ hostname: "127.0.0.1", port });
  const timer = setTimeout(() => conn.close(), 5000);
  const decoder = new TextDecoder();
  const buffer = new Uint8Array(4096);
  let text = "";
  try {
    await conn.write(new TextEncoder().encode(upgradeRequest()));
    while (!text.startsWith("HTTP/1.1 101 ")) {
      const n = await conn.read(buffer).catch(() => null);
      if (n === null) break;
      text += decoder.decode(buffer.subarray(0, n), { stream: true });
    }
  } finally {
    clearTimeout(timer);
    try {
      conn.close();
    } catch {
      // Closed by the timer already.
    }
  }
  if (text === "") return "closed without a response";
  const status = text.slice(9, 12);
  const body = text.split("\r\n\r\n")[1]?.trim() ?? "";
  return status === "101" ? "101" : `${status} ${body}`.slice(0, 70);
}

/** Short label of an error: its message without addresses and numbers that vary. */
function labelOf(err: unknown): string {
  return String((err as Error)?.message ?? err).replace(/\d+\.\d+\.\d+\.\d+:\d+/g, "addr")
    .slice(0, 60);
}

// --- set up: a clip to snapshot, a dead camera, the server ---
const dir = await Deno.makeTempDir({ prefix: "soak-" });
await Deno.mkdir(`${dir}/content`);
/** The VOD stream ends with its file: long enough for every round (each takes about a minute). */
const clipSeconds = 60 + rounds * 90;
await makeClip(`${dir}/content/clip.mp4`, { seconds: clipSeconds });

const camera = Deno.listen({ hostname: "127.0.0.1", port: 0 });
const cameraConns: Deno.Conn[] = [];
const cameraAccepting = (async () => {
  for await (const conn of camera) cameraConns.push(conn);
})().catch(() => {});
const cameraPort = (camera.addr as Deno.NetAddr).port;

const ports = { rest: freePort(), ws: freePort(), rtmp: freePort(), hls: freePort() };
/** Extra `deno run` flags for the server, e.g. `--cpu-prof --cpu-prof-dir=/tmp/prof`. */
const serverFlags = (Deno.env.get("SOAK_DENO_FLAGS") ?? "").split(" ").filter(Boolean);
/**
 * The server runs with its V8 inspector on a loopback port, and the bench has V8 collect all
 * garbage before each reading (what is left is what the server holds); `SOAK_GC=0` runs the
 * server without the inspector and reads without collecting.
 * The inspector costs the server some 7 MiB of RSS and a few threads, in every reading alike.
 * `SOAK_HEAP=1` (not with SOAK_GC=0) also prints what grew in the heap by constructor, from heap
 * snapshots taken after the readings; a snapshot costs the server tens of MiB of C heap it
 * keeps for a while, so the RSS figures of such a run are not comparable. Neither is the
 * server's code: it has no GC hook.
 */
const forceGc = Deno.env.get("SOAK_GC") !== "0";
const heapDiff = forceGc && Deno.env.get("SOAK_HEAP") === "1";
const inspectPort = forceGc ? freePort() : 0;
if (forceGc) serverFlags.push(`--inspect=127.0.0.1:${inspectPort}`);
const server = new Deno.Command("prlimit", {
  args: [
    `--nofile=${nofile}:${nofile}`,
    Deno.execPath(),
    "run",
    ...startPermissions,
    ...serverFlags,
    "main.ts",
  ],
  cwd: new URL("..", import.meta.url).pathname,
  env: {
    NO_COLOR: "1",
    ...startEnv,
    MEDIASERVER_PORTS_REST: String(ports.rest),
    MEDIASERVER_PORTS_WS: String(ports.ws),
    MEDIASERVER_PORTS_RTMP: String(ports.rtmp),
    MEDIASERVER_PORTS_HLS: String(ports.hls),
    MEDIASERVER_FOLDERS_MEDIA: `${dir}/content`,
    MEDIASERVER_FOLDERS_RECORDS: `${dir}/records`,
    MEDIASERVER_FOLDERS_LOGS: `${dir}/logs`,
    MEDIASERVER_RTSP_TRANSPORT: "tcp",
    MEDIASERVER_LOG_LEVEL: "warn",
    // Settings to try (MEDIASERVER_LIMITS_ENGINE_JOBS=2 ...) pass through.
    ...Object.fromEntries(
      Object.entries(Deno.env.toObject()).filter(([name]) => name.startsWith("MEDIASERVER_")),
    ),
  },
  stdin: "null",
  stdout: "piped",
  stderr: "piped",
}).spawn();
const serverLog = Promise.all([
  new Response(server.stdout).text(),
  new Response(server.stderr).text(),
]);
let serverExited: Deno.CommandStatus | undefined;
server.status.then((s) => serverExited = s);

const rest = `http://127.0.0.1:${ports.rest}`;
/** POSTs through `client` (each round has its own, closed after the load, so its idle
 * keep-alive connections do not count as the server's descriptors in the "after" reading). */
const post = (path: string, body: unknown, client?: Deno.HttpClient) =>
  fetch(`${rest}/rest-api${path}`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body),
    client,
  });

await waitForHttp(`${rest}/health`, startTimeoutMs);
const vod = await post("/vod/startup", { uri: "vod-live://clip.mp4", localStreamName: "cam" });
if (!vod.ok) throw new Error(`vod/startup: ${vod.status} ${await vod.text()}`);
// A keyframe into the stream and the first snapshot's ffmpeg out of the way.
await (await post("/stream/snapshot", { streamName: "cam" })).body?.cancel();
const inspector = forceGc ? await Inspector.connect(inspectPort) : undefined;

/** bench/health_probe.ts, one process for the whole bench, told by line when to probe. */
class HealthProbe {
  #child: Deno.ChildProcess;
  #stdin: WritableStreamDefaultWriter<Uint8Array>;
  #lines: AsyncIterator<string>;

  constructor(url: string) {
    this.#child = new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "--allow-net",
        new URL("./health_probe.ts", import.meta.url).pathname,
        url,
        String(healthIntervalMs),
      ],
      stdin: "piped",
      stdout: "piped",
      stderr: "inherit",
    }).spawn();
    this.#stdin = this.#child.stdin.getWriter();
    this.#lines = lines(this.#child.stdout)[Symbol.asyncIterator]();
  }

  /** Starts probing; the function returned stops and gives what was measured. */
  run(): () => Promise<ProbeResult> {
    void this.#stdin.write(new TextEncoder().encode("start\n"));
    return async () => {
      await this.#stdin.write(new TextEncoder().encode("stop\n"));
      const line = await this.#lines.next();
      if (line.done) throw new Error("the /health probe exited");
      return JSON.parse(line.value);
    };
  }

  async close(): Promise<void> {
    await this.#stdin.close();
    await this.#child.status;
  }
}

/** The lines of a byte stream. */
async function* lines(stream: ReadableStream<Uint8Array>): AsyncIterable<string> {
  const decoder = new TextDecoder();
  let pending = "";
  for await (const chunk of stream) {
    pending += decoder.decode(chunk, { stream: true });
    let newline: number;
    while ((newline = pending.indexOf("\n")) >= 0) {
      yield pending.slice(0, newline);
      pending = pending.slice(newline + 1);
    }
  }
}

const probe = new HealthProbe(`${rest}/health`);
/**
 * Nice value the bench's own threads (its Web SDK, RTMP and REST clients) run at from here
 * on, after the server and the probe were started at the bench's priority: clients that
 * would be on other machines in use then take a core from the server only when it leaves one
 * free. `SOAK_CLIENT_NICE=0` keeps them at the server's priority.
 */
const clientNice = Number(Deno.env.get("SOAK_CLIENT_NICE") ?? 10);
if (clientNice !== 0) {
  // Linux sets a nice value per thread: each of the bench's threads is reniced.
  for (const task of Deno.readDirSync("/proc/self/task")) {
    setPriority(Number(task.name), clientNice);
  }
}
/** Time for V8 to hand the pages a forced GC freed back and for a C heap trim, in ms. */
const afterGcMs = 12_000;
/**
 * Waits `quietMs`, then collects all garbage and waits for the memory to go back; gives the
 * server's RSS before the collection (MiB).
 */
async function quiet(): Promise<number> {
  await new Promise((r) => setTimeout(r, quietMs));
  if (serverExited) return NaN;
  const rssMiB = usageOf(server.pid).rssMiB;
  if (!inspector) return rssMiB;
  await inspector.collectGarbage();
  await new Promise((r) => setTimeout(r, afterGcMs));
  return rssMiB;
}
const rssBeforeGc = await quiet();
const before = usageOf(server.pid);
const threadsBefore = threadNames(server.pid);
/** The server's JavaScript heap in use, in MiB (/health); RSS above it is native memory. */
const heapUsedMiB = async (): Promise<number> =>
  (await (await fetch(`${rest}/health`)).json()).memory.heapUsedMiB;
const heapBefore = await heapUsedMiB();
const v8Before = await inspector?.memoryUsage();
const heapCountsBefore = heapDiff ? await inspector!.heapCounts() : undefined;
// Latencies on a shared machine say as much about its other load as about the server.
const loadAverage = Deno.readTextFileSync("/proc/loadavg").split(" ").slice(0, 3).join(" ");

/** What one round of load did and left. */
interface RoundResult {
  loadMs: number;
  quickMs: number;
  sessions: Tally;
  /** Raw upgrade probes during the load, by the server's answer. */
  upgrades: Tally;
  rtmp: Tally;
  rtmpStillOpen: number;
  pulls: Tally;
  snapshots: Tally;
  snapshotMs: number[];
  healthMs: number[];
  /** Probes over 100 ms: when in the round they were sent (s) and how long they took (ms). */
  slowHealth: [number, number][];
  healthFailures: number;
  engineRunning: number;
  engineQueued: number;
  /** The server's event loop during the load: ms on a core and ms waiting for one. */
  loopRunMs: number;
  loopWaitMs: number;
  /** CPU time the bench itself used during the load, in ms. */
  benchCpuMs: number;
  /** CPU time the server used during the load, its ffmpeg included, in ms. */
  serverCpuMs: number;
  /** CPU time the machine's cores were busy during the load, in ms (others: the rest). */
  machineBusyMs: number;
  /** Readings of the event loop's times during the load: [ms since the start, run, wait]. */
  loopSamples: [number, number, number][];
  peak: Usage;
  after?: Usage;
  heapAfterMiB?: number;
  heapCountsAfter?: Map<string, HeapCount>;
  v8After?: Deno.MemoryUsage;
  /** RSS after the quiet time, before the forced GC (MiB). */
  rssBeforeGc?: number;
  /** Threads by name at the "after" reading. */
  threadsAfter?: string;
}

/** Every part of the load at once, then a wait until the server is idle again. */
async function round(): Promise<RoundResult> {
  const http = Deno.createHttpClient({});
  const started = performance.now();
  let loading = true;
  const result: RoundResult = {
    loadMs: 0,
    quickMs: 0,
    sessions: new Tally(),
    upgrades: new Tally(),
    rtmp: new Tally(),
    rtmpStillOpen: 0,
    pulls: new Tally(),
    snapshots: new Tally(),
    snapshotMs: [],
    healthMs: [],
    slowHealth: [],
    healthFailures: 0,
    engineRunning: 0,
    engineQueued: 0,
    loopRunMs: 0,
    loopWaitMs: 0,
    benchCpuMs: 0,
    serverCpuMs: 0,
    machineBusyMs: 0,
    loopSamples: [],
    peak: usageOf(server.pid),
  };
  const loopStart = mainThreadTimes(server.pid);
  const benchCpuStart = cpuMs("self");
  const serverCpuStart = cpuMs(server.pid, true);
  const machineBusyStart = machineBusyMs();
  result.loopSamples.push([0, loopStart.runMs, loopStart.waitMs]);

  let next = 0;
  const sessions = Promise.all(Array.from({ length: sessionConcurrency }, async () => {
    while (next < sessionCount) {
      next++;
      try {
        const { client } = await WcsClient.connect(`ws://127.0.0.1:${ports.ws}`);
        await client.close();
        result.sessions.add("connected and closed");
      } catch (err) {
        result.sessions.add(labelOf(err));
      }
    }
  }));

  const rtmpConns: Deno.Conn[] = [];
  let rtmpClosedByServer = 0;
  const rtmp = Promise.all(Array.from({ length: rtmpSockets }, async () => {
    try {
      const conn = await Deno.connect({ hostname: "127.0.0.1", port: ports.rtmp });
      rtmpConns.push(conn);
      result.rtmp.add("connected");
      // Idle: nothing sent; a read ends when the server closes the socket.
      conn.read(new Uint8Array(4096)).then((n) => {
        if (n === null) rtmpClosedByServer++;
      }, () => rtmpClosedByServer++);
    } catch (err) {
      result.rtmp.add(labelOf(err));
    }
  }));

  const pulls = Promise.all(Array.from({ length: deadPulls }, async (_, i) => {
    try {
      const res = await post("/rtsp/startup", {
        uri: `rtsp://127.0.0.1:${cameraPort}/dead${i}`,
        localStreamName: `dead${i}`,
      }, http);
      const body = await res.json().catch(() => ({}));
      result.pulls.add(`${res.status} ${labelOf(body.message).replace(/dead\d+/, "deadN")}`);
    } catch (err) {
      result.pulls.add(labelOf(err));
    }
  }));

  const snaps = Promise.all(Array.from({ length: snapshots }, async () => {
    const sent = performance.now();
    try {
      const res = await post("/stream/snapshot", { streamName: "cam" }, http);
      const body = await res.json().catch(() => ({}));
      result.snapshots.add(`${res.status}${res.status === 503 ? ` ${body.message}` : ""}`);
      result.snapshotMs.push(performance.now() - sent);
    } catch (err) {
      result.snapshots.add(labelOf(err));
    }
  }));

  // /health is timed by a process of its own at the server's priority (bench/health_probe.ts).
  const probed = probe.run();
  const sampling = (async () => {
    while (loading && !serverExited) {
      try {
        result.peak = peakOf(result.peak, usageOf(server.pid));
        const { runMs, waitMs } = mainThreadTimes(server.pid);
        result.loopSamples.push([performance.now() - started, runMs, waitMs]);
      } catch {
        // The server is gone; serverExited says so.
      }
      await new Promise((r) => setTimeout(r, healthIntervalMs));
    }
  })();

  const upgrading = (async () => {
    while (loading && !serverExited) {
      result.upgrades.add(await upgradeOutcome(ports.ws).catch(labelOf));
      await new Promise((r) => setTimeout(r, upgradeIntervalMs));
    }
  })();

  await Promise.all([sessions, rtmp, snaps]);
  result.quickMs = performance.now() - started;
  await pulls;
  result.loadMs = performance.now() - started;
  if (!serverExited) {
    const loopEnd = mainThreadTimes(server.pid);
    result.loopRunMs = loopEnd.runMs - loopStart.runMs;
    result.loopWaitMs = loopEnd.waitMs - loopStart.waitMs;
    result.benchCpuMs = cpuMs("self") - benchCpuStart;
    result.serverCpuMs = cpuMs(server.pid, true) - serverCpuStart;
    result.machineBusyMs = machineBusyMs() - machineBusyStart;
  }
  loading = false;
  const probeResult = await probed();
  result.healthMs = probeResult.ms;
  result.slowHealth = probeResult.slow;
  result.healthFailures = probeResult.failures;
  result.engineRunning = probeResult.engineRunning;
  result.engineQueued = probeResult.engineQueued;
  await sampling;
  await upgrading;
  result.rtmpStillOpen = rtmpConns.length - rtmpClosedByServer;
  for (const conn of rtmpConns) {
    try {
      conn.close();
    } catch {
      // Closed by the server already.
    }
  }
  for (const conn of cameraConns.splice(0)) conn.close();
  http.close();

  // Idle again: no pull, job or session left, only the VOD stream.
  const settleStarted = performance.now();
  while (!serverExited && performance.now() - settleStarted < settleTimeoutMs) {
    try {
      const { limits } = await (await fetch(`${rest}/health`)).json();
      if (
        limits.pulls.current === 0 && limits.engineJobs.running === 0 &&
        limits.sessions.current === 0 && limits.streams.current === 1
      ) break;
    } catch {
      // Not answering yet.
    }
    await new Promise((r) => setTimeout(r, 250));
  }
  const rssBeforeGc = await quiet();
  if (!serverExited) {
    result.rssBeforeGc = rssBeforeGc;
    result.threadsAfter = threadNames(server.pid);
    result.after = usageOf(server.pid);
    result.heapAfterMiB = await heapUsedMiB();
    result.v8After = await inspector?.memoryUsage();
    if (heapDiff) result.heapCountsAfter = await inspector!.heapCounts();
  }
  return result;
}

const results: RoundResult[] = [];
for (let i = 0; i < rounds && !serverExited; i++) results.push(await round());
const alive = !serverExited;
const finalHealth = alive ? await (await fetch(`${rest}/health`)).json() : undefined;

// --- report ---
const fmt = (n: number) => (Number.isFinite(n) ? n.toFixed(1) : "-");
console.log(
  `soak: ${sessionCount} sessions (${sessionConcurrency} at once), ${rtmpSockets} idle RTMP ` +
    `sockets, ${deadPulls} dead-camera pulls, ${snapshots} snapshots, at once; server under ` +
    `prlimit --nofile=${nofile}:${nofile}; the bench's clients at nice ${clientNice}, the /health probe and the server at the bench's own; load average before: ${loadAverage} on ${navigator.hardwareConcurrency} cores`,
);
for (const [i, r] of results.entries()) {
  r.healthMs.sort((a, b) => a - b);
  r.snapshotMs.sort((a, b) => a - b);
  console.log(
    `\nround ${i + 1}: ${(r.loadMs / 1000).toFixed(1)} s (sessions, RTMP and snapshots done in ${
      (r.quickMs / 1000).toFixed(1)
    } s)`,
  );
  console.log(`  sessions:  ${r.sessions}`);
  console.log(`  upgrade probes: ${r.upgrades}`);
  console.log(`  rtmp:      ${r.rtmp}; ${r.rtmpStillOpen} still open at the end of the load`);
  console.log(`  pulls:     ${r.pulls}`);
  console.log(
    `  snapshots: ${r.snapshots}; p50 ${fmt(percentile(r.snapshotMs, 0.5))} ms, max ${
      fmt(r.snapshotMs.at(-1) ?? NaN)
    } ms; engine pool peak ${r.engineRunning} running, ${r.engineQueued} queued`,
  );
  console.log(
    `  /health: ${r.healthMs.length} answers, ${r.healthFailures} failures, p50 ${
      fmt(percentile(r.healthMs, 0.5))
    } ms, p99 ${fmt(percentile(r.healthMs, 0.99))} ms, max ${fmt(r.healthMs.at(-1) ?? NaN)} ms`,
  );
  if (r.slowHealth.length) {
    const slow = r.slowHealth.map(([at, ms]) =>
      `${at.toFixed(1)} s: ${ms.toFixed(0)} ms${loopDuring(r.loopSamples, at * 1000, ms)}`
    );
    console.log(`  /health over 100 ms, sent at: ${slow.join(", ")}`);
  }
  console.log(
    `  server event loop: ${fmt(r.loopRunMs)} ms on a core, ${
      fmt(r.loopWaitMs)
    } ms runnable waiting for one, in ${fmt(r.loadMs)} ms of load`,
  );
  console.log(
    `  CPU during the load: the machine's ${navigator.hardwareConcurrency} cores busy ${
      fmt(r.machineBusyMs)
    } ms: the server (its ffmpeg included) ${fmt(r.serverCpuMs)} ms, the bench's clients ${
      fmt(r.benchCpuMs)
    } ms, other processes ${fmt(r.machineBusyMs - r.serverCpuMs - r.benchCpuMs)} ms`,
  );
}
if (finalHealth) {
  const refusals = Object.entries(finalHealth.limits as Record<string, { refused?: number }>)
    .filter(([, v]) => typeof v?.refused === "number")
    .map(([k, v]) => `${k} ${v.refused}`);
  const listeners = Object.entries(finalHealth.limits.listeners ?? {}).map(([k, v]) =>
    `${k} ${JSON.stringify(v)}`
  );
  console.log(`\nrefusals (/health): ${refusals.join(", ")}`);
  if (listeners.length) console.log(`listener caps: ${listeners.join("; ")}`);
}

/** Rows of the table; those with `true` are the goal's (back within 5%), the others split RSS. */
const rows: [string, keyof Usage, boolean][] = [
  ["RSS (MiB)", "rssMiB", true],
  ["  anonymous (MiB)", "rssAnonMiB", false],
  ["  file-backed (MiB)", "rssFileMiB", false],
  ["open fds", "fds", true],
  ["threads (Workers)", "threads", true],
  ["child processes", "children", true],
];
const header = results.map((_, i) => `peak ${i + 1} | after ${i + 1}`).join(" | ");
console.log(`\n| server | before | ${header} | after/before |`);
console.log(`|---|---:|${results.map(() => "---:|---:|").join("")}---:|`);
const within5 = (b: number, a: number) => a === b || (a <= b * 1.05 && a >= b * 0.95);
const last = results.at(-1)?.after;
const notBack: string[] = [];
for (const [label, key, goal] of rows) {
  const b = before[key];
  const a = last?.[key];
  const ratio = a === undefined ? "-" : b === 0 ? (a === 0 ? "=" : `+${a}`) : (a / b).toFixed(3);
  if (goal && (a === undefined || !within5(b, a))) notBack.push(label);
  const cells = results.map((r) => `${fmt(r.peak[key])} | ${fmt(r.after?.[key] ?? NaN)}`);
  console.log(`| ${label} | ${fmt(b)} | ${cells.join(" | ")} | ${ratio} |`);
}

console.log(
  `| JS heap used (MiB) | ${heapBefore} | ${
    results.map((r) => `- | ${r.heapAfterMiB ?? "-"}`).join(" | ")
  } | - |`,
);

const threadsAfter = results.at(-1)?.threadsAfter;
if (threadsAfter && threadsAfter !== threadsBefore) {
  console.log(`threads before: ${threadsBefore}\nthreads after:  ${threadsAfter}`);
}
if (inspector) {
  const cells = results.map((r) => `- | ${fmt(r.rssBeforeGc ?? NaN)}`).join(" | ");
  console.log(`| RSS before the forced GC (MiB) | ${fmt(rssBeforeGc)} | ${cells} | - |`);
}
if (v8Before) {
  const v8Rows: [string, keyof Deno.MemoryUsage][] = [
    ["V8 heap committed (MiB)", "heapTotal"],
    ["V8 heap used (MiB)", "heapUsed"],
    ["external (MiB)", "external"],
  ];
  for (const [label, key] of v8Rows) {
    const mib = (bytes?: number) => fmt((bytes ?? NaN) / 1048576);
    const cells = results.map((r) => `- | ${mib(r.v8After?.[key])}`).join(" | ");
    console.log(`| ${label} | ${mib(v8Before[key])} | ${cells} | - |`);
  }
}
for (const [i, r] of results.entries()) {
  if (!heapCountsBefore || !r.heapCountsAfter) continue;
  console.log(`\nheap growth before -> after ${i + 1} (after a full GC):`);
  for (const line of heapGrowth(heapCountsBefore, r.heapCountsAfter)) console.log(`  ${line}`);
}
await inspector?.close();
await probe.close();

const [stdout, stderr] = alive
  ? await (async () => {
    server.kill("SIGTERM");
    await server.status;
    return await serverLog;
  })()
  : await serverLog;
camera.close();
await cameraAccepting;
await Deno.remove(dir, { recursive: true });

const errorLines = stdout.split("\n").filter((l) => l.includes('"level":"error"'));
const errorKinds = new Tally();
for (const line of errorLines) {
  try {
    errorKinds.add(JSON.parse(line).msg);
  } catch {
    errorKinds.add("(unparsed)");
  }
}
console.log(
  `\nserver error lines: ${errorLines.length}${errorLines.length ? ` (${errorKinds})` : ""}`,
);
if (stderr.trim()) console.log(`server stderr: ${stderr.trim().slice(0, 800)}`);

const allHealth = results.flatMap((r) => r.healthMs).sort((a, b) => a - b);
const verdicts: [string, boolean][] = [
  ["server stays up", alive],
  ["/health answers during the load", results.every((r) => r.healthFailures === 0)],
  ["/health p99 under 100 ms", percentile(allHealth, 0.99) < 100],
  ["RSS, fds, threads, children back within 5%", alive && notBack.length === 0],
];
for (const [what, ok] of verdicts) console.log(`${ok ? "PASS" : "FAIL"} ${what}`);
if (notBack.length) console.log(`  not back within 5%: ${notBack.join(", ")}`);
if (!alive || allHealth.length === 0) {
  console.log(`server exit: ${JSON.stringify(serverExited)}`);
  Deno.exit(1);
}
