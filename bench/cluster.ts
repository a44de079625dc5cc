/**
 * CDN relay: one ~2 Mbit/s H.264+AAC stream (ffmpeg publishing RTMP to an origin) pulled by
 * an edge over the relay, played by RTMP players. Origin, edge and a `redis-server` run as
 * separate processes on 127.0.0.1, started like `deno task start` with MEDIASERVER_*
 * variables, so each server's CPU time (utime + stime from /proc/<pid>/stat) is its own; the
 * players are the light readers of bench/rtmp.ts, in this process. Measured, in order:
 * - the origin with the publisher only (no relay, no player), and the idle edge;
 * - one player on the edge (the edge pulls the stream): CPU per relayed stream on the origin
 *   (sending) and on the edge (receiving and serving that player), as deltas from the above;
 * - one player on the origin as well: relay added latency, the arrival of each video message
 *   at the edge's player minus its arrival at the origin's player (matched by RTMP timestamp
 *   and size; both players in this process, on one clock), p50/p99;
 * - fan-out: the same steps of players on the edge (its pull kept up) and then on the origin
 *   (the single node, serving its own publisher): CPU and lowest RSS per player as the slope
 *   from idle through the steps every player kept up with, players per core, and the ratio
 *   edge / single node (goal: at least 0.9).
 * Relay counters (frames, bytes, frames dropped for congestion) come from the nodes' logs.
 *
 * `CLUSTER_BENCH_PLAYERS` sets the fan-out steps, comma-separated (default 50,100).
 */
import { MessageType, type RtmpMessage } from "../media/protocols/rtmp/message.ts";
import {
  fanOut,
  fanOutLines,
  LightPlayer,
  makeSource,
  measureGroups,
  measureMs,
  perPlayer,
  playerSteps,
  publishLoop,
  type Result,
  sourceSeconds,
  stopPublisher,
  videoKbps,
  waitUntilPlayable,
  type Window,
} from "./support/rtmp_fanout.ts";
import { type RedisServer, startRedis } from "../tests/helpers/redis_server.ts";
import { ServerProcess } from "../tests/helpers/server_process.ts";

/** Length of the latency window, in ms. */
const latencyMs = 10_000;
/** Time given to new players to settle before a window, in ms. */
const settleMs = 2_000;
/** Time the nodes get to log a relay's end after the publisher stopped, in ms. */
const relayEndMs = 2_000;
/** Name of the published stream. */
const streamName = "bench";

const steps = playerSteps("CLUSTER_BENCH_PLAYERS", "50,100");

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A node of the CDN on `redis`; the edge's pull outlives the gaps between the bench's phases. */
function cdnNode(role: "origin" | "edge", redis: RedisServer, dir: string): ServerProcess {
  return new ServerProcess(role, dir, {
    log: { level: "info" },
    cdn: { enabled: true, role, pullGraceMs: 600_000 },
    cluster: { redisUrl: redis.url },
  });
}

/** A node's log lines about relays and pulls, parsed. */
async function relayLog(node: ServerProcess): Promise<Record<string, unknown>[]> {
  const entries = [];
  for (const line of (await Deno.readTextFile(node.logPath)).split("\n")) {
    if (!/"msg":"(relay|cdn pull)/.test(line)) continue;
    try {
      entries.push(JSON.parse(line));
    } catch {
      // Not a whole JSON line.
    }
  }
  return entries;
}

/** Arrival time of each video message of a player, by RTMP timestamp and size. */
class Arrivals {
  readonly atMs = new Map<string, number>();
  recording = false;

  readonly onMessage = (m: RtmpMessage) => {
    // Sequence headers (AVC packet type 0) repeat with timestamp 0: not frames.
    if (!this.recording || m.type !== MessageType.video || m.payload[1] === 0) return;
    const key = `${m.timestamp}/${m.payload.length}`;
    if (!this.atMs.has(key)) this.atMs.set(key, performance.now());
  };
}

/** The `q` quantile of sorted `values` (nearest rank). */
function quantile(sorted: number[], q: number): number {
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))];
}

const pct = (cores: number) => `${(cores * 100).toFixed(1)}%`;

const source = await makeSource();
const dir = await Deno.makeTempDir({ prefix: "bench-cluster-" });
const redis = await startRedis();
const origin = cdnNode("origin", redis, dir);
const edge = cdnNode("edge", redis, dir);
const originStream = `${origin.rtmpUrl}/${streamName}`;
const edgeStream = `${edge.rtmpUrl}/${streamName}`;
let publisher: Deno.ChildProcess | undefined;
let players: LightPlayer[] = [];
try {
  await Promise.all([origin.start(), edge.start()]);
  const sourceBytesPerSecond = (await Deno.stat(source)).size / sourceSeconds;
  publisher = publishLoop(source, originStream);
  await waitUntilPlayable(originStream, "origin");
  await sleep(settleMs);

  // The origin ingesting alone; the edge idle.
  const [ingest, edgeIdle] = await measureGroups([[origin.pid], [edge.pid]], measureMs);

  // One player on the edge: the relay runs.
  const edgeArrivals = new Arrivals();
  const edgePlayer = new LightPlayer(edgeArrivals.onMessage);
  players.push(edgePlayer);
  await edgePlayer.open(edgeStream);
  await sleep(settleMs);
  const edgeBytesBefore = edgePlayer.bytes;
  const [relayOrigin, relayEdge] = await measureGroups([[origin.pid], [edge.pid]], measureMs);
  const edgeMbps = (edgePlayer.bytes - edgeBytesBefore) * 8 / (measureMs / 1000) / 1e6;

  // One player on the origin too: the same messages, timed at both.
  const originArrivals = new Arrivals();
  const originPlayer = new LightPlayer(originArrivals.onMessage);
  players.push(originPlayer);
  await originPlayer.open(originStream);
  await sleep(settleMs);
  originArrivals.recording = edgeArrivals.recording = true;
  await sleep(latencyMs);
  originArrivals.recording = edgeArrivals.recording = false;
  const deltas: number[] = [];
  for (const [key, atOrigin] of originArrivals.atMs) {
    const atEdge = edgeArrivals.atMs.get(key);
    if (atEdge !== undefined) deltas.push(atEdge - atOrigin);
  }
  deltas.sort((a, b) => a - b);
  await Promise.all(players.map((p) => p.close()));
  players = [];

  // Fan-out on the edge (its pull kept by the grace time), then on the origin alone.
  const edgeFanOut: Result = await fanOut(
    "edge",
    edgeStream,
    () => [edge.pid],
    steps,
    sourceBytesPerSecond,
  );
  const singleFanOut: Result = await fanOut(
    "single node",
    originStream,
    () => [origin.pid],
    steps,
    sourceBytesPerSecond,
  );

  await stopPublisher(publisher);
  publisher = undefined;
  await sleep(relayEndMs);

  const row = (label: string, w: Window, base?: Window) =>
    `${label.padEnd(44)} ${pct(w.cores).padStart(6)} CPU ${
      (w.rssKb / 1024).toFixed(1).padStart(6)
    } MiB${base ? ` | +${pct(w.cores - base.cores)} over the row above` : ""}`;
  const edgePer = perPlayer(edgeFanOut);
  const singlePer = perPlayer(singleFanOut);
  console.log(
    `CDN relay: 1 stream (${
      (sourceBytesPerSecond * 8 / 1e6).toFixed(2)
    } Mbit/s: ${videoKbps} kbit/s H.264 + 96 kbit/s AAC), origin -> edge over the relay, Redis cluster store, RTMP players, 127.0.0.1, ${
      measureMs / 1000
    } s windows`,
  );
  console.log(row("origin: publisher only", ingest));
  console.log(row("origin: + relay to the edge", relayOrigin, ingest));
  console.log(row("edge: idle", edgeIdle));
  console.log(
    `${row("edge: relayed stream + 1 RTMP player", relayEdge, edgeIdle)} | player ${
      edgeMbps.toFixed(2)
    } Mbit/s`,
  );
  const edgeRelayOnly = relayEdge.cores - edgeIdle.cores - edgePer.cpu;
  console.log(
    `CPU per relayed stream: origin ${pct(relayOrigin.cores - ingest.cores)}, edge ${
      pct(relayEdge.cores - edgeIdle.cores)
    } with its player (${
      pct(edgeRelayOnly)
    } without the fan-out's per-player cost); one clock tick is ${
      (100 / (measureMs / 10)).toFixed(2)
    }% of a core over a window`,
  );
  console.log(
    deltas.length === 0
      ? `relay added latency: no video message matched (origin ${originArrivals.atMs.size}, edge ${edgeArrivals.atMs.size} messages)`
      : `relay added latency (edge player - origin player, ${deltas.length} of ${originArrivals.atMs.size} video messages matched): p50 ${
        quantile(deltas, 0.5).toFixed(1)
      } ms, p99 ${quantile(deltas, 0.99).toFixed(1)} ms, max ${deltas.at(-1)!.toFixed(1)} ms`,
  );
  for (const line of [...fanOutLines(edgeFanOut), ...fanOutLines(singleFanOut)]) {
    console.log(line);
  }
  console.log(
    `edge / single node players per core: ${
      edgePer.cpu > 0 ? (singlePer.cpu / edgePer.cpu).toFixed(2) : "n/a"
    } (goal >= 0.9); memory per player edge ${edgePer.memKb.toFixed(0)} KiB, single node ${
      singlePer.memKb.toFixed(0)
    } KiB`,
  );
  for (const node of [origin, edge]) {
    for (const entry of await relayLog(node)) {
      const { time: _time, level: _level, ...fields } = entry;
      console.log(`${node.name} log: ${JSON.stringify(fields)}`);
    }
  }
} finally {
  await Promise.all(players.map((p) => p.close()));
  if (publisher) await stopPublisher(publisher);
  await Promise.all([edge.stop(), origin.stop()]);
  await redis.kill();
  await Deno.remove(dir, { recursive: true });
  await Deno.remove(source);
}
