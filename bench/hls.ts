/**
 * HLS: glass-to-player latency of HLS and LL-HLS, and 1,000 viewers polling one stream.
 *
 * Latency: ffmpeg publishes a real-time 640x360 25 fps H.264 + AAC picture over RTMP with its
 * wall clock burnt into every frame (16 boxes, 10 ms units: tests/helpers/hls_player.ts);
 * hls.js in headless Chromium plays the stream's master playlist and reads the clock back off
 * every presented frame (requestVideoFrameCallback, canvas): glass-to-player = wall clock at
 * presentation - wall clock in the picture, p50 and p90 over the window. Ours with the default
 * HLS settings and with `hls.lowLatency` (goal p50 <= 2 s), and the peer: the same publisher
 * writing HLS itself (`ffmpeg -f hls`, 2 s segments like ours) into a folder nginx serves.
 * hls.js's own `latency` (distance to the live edge) is printed next to it.
 *
 * Viewers: the same stream over plain HLS; wrk with `connections` keep-alive connections (one
 * viewer each) cycles through the media playlist and the newest segments it listed, one
 * playlist per segment (what a viewer fetches, without the pauses), first from our server
 * (run as `deno run main.ts`, as users start it), then from nginx (one worker, sendfile)
 * serving the same playlist and segments copied to disk, then by a bare Deno.serve answering
 * them from memory (bench/support/bare_files.ts: the runtime's limit). Each server gets three
 * runs: the viewers' cycle, the playlist alone, the segments alone (a playlist's cost is the
 * server's per request, a segment's mostly the kernel's copy). Requests/s, bytes/s, the CPU
 * of the server's process tree over the same window and that CPU per request (µs); the
 * ratios are ours over nginx's (goal >= 1.0 for requests/s) and over the bare server's.
 *
 * Run: deno run -A bench/hls.ts [latency|viewers] (both parts without an argument; as root it
 * re-runs itself in a loopback-only network namespace, like the browser tests). Needs ffmpeg,
 * wrk, nginx and /usr/bin/chromium (the latency part).
 */
import { netnsEnv, runScriptInNetns } from "../tests/e2e/netns.ts";
import { stopPublisher } from "../tests/helpers/ffmpeg_rtmp.ts";
import {
  type HlsPlayer,
  percentile,
  publishStamped,
  startHlsBrowser,
} from "../tests/helpers/hls_player.ts";
import { freePort, spawnDeno, waitForHttp } from "../tests/helpers/process.ts";
import { startNginxStatic } from "./support/nginx_static.ts";
import { cpuShareBetween, sampleTree } from "./support/process_tree.ts";
import { requireWrk, runWrk, type WrkResult } from "./support/wrk.ts";

if (Deno.env.get(netnsEnv) !== "1" && Deno.uid() === 0) {
  Deno.exit(await runScriptInNetns("bench/hls.ts", Deno.args));
}

/** The part asked for on the command line; both when none. */
const part = Deno.args[0] ?? "all";
if (!["all", "latency", "viewers"].includes(part)) {
  console.error("usage: deno run -A bench/hls.ts [latency|viewers]");
  Deno.exit(2);
}

/**
 * `hls.transport` of our server: as the environment sets it (MEDIASERVER_HLS_TRANSPORT=deno
 * measures the Deno.listen transport), else its default.
 */
const oursTransport = Deno.env.get("MEDIASERVER_HLS_TRANSPORT") ?? "auto";
/** `hls.segmentStore` of our server (MEDIASERVER_HLS_SEGMENT_STORE=tmpfile), else its default. */
const oursStore = Deno.env.get("MEDIASERVER_HLS_SEGMENT_STORE") ?? "memory";
/** Stream name published and played. */
const streamName = "bench";
/** Picture and rate of the publisher. */
const source = { width: 640, height: 360, fps: 25, videoKbps: 1000 };
/** Segment duration of the peer's HLS, in seconds (ours: its default). */
const peerSegmentSec = 2;
/** Playback before the latency window opens, in ms. */
const playWarmupMs = 4000;
/** Latency window, in ms. */
const latencyWindowMs = 12_000;
/** Concurrent viewers of the throughput run. */
const connections = 1000;
/** wrk threads (the machine's cores are shared with the server measured). */
const wrkThreads = 2;
/** Length of the throughput runs, in seconds (after a 2 s warm-up). */
const viewersSec = 8;
/** Newest segments of the playlist the viewers cycle through. */
const viewerSegments = 3;
/** Segments our server keeps in the viewers run, so the cycled ones stay for the whole run. */
const viewersWindowSegments = 30;
/** Longest wait for a server, a first segment, a player, in ms. */
const startTimeoutMs = 30_000;
/** Longest the publisher runs, in seconds (it is stopped when done). */
const publishSec = 600;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Our server as users start it, on free ports; `hls` settings through the environment. */
async function startOurs(hlsEnv: Record<string, string>) {
  const rest = freePort();
  const hls = freePort();
  const rtmp = freePort();
  const child = spawnDeno(["run", "-A", "main.ts"], {
    MEDIASERVER_PORTS_REST: String(rest),
    MEDIASERVER_PORTS_WS: String(freePort()),
    MEDIASERVER_PORTS_WSS: String(freePort()),
    MEDIASERVER_PORTS_HLS: String(hls),
    MEDIASERVER_PORTS_RTMP: String(rtmp),
    MEDIASERVER_LOG_LEVEL: "warn",
    ...hlsEnv,
  }, "null");
  const stop = async () => {
    try {
      child.kill("SIGTERM");
    } catch {
      // Exited already.
    }
    await child.status;
  };
  try {
    await waitForHttp(`http://127.0.0.1:${rest}/health`, startTimeoutMs);
  } catch (err) {
    await stop();
    throw err;
  }
  return {
    pid: child.pid,
    rtmpUrl: `rtmp://127.0.0.1:${rtmp}/live/${streamName}`,
    hlsUrl: `http://127.0.0.1:${hls}`,
    stop,
  };
}

/** Polls `url` until it answers 200 with a body passing `ok`; returns the body. */
async function waitForText(url: string, ok: (text: string) => boolean): Promise<string> {
  const deadline = Date.now() + startTimeoutMs;
  let last = "";
  for (;;) {
    try {
      const res = await fetch(url);
      last = `${res.status} ${await res.text()}`;
      if (res.ok && ok(last.slice(4))) return last.slice(4);
    } catch (err) {
      last = String(err);
    }
    if (Date.now() > deadline) throw new Error(`${url} not ready: ${last.slice(0, 300)}`);
    await sleep(250);
  }
}

/** URIs of a playlist's segments (or variant playlists), in order. */
function uris(playlist: string): string[] {
  return playlist.split("\n").map((l) => l.trim()).filter((l) => l && !l.startsWith("#"));
}

/** A playlist with at least `n` complete segments. */
const hasSegments = (n: number) => (text: string) =>
  text.includes("#EXTM3U") && uris(text).length >= n;

interface Latency {
  glassP50: number;
  glassP90: number;
  samples: number;
  /** hls.js's distance to the live edge, in ms. */
  hlsJsMs: number;
  stalls: number;
}

/** Plays `masterUrl` in a fresh page and measures glass-to-player over the window. */
async function measureLatency(
  newPlayer: () => Promise<HlsPlayer>,
  masterUrl: string,
  lowLatency: boolean,
): Promise<Latency> {
  const player = await newPlayer();
  try {
    await player.play(masterUrl, { lowLatencyMode: lowLatency });
    await sleep(playWarmupMs);
    await player.readStamps();
    await player.glassLatencies();
    await sleep(latencyWindowMs);
    const samples = await player.glassLatencies();
    const state = await player.state();
    if (samples.length < latencyWindowMs / 1000 * source.fps * 0.5) {
      throw new Error(`${samples.length} frames presented in the window: ${JSON.stringify(state)}`);
    }
    if (lowLatency && state.partsLoaded === 0) {
      throw new Error(`hls.js loaded no LL-HLS part: ${JSON.stringify(state)}`);
    }
    return {
      glassP50: percentile(samples, 50),
      glassP90: percentile(samples, 90),
      samples: samples.length,
      hlsJsMs: state.latency * 1000,
      stalls: state.waitingAfterStart,
    };
  } finally {
    await player.close();
  }
}

/** Glass-to-player through our server with `hlsEnv` settings. */
async function oursLatency(
  newPlayer: () => Promise<HlsPlayer>,
  hlsEnv: Record<string, string>,
  lowLatency: boolean,
): Promise<Latency> {
  const server = await startOurs(hlsEnv);
  const publisher = publishStamped({ url: server.rtmpUrl, seconds: publishSec, ...source });
  try {
    const master = `${server.hlsUrl}/${streamName}/${streamName}.m3u8`;
    // Playing the URL starts the HLS output on demand. hls.js starts a live stream three
    // target durations from its end, from a shorter playlist too near the live edge.
    const variant = uris(await waitForText(master, hasSegments(1)))[0];
    await waitForText(new URL(variant, master).href, hasSegments(3));
    return await measureLatency(newPlayer, master, lowLatency);
  } finally {
    await stopPublisher(publisher);
    await server.stop();
  }
}

/** Glass-to-player through ffmpeg's own HLS muxer, served by nginx. */
async function peerLatency(newPlayer: () => Promise<HlsPlayer>): Promise<Latency> {
  const dir = await Deno.makeTempDir({ prefix: "hls-bench-peer-" });
  const nginx = await startNginxStatic(dir, 100);
  const publisher = publishStamped({
    url: `${dir}/index.m3u8`,
    format: "hls",
    seconds: publishSec,
    ...source,
    outputArgs: [
      ...["-hls_time", String(peerSegmentSec), "-hls_list_size", "6"],
      ...["-hls_flags", "delete_segments+program_date_time", "-master_pl_name", "master.m3u8"],
    ],
  });
  try {
    await waitForText(`${nginx.url}/index.m3u8`, hasSegments(3));
    return await measureLatency(newPlayer, `${nginx.url}/master.m3u8`, false);
  } finally {
    await stopPublisher(publisher);
    await nginx.stop();
    await Deno.remove(dir, { recursive: true });
  }
}

/** The wrk script: each request the next of `paths`, in turn (per wrk thread). */
function cycleScript(paths: string[]): string {
  return `local paths = { ${paths.map((p) => JSON.stringify(p)).join(", ")} }
local i = 0
request = function()
  i = i % #paths + 1
  return wrk.format("GET", paths[i])
end
`;
}

/** The request cycle of a viewer: the media playlist before each of the newest segments. */
function viewerPaths(variantPath: string, playlist: string): string[] {
  const base = variantPath.slice(0, variantPath.lastIndexOf("/") + 1);
  return uris(playlist).slice(-viewerSegments).flatMap((s) => [variantPath, base + s]);
}

interface Throughput {
  wrk: WrkResult;
  /** CPU of the server's process tree over the run, share of one core. */
  cpu: number;
}

/** The runs of one server: the viewers' cycle, the playlist alone, the segments alone. */
interface Loads {
  cycle: Throughput;
  playlist: Throughput;
  segments: Throughput;
}

/** Kinds of run, in the order run and printed. */
const loadKinds = ["cycle", "playlist", "segments"] as const;

/** wrk against `origin` cycling `paths`, with the CPU of the tree under `pid` meanwhile. */
async function load(origin: string, paths: string[], pid: number): Promise<Throughput> {
  const options = {
    url: `${origin}${paths[0]}`,
    connections,
    threads: wrkThreads,
    method: "GET" as const,
    script: cycleScript(paths),
  };
  await runWrk({ ...options, durationSeconds: 2 }); // warm-up
  const before = sampleTree(pid);
  const wrk = await runWrk({ ...options, durationSeconds: viewersSec });
  return { wrk, cpu: cpuShareBetween(before, sampleTree(pid)) };
}

/** The three runs against `origin`: the cycle, then its playlist and its segments apart. */
async function loads(origin: string, paths: string[], pid: number): Promise<Loads> {
  const isPlaylist = (path: string) => path.endsWith(".m3u8");
  return {
    cycle: await load(origin, paths, pid),
    playlist: await load(origin, [...new Set(paths.filter(isPlaylist))], pid),
    segments: await load(origin, paths.filter((path) => !isPlaylist(path)), pid),
  };
}

/**
 * 1,000 viewers on our server, then on nginx serving the same files: our playlist and
 * segments are copied to disk just before our run.
 */
async function viewers(): Promise<{ ours: Loads; nginx: Loads; bare: Loads; bytes: number }> {
  const dir = await Deno.makeTempDir({ prefix: "hls-bench-files-" });
  try {
    const server = await startOurs({
      MEDIASERVER_HLS_WINDOW_SEGMENTS: String(viewersWindowSegments),
    });
    const publisher = publishStamped({ url: server.rtmpUrl, seconds: publishSec, ...source });
    let ours: Loads;
    let paths: string[];
    let bytes = 0;
    try {
      const masterPath = `/${streamName}/${streamName}.m3u8`;
      const master = await waitForText(`${server.hlsUrl}${masterPath}`, hasSegments(1));
      const variantPath = new URL(uris(master)[0], `${server.hlsUrl}${masterPath}`).pathname;
      const playlist = await waitForText(
        `${server.hlsUrl}${variantPath}`,
        hasSegments(viewerSegments),
      );
      paths = viewerPaths(variantPath, playlist);
      // The files nginx serves: the playlist as the cycle saw it, the segments it lists.
      const files = new Map([[masterPath, new TextEncoder().encode(master)]]);
      files.set(variantPath, new TextEncoder().encode(playlist));
      for (const path of new Set(paths)) {
        if (files.has(path)) continue;
        const res = await fetch(`${server.hlsUrl}${path}`);
        if (!res.ok) throw new Error(`${path}: HTTP ${res.status}`);
        files.set(path, new Uint8Array(await res.arrayBuffer()));
      }
      for (const [path, body] of files) {
        await Deno.mkdir(`${dir}${path.slice(0, path.lastIndexOf("/"))}`, { recursive: true });
        await Deno.writeFile(`${dir}${path}`, body);
      }
      bytes = paths.reduce((n, path) => n + files.get(path)!.length, 0) / paths.length;
      ours = await loads(server.hlsUrl, paths, server.pid);
    } finally {
      await stopPublisher(publisher);
      await server.stop();
    }
    const nginx = await startNginxStatic(dir, connections);
    let nginxResult: Loads;
    try {
      nginxResult = await loads(nginx.url, paths, nginx.pid);
    } finally {
      await nginx.stop();
    }
    const barePort = freePort();
    const bare = spawnDeno(
      ["run", "-A", "bench/support/bare_files.ts", String(barePort), dir],
      {},
      "null",
    );
    try {
      const origin = `http://127.0.0.1:${barePort}`;
      await waitForHttp(`${origin}${paths[0]}`, startTimeoutMs);
      return { ours, nginx: nginxResult, bare: await loads(origin, paths, bare.pid), bytes };
    } finally {
      bare.kill("SIGTERM");
      await bare.status;
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

function latencyLine(label: string, l: Latency): string {
  return `${label.padEnd(34)} glass-to-player p50 ${(l.glassP50 / 1000).toFixed(2)} s  p90 ${
    (l.glassP90 / 1000).toFixed(2)
  } s  (${l.samples} frames; hls.js latency ${
    (l.hlsJsMs / 1000).toFixed(2)
  } s; stalls ${l.stalls})`;
}

function viewersLine(label: string, t: Throughput): string {
  const r = t.wrk;
  return `${label.padEnd(34)} ${r.requestsPerSecond.toFixed(0).padStart(7)} req/s  ${
    (r.bytesPerSecond * 8 / 1e9).toFixed(2)
  } Gbit/s  p50 ${r.p50Ms.toFixed(1)} ms  p99 ${r.p99Ms.toFixed(1)} ms  errors ${r.errors}  cpu ${
    (t.cpu * 100).toFixed(0)
  }% (${(r.requestsPerSecond / Math.max(t.cpu, 0.01)).toFixed(0)} req per cpu-second, ${
    (t.cpu * 1e6 / r.requestsPerSecond).toFixed(1)
  } µs cpu per request)`;
}

async function latencyPart(): Promise<void> {
  const browser = await startHlsBrowser();
  let latencies: [string, Latency][];
  try {
    const newPlayer = () => browser.newPlayer();
    latencies = [
      ["ours  HLS (defaults)", await oursLatency(newPlayer, {}, false)],
      [
        "ours  LL-HLS (hls.lowLatency)",
        await oursLatency(newPlayer, { MEDIASERVER_HLS_LOW_LATENCY: "true" }, true),
      ],
      [`ffmpeg -f hls (${peerSegmentSec} s) + nginx`, await peerLatency(newPlayer)],
    ];
  } finally {
    await browser.close();
  }
  console.log(
    `HLS glass-to-player, ${source.width}x${source.height} ${source.fps} fps H.264 ${source.videoKbps} kbit/s + AAC over RTMP, hls.js ${
      latencyWindowMs / 1000
    } s window after ${playWarmupMs / 1000} s of play (goal LL-HLS p50 <= 2 s)`,
  );
  for (const [label, l] of latencies) console.log(latencyLine(label, l));
  console.log(
    `ratio ours/peer p50: HLS ${(latencies[0][1].glassP50 / latencies[2][1].glassP50).toFixed(2)}`,
  );
}

async function viewersPart(): Promise<void> {
  const v = await viewers();
  console.log(
    `HLS viewers: ${connections} connections (wrk -t${wrkThreads}) cycling the media playlist and the newest ${viewerSegments} segments (${
      (v.bytes / 1024).toFixed(0)
    } KiB per request on average), ${viewersSec} s`,
  );
  for (const kind of loadKinds) {
    console.log(`${kind}:`);
    console.log(
      viewersLine(
        `  ours  (main.ts, transport ${oursTransport}, segments in ${oursStore})`,
        v.ours[kind],
      ),
    );
    console.log(viewersLine("  nginx (1 worker, sendfile)", v.nginx[kind]));
    console.log(viewersLine("  bare Deno.serve, files in memory", v.bare[kind]));
  }
  for (const kind of loadKinds) {
    const [ours, nginx, bare] = [v.ours[kind], v.nginx[kind], v.bare[kind]];
    const perCpu = (t: Throughput) => t.wrk.requestsPerSecond / Math.max(t.cpu, 0.01);
    console.log(
      `ratio ours/nginx ${kind}: requests/s ${
        (ours.wrk.requestsPerSecond / nginx.wrk.requestsPerSecond).toFixed(2)
      } (goal >= 1.0), requests per cpu-second ${
        (perCpu(ours) / perCpu(nginx)).toFixed(2)
      }; ours/bare Deno.serve: requests/s ${
        (ours.wrk.requestsPerSecond / bare.wrk.requestsPerSecond).toFixed(2)
      }`,
    );
  }
}

await requireWrk();
if (part !== "viewers") await latencyPart();
if (part !== "latency") await viewersPart();
