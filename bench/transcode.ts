/**
 * Live transcoding (`/transcoder/startup`): CPU, memory, output frame rate and added latency
 * of the pipeline, next to the `ffmpeg` CLI doing the same jobs, in one run (~2.5 minutes).
 *
 * Sources are VOD streams (`/vod/startup vod-live://...`, played in real time) of clips made
 * once with ffmpeg and cached in $TMPDIR/bench-clips/: testsrc2 at 30 fps, x264
 * `veryfast` (B-frames) with a keyframe every 2 s, AAC. The server runs in this process.
 * 1. Native engine (plain H.264 outputs are fused renditions: one ffmpeg per source, a child
 *    of this process, reads the source's frames as fragmented MP4, decodes them once, scales
 *    with the peers' area scaler and encodes every output; audio passed through). 720p30
 *    source → one transcoder to 640x360 30 fps H.264, then three more (480x270, 320x180,
 *    256x144) on the same source. CPU of a phase = this process + all its descendants over a window,
 *    minus the same window with only the source playing (its own cost is not the
 *    transcoder's). The peers: `ffmpeg -re` on the same file with the same decoder threads,
 *    the same scaler (area averaging, as the pipeline downscales) and the encoder arguments
 *    the pipeline uses (`videoEncoderArgs`), audio copied, output to /dev/null: one CLI for
 *    the single profile; for the four profiles, four CLIs (one each, the goal's comparison)
 *    and, for reference, one CLI that decodes once and splits. Ratios are ours over peers',
 *    per output frame (a side that fell behind real time did less work in its window).
 *    RSS growth is this process's and its children's, per transcoder (the first one also
 *    starts the shared decoder). Where our CPU goes is printed too: the ffmpeg children by
 *    role (decoder, encoders) and this process's threads by name (main, Workers, V8 helpers).
 * 2. Added latency, source → output: readers on the source Stream and on each output Stream
 *    note the wall time each video pts arrives; an output frame is matched to the source
 *    frame of the nearest pts (same timeline; at 30 → 30 fps they coincide).
 * 3. wasm engine (ffmpeg.wasm in Workers): real-time factor of a 360p30 and a 720p30 source
 *    transcoded at its own size (output frames per wall second / 30), the cores it used over
 *    the source's, and the factor per core used (what one core would sustain), with the
 *    frames the decoder and the transcoder dropped.
 *
 * Every phase prints the output frame rate it measured; a ratio of a side below 90% of the
 * source's rate is marked NOT VALID, and the run exits 1 when a native output ran below half
 * of it (a broken pipeline, not a busy machine).
 * Run: deno run -A bench/transcode.ts  (BENCH_LOG=info shows the server's log on stderr)
 */
import { createLogger, type LogLevel, silentLogger } from "../core/log.ts";
import type { Stream } from "../media/stream.ts";
import { videoEncoderArgs } from "../media/transcoder/video_encoder_args.ts";
import { testConfig } from "../tests/helpers/test_server.ts";
import { startTestServer, type TestServer } from "../tests/helpers/test_server.ts";
import {
  cpuShareBetween,
  sampleTree,
  threadSharesBetween,
  type TreeSample,
} from "./support/process_tree.ts";
import { peerProgressArgs, type PeerRun, runPeers } from "./support/ffmpeg_peers.ts";
import { testClip } from "./support/test_clip.ts";
import { VideoArrivals } from "./support/video_arrivals.ts";

/** Frame rate of every source and output. */
const fps = 30;
/** Keyframe interval of the sources and outputs, in frames (2 s). */
const keyFrameInterval = 60;
/** Length of the clips, in seconds: longer than every phase played on one source. */
const clipSeconds = 60;
/** Output profiles of the four-profile phase; the first is the single-profile phase's. */
const profiles = [[640, 360], [480, 270], [320, 180], [256, 144]] as const;
/** Time the source plays before the source-only window opens, in milliseconds. */
const settleMs = 2000;
/** Time every output flows before a window opens, in milliseconds. */
const warmupMs = 3000;
/** Measuring window, in milliseconds. */
const windowMs = 6000;
/** wasm runs in chunks of about a second: a longer warmup and window. */
const wasmWarmupMs = 5000;
const wasmWindowMs = 8000;
/** Longest wait for the first output frame of a transcoder, in milliseconds. */
const flowTimeoutMs = 30_000;
/** Below this share of the source's frame rate, an output (or a peer) did not keep up. */
const flowingShare = 0.9;
/** One output frame matches the source frame of the nearest pts within this, in 90 kHz. */
const matchTicks = 90000 / fps;

/** The server's log: silent, or on stderr at the level of BENCH_LOG (to see why a phase failed). */
const benchLogLevel = Deno.env.get("BENCH_LOG") as LogLevel | undefined;
const serverLog = benchLogLevel
  ? createLogger({ level: benchLogLevel, write: (line) => console.error(line) })
  : silentLogger;

/** The clip `WxH` (cached): testsrc2 30 fps, x264 veryfast with B-frames, GOP 2 s, AAC. */
const clip = (width: number, height: number) =>
  testClip(width, height, { fps, keyFrameInterval, seconds: clipSeconds });

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))];
}

/**
 * Delays from each source frame to the output frame of its pts, for the output frames that
 * arrived in [fromMs, toMs), in milliseconds.
 */
function latencies(source: VideoArrivals, output: VideoArrivals, fromMs: number, toMs: number) {
  const bySourcePts = source.pts.map((pts, i) => ({ pts, atMs: source.atMs[i] }))
    .sort((a, b) => a.pts - b.pts);
  const out: number[] = [];
  for (let i = 0; i < output.pts.length; i++) {
    const at = output.atMs[i];
    if (at < fromMs || at >= toMs) continue;
    const pts = output.pts[i];
    // Nearest source pts (binary search).
    let lo = 0;
    let hi = bySourcePts.length - 1;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (bySourcePts[mid].pts < pts) lo = mid + 1;
      else hi = mid;
    }
    const candidates = [bySourcePts[lo], bySourcePts[lo - 1]].filter((c) => c !== undefined);
    const best = candidates.sort((a, b) => Math.abs(a.pts - pts) - Math.abs(b.pts - pts))[0];
    if (best && Math.abs(best.pts - pts) <= matchTicks) out.push(at - best.atMs);
  }
  return out;
}

/** What one measured window of the server gives. */
interface Window {
  /** This process and its descendants, share of one core. */
  cpu: number;
  /** This process alone (kernel Workers, pipes, muxing), share of one core. */
  processCpu: number;
  /** This process's threads by name, shares of one core. */
  threads: Map<string, number>;
  /** The ffmpeg children by role ("decoder", "encoder", "other"), shares of one core. */
  roles: Map<string, number>;
  /** Resident memory of each ffmpeg child at the end, in MiB, by role. */
  rssByRole: Map<string, number[]>;
  /** Video frames per second arriving at each output's reader. */
  outFps: number[];
  /** Source → output delays of the frames of the window, all outputs, in ms, sorted. */
  latencyMs: number[];
  end: TreeSample;
}

/**
 * What an ffmpeg child of the pipeline does, from its arguments: a fused one decodes and
 * encodes every plain rendition of a source (a filter graph), a decoder writes raw video,
 * an encoder reads it.
 */
function roleOf(pid: number): string {
  let args: string[];
  try {
    args = Deno.readTextFileSync(`/proc/${pid}/cmdline`).split("\0");
  } catch {
    return "other";
  }
  if (args.includes("-filter_complex")) return "fused";
  const raw = args.indexOf("rawvideo");
  if (raw < 0) return "other";
  return raw > args.indexOf("-i") ? "decoder" : "encoder";
}

/** A server of one engine with a VOD source `src` of `clipPath` playing, readers attached. */
class Bench {
  readonly outputs = new Map<string, VideoArrivals>();
  source!: VideoArrivals;

  private constructor(readonly server: TestServer) {}

  static async start(engine: "native" | "wasm", clipPath: string): Promise<Bench> {
    const config = testConfig({ media: { engine } });
    await Deno.mkdir(config.folders.media, { recursive: true });
    await Deno.copyFile(clipPath, `${config.folders.media}/source.mp4`);
    const bench = new Bench(await startTestServer(config, serverLog));
    try {
      await bench.#ok("/vod/startup", { uri: "vod-live://source.mp4", localStreamName: "src" });
      bench.source = new VideoArrivals(bench.#stream("src"));
    } catch (err) {
      await bench.stop();
      throw err;
    }
    return bench;
  }

  /** Starts a transcoder of the source to `name` at width x height, fps; waits for frames. */
  async transcode(name: string, width: number, height: number): Promise<void> {
    await this.#ok("/transcoder/startup", {
      uri: `transcoder://${name}`,
      remoteStreamName: "src",
      localStreamName: name,
      encoder: { width, height, fps, keyFrameInterval },
    });
    const output = new VideoArrivals(this.#stream(name));
    this.outputs.set(name, output);
    const deadline = performance.now() + flowTimeoutMs;
    while (output.pts.length === 0) {
      if (performance.now() > deadline) {
        const records = await (await this.server.post("/transcoder/find_all", {})).text();
        throw new Error(`no frame from ${name} in ${flowTimeoutMs} ms; transcoders: ${records}`);
      }
      await sleep(50);
    }
  }

  /** Measures a window of `ms`. */
  async measure(ms: number): Promise<Window> {
    const start = sampleTree(Deno.pid);
    await sleep(ms);
    const end = sampleTree(Deno.pid);
    const seconds = (end.atMs - start.atMs) / 1000;
    const outFps: number[] = [];
    const latencyMs: number[] = [];
    for (const output of this.outputs.values()) {
      outFps.push(output.countBetween(start.atMs, end.atMs) / seconds);
      latencyMs.push(...latencies(this.source, output, start.atMs, end.atMs));
    }
    const rssByRole = new Map<string, number[]>();
    for (const [pid, rss] of end.childRssMiB) {
      const role = roleOf(pid);
      rssByRole.set(role, [...rssByRole.get(role) ?? [], rss]);
    }
    return {
      cpu: cpuShareBetween(start, end),
      rssByRole,
      processCpu: cpuShareBetween(start, end, (pid) => pid === Deno.pid),
      threads: new Map(threadSharesBetween(start, end)),
      roles: new Map(
        ["fused", "decoder", "encoder", "other"].map((
          role,
        ) => [
          role,
          cpuShareBetween(start, end, (pid) => pid !== Deno.pid && roleOf(pid) === role),
        ]),
      ),
      outFps,
      latencyMs: latencyMs.sort((a, b) => a - b),
      end,
    };
  }

  /**
   * Frames dropped so far: by the source's shared decoder, and by the transcoders (their
   * records: composer and encoder).
   */
  async dropped(): Promise<string> {
    const res = await this.server.post("/transcoder/find_all", {});
    const records = await res.json() as { droppedFrames: number }[];
    const renditions = records.reduce((n, r) => n + r.droppedFrames, 0);
    const decoder = this.server.services.decoders.droppedFrames(this.#stream("src"));
    return `decoder ${decoder}, transcoders ${renditions}`;
  }

  async stop(): Promise<void> {
    await Promise.all([this.source, ...this.outputs.values()].map((r) => r?.close()));
    await this.server.stop();
  }

  #stream(name: string): Stream {
    const stream = this.server.services.streams.published(name);
    if (!stream) throw new Error(`stream ${name} is not published`);
    return stream as Stream;
  }

  async #ok(path: string, body: unknown): Promise<void> {
    const res = await this.server.post(path, body);
    const text = await res.text();
    if (res.status !== 200) throw new Error(`${path} answered ${res.status}: ${text}`);
  }
}

/** The encoder arguments of the pipeline for one profile, output format included. */
function encoderOutputArgs(width: number, height: number): string[] {
  return videoEncoderArgs(
    { codec: "H264", width, height, fps, keyFrameInterval, bitrateKbps: 0 },
    "native",
  ).outputArgs;
}

/** `ffmpeg -re` reading `clipPath` with the pipeline's decoder settings and progress on stdout. */
function peerInputArgs(clipPath: string): string[] {
  return [
    ...peerProgressArgs,
    // The native engine runs every ffmpeg with one decoding thread.
    ...["-threads", "1", "-re", "-i", clipPath],
  ];
}

/** One CLI: decode, scale to width x height, encode as the pipeline does; audio copied. */
function singleProfilePeer(clipPath: string, width: number, height: number): string[] {
  return [
    ...peerInputArgs(clipPath),
    ...["-vf", `scale=${width}:${height}:flags=area`, "-c:a", "copy"],
    ...encoderOutputArgs(width, height),
    ...["-y", "/dev/null"],
  ];
}

/** One CLI: decode once, split into every profile (a scaler and an encoder each). */
function splitPeer(clipPath: string): string[] {
  const labels = profiles.map((_, i) => `[s${i}]`).join("");
  const graph = [
    `[0:v]split=${profiles.length}${labels}`,
    ...profiles.map(([w, h], i) => `[s${i}]scale=${w}:${h}:flags=area[o${i}]`),
  ].join(";");
  return [
    ...peerInputArgs(clipPath),
    ...["-filter_complex", graph],
    ...profiles.flatMap(([w, h], i) => [
      ...["-map", `[o${i}]`],
      ...(i === 0 ? ["-map", "0:a", "-c:a", "copy"] : []),
      ...encoderOutputArgs(w, h),
      ...["-y", "/dev/null"],
    ]),
  ];
}

/** Runs the CLIs side by side; measures a window once each has encoded and warmed up. */
const peers = (argLists: string[][]) => runPeers(argLists, { flowTimeoutMs, warmupMs, windowMs });

const pct = (share: number) => `${(share * 100).toFixed(1)}%`;
const fpsText = (list: number[]) =>
  list.length === 1
    ? list[0].toFixed(1)
    : `${Math.min(...list).toFixed(1)}-${Math.max(...list).toFixed(1)}`;
const flowing = (list: number[]) => list.length > 0 && list.every((f) => f >= flowingShare * fps);
const latencyText = (sorted: number[]) =>
  sorted.length === 0
    ? "no matched frames"
    : `p50 ${percentile(sorted, 0.5).toFixed(0)} ms, p99 ${
      percentile(sorted, 0.99).toFixed(0)
    } ms (${sorted.length} frames)`;

/** CPU per output frame, in ms: `cpu` (share of one core) over the frames of every output. */
const msPerFrame = (cpu: number, outFps: number[]) =>
  cpu * 1000 / outFps.reduce((a, b) => a + b, 0);

/**
 * Ours over the peer's, per output frame (a side that fell behind did less work in the
 * window), with a warning when a side did not keep the source's rate.
 */
function ratio(ours: number, oursFps: number[], peer: PeerRun, goal: string): string {
  const value = msPerFrame(ours, oursFps) / msPerFrame(peer.cpu, peer.outFps);
  const note = !flowing(oursFps)
    ? "; NOT VALID: our outputs fell behind the source's rate"
    : !flowing(peer.outFps)
    ? "; NOT VALID: the ffmpeg peer fell behind real time"
    : "";
  return `${value.toFixed(2)} (goal ${goal}${note})`;
}

/** Set when a native output ran below half the source's rate: the pipeline is broken. */
let nativeBroken = false;

async function benchNative(clip720: string): Promise<void> {
  const preset = encoderOutputArgs(640, 360).slice(0, 4).join(" ");
  console.log(
    `Native engine, 720p30 H.264+AAC source (x264 veryfast, B-frames, GOP ${keyFrameInterval})` +
      ` → H.264 ${fps} fps (${preset} ..., as the pipeline):`,
  );
  const bench = await Bench.start("native", clip720);
  let idle: Window;
  let one: Window;
  let four: Window;
  let dropped: string;
  try {
    await sleep(settleMs);
    idle = await bench.measure(windowMs);
    const [w0, h0] = profiles[0];
    await bench.transcode("p0", w0, h0);
    await sleep(warmupMs);
    one = await bench.measure(windowMs);
    for (let i = 1; i < profiles.length; i++) {
      const [w, h] = profiles[i];
      await bench.transcode(`p${i}`, w, h);
    }
    await sleep(warmupMs);
    four = await bench.measure(windowMs);
    dropped = await bench.dropped();
  } finally {
    await bench.stop();
  }
  const peerOne = await peers([singleProfilePeer(clip720, ...profiles[0])]);
  const peerFour = await peers(profiles.map(([w, h]) => singleProfilePeer(clip720, w, h)));
  const splitRun = await peers([splitPeer(clip720)]);
  // ffmpeg reports the progress of its first output; the split's outputs move in lockstep, so
  // each profile made as many frames (a ratio per output frame must count all four).
  const peerSplit = { ...splitRun, outFps: profiles.map(() => splitRun.outFps[0]) };

  const oursOne = Math.max(0, one.cpu - idle.cpu);
  const oursFour = Math.max(0, four.cpu - idle.cpu);
  const oursText = (w: Window, cpu: number) =>
    `${pct(cpu)} (process ${pct(w.processCpu - idle.processCpu)} + ffmpeg ${
      pct(w.cpu - w.processCpu - (idle.cpu - idle.processCpu))
    })`;
  const row = (label: string, ours: string, out: string, peer: string, peerOut: string) =>
    console.log(
      `${label.padEnd(27)}| ${ours.padEnd(36)}| ${out.padStart(9)} | ${peer.padStart(7)} | ${
        peerOut.padStart(9)
      }`,
    );
  row("case", "ours cpu over the source's", "out fps", "ffmpeg", "out fps");
  row("source only (subtracted)", pct(idle.cpu), "-", "-", "-");
  row(
    "1 x 640x360",
    oursText(one, oursOne),
    fpsText(one.outFps),
    pct(peerOne.cpu),
    fpsText(peerOne.outFps),
  );
  row(
    "4 profiles / 4 ffmpeg CLIs",
    oursText(four, oursFour),
    fpsText(four.outFps),
    pct(peerFour.cpu),
    fpsText(peerFour.outFps),
  );
  row("4 profiles / 1 ffmpeg split", "(same)", "", pct(peerSplit.cpu), fpsText(peerSplit.outFps));
  console.log(
    `(cpu: share of one core; profiles ${
      profiles.map(([w, h]) => `${w}x${h}`).join(", ")
    }; ratios per output frame)`,
  );
  console.log(
    `ratio 1 transcoder, ours/ffmpeg:         ${ratio(oursOne, one.outFps, peerOne, "<= 1.1")}`,
  );
  console.log(
    `ratio 4 profiles, ours/4 ffmpeg CLIs:    ${ratio(oursFour, four.outFps, peerFour, "<= 0.6")}`,
  );
  console.log(
    `ratio 4 profiles, ours/1 ffmpeg (split): ${ratio(oursFour, four.outFps, peerSplit, "-")}`,
  );
  console.log(`latency source→output, 1 transcoder:  ${latencyText(one.latencyMs)}`);
  console.log(`latency source→output, 4 transcoders: ${latencyText(four.latencyMs)}`);
  const growth = (w: Window, n: number) => {
    const proc = (w.end.rootRssMiB - idle.end.rootRssMiB) / n;
    const kids = (w.end.childrenRssMiB - idle.end.childrenRssMiB) / n;
    return `${(proc + kids).toFixed(1)} MiB (process ${proc.toFixed(1)} + ffmpeg ${
      kids.toFixed(1)
    }; ${w.end.children} ffmpeg running)`;
  };
  console.log(`RSS growth per transcoder, 1 running: ${growth(one, 1)}`);
  console.log(`RSS growth per transcoder, 4 running: ${growth(four, profiles.length)}`);
  console.log(
    `RSS of the peers: 1 CLI ${peerOne.rssMiB.toFixed(1)} MiB, 4 CLIs ${
      (peerFour.rssMiB / profiles.length).toFixed(1)
    } MiB each, split ${peerSplit.rssMiB.toFixed(1)} MiB`,
  );
  const over = (w: Window, shares: (x: Window) => Map<string, number>) =>
    [...shares(w)].map(([name, share]) => [name, share - (shares(idle).get(name) ?? 0)] as const)
      .filter(([, share]) => share >= 0.005)
      .sort((a, b) => b[1] - a[1])
      .map(([name, share]) => `${name} ${pct(share)}`).join(", ");
  for (const [label, w] of [["1", one], ["4", four]] as const) {
    console.log(
      `where ours goes, ${label} running: ffmpeg ${over(w, (x) => x.roles)}; process threads ${
        over(w, (x) => x.threads)
      }`,
    );
  }
  console.log(
    `RSS of our ffmpeg children, 4 running: ${
      [...four.rssByRole].map(([role, list]) =>
        `${list.length} ${role} ${
          (list.reduce((a, b) => a + b, 0) / list.length).toFixed(1)
        } MiB each`
      ).join(", ")
    }`,
  );
  console.log(`frames dropped so far: ${dropped}`);
  if ([...one.outFps, ...four.outFps].some((f) => f < fps / 2)) {
    nativeBroken = true;
    console.log(`OUTPUT NOT FLOWING: an output ran below ${fps / 2} fps`);
  }
}

async function benchWasm(width: number, height: number, clipPath: string): Promise<void> {
  const bench = await Bench.start("wasm", clipPath);
  try {
    await sleep(settleMs);
    const idle = await bench.measure(windowMs / 2);
    await bench.transcode("w", width, height);
    await sleep(wasmWarmupMs);
    const w = await bench.measure(wasmWindowMs);
    const factor = w.outFps[0] / fps;
    const cores = w.cpu - idle.cpu;
    console.log(
      `${`${width}x${height}`.padEnd(9)} | real-time factor ${factor.toFixed(2)} (${
        w.outFps[0].toFixed(1)
      } fps out), ${(factor / cores).toFixed(2)} per core used | cores ${
        cores.toFixed(2)
      } over the source's | latency ${latencyText(w.latencyMs)} | dropped: ${await bench
        .dropped()}`,
    );
  } finally {
    await bench.stop();
  }
}

const clip720 = await clip(1280, 720);
const clip360 = await clip(640, 360);
await benchNative(clip720);
console.log(`\nwasm engine (ffmpeg.wasm in Workers), source size → same size, ${fps} fps:`);
for (const [width, height, path] of [[640, 360, clip360], [1280, 720, clip720]] as const) {
  try {
    await benchWasm(width, height, path);
  } catch (err) {
    console.log(`${width}x${height}: FAILED: ${(err as Error).message}`);
  }
}
if (nativeBroken) Deno.exit(1);
