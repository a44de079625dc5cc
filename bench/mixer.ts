/**
 * Mixer (`/mixer/startup`, `/mixer/add`): CPU of a mixer next to the `ffmpeg` CLI doing the
 * same job, mixers per core, audio mixing CPU per input, output frame rate and dropped
 * pictures, in one run (~2 minutes).
 *
 * Inputs are VOD streams (`vod-live://`, played in real time) of one 640x360 clip
 * (testsrc2 30 fps, x264 `veryfast` with B-frames, AAC; cached, see support/test_clip.ts).
 * The server runs in this process; a mixer's output is what the configuration gives
 * (`mixer.*`: 1280x720 30 fps H.264 at 2000 kbit/s, a keyframe every 2 s, Opus), so four
 * inputs make a 2x2 grid of 640x360 tiles.
 * 1. Native engine, 4 inputs → one mixer, then a second mixer of 4 other inputs: CPU of this
 *    process and all its ffmpeg children over a window (decoders, composer, audio mixer,
 *    encoders), minus the same window with only the inputs playing. Per mixer, per second
 *    of output (a mixer that fell behind did less work), and mixers per core (1 / cores per
 *    mixer). The peer: one `ffmpeg` reading the 4 files with `-re` (one decoding thread
 *    each, as ours), `xstack` (2x2, each scaled to 640x360) and `amix`, encoding with the
 *    arguments our encoders use (`videoEncoderArgs`, `codecArgs` of the mixer's Opus track),
 *    to /dev/null. The ratio is ours over the peer's per output frame (goal <= 1.0). Where
 *    the difference lies: the peer decoding alone (to `-f null`) and decoding + stacking
 *    (`xstack` to `-f null`); their difference is ffmpeg's composing, next to our kernel
 *    Workers' threads.
 * 2. Audio only (`hasVideo: false`), 1 then 4 inputs: the CPU difference per added input.
 * 3. wasm engine (`media.engine: "wasm"`): a mixer of the 4 inputs if it starts; with audio
 *    first, and without audio when that is refused.
 * Output rate: frames arriving at a reader of the output Stream over the window, next to
 * `/stream/find`'s `fps`; drops: the `VIDEO_LOST` metric of `/stream/find` (`display:
 * ["metrics"]`: pictures the composer skipped plus ticks the encoder refused) over the window.
 * A value measured while a side ran below 90% of 30 fps is marked NOT VALID; the run exits 1
 * when the single native mixer ran below half of it (a broken pipeline, not a busy machine).
 * Run: deno task bench mixer  (or deno run -A bench/mixer.ts; BENCH_LOG=info shows the log;
 * MIXER_BENCH_PHASES=video runs phase 1 only)
 */
import { createLogger, type LogLevel, silentLogger } from "../core/log.ts";
import type { StreamRecord } from "../core/records.ts";
import { codecArgs } from "../media/engine/audio_conversion.ts";
import type { Track } from "../media/frame.ts";
import type { Stream } from "../media/stream.ts";
import { videoEncoderArgs } from "../media/transcoder/video_encoder_args.ts";
import { startTestServer, testConfig, type TestServer } from "../tests/helpers/test_server.ts";
import { peerProgressArgs, runPeers } from "./support/ffmpeg_peers.ts";
import { cpuShareBetween, sampleTree, threadSharesBetween } from "./support/process_tree.ts";
import { testClip } from "./support/test_clip.ts";
import { VideoArrivals } from "./support/video_arrivals.ts";

/** Frame rate of the inputs. */
const inputFps = 30;
/** Size of every input, in pixels. */
const inputWidth = 640;
const inputHeight = 360;
/** Inputs of a mixer. */
const inputsPerMixer = 4;
/** Length of the clip, in seconds: longer than every phase played on one server. */
const clipSeconds = 90;
/** Time the inputs play before the inputs-only window opens, in milliseconds. */
const settleMs = 2000;
/** Time every output flows before a window opens, in milliseconds. */
const warmupMs = 3000;
/** Measuring window, in milliseconds. */
const windowMs = 8000;
/** The inputs-only window, in milliseconds. */
const idleWindowMs = 5000;
/** Longest wait for a mixer's first output frame, in milliseconds. */
const flowTimeoutMs = 30_000;
/** Below this share of the output's frame rate, a side did not keep up. */
const flowingShare = 0.9;

/** The server's log: silent, or on stderr at the level of BENCH_LOG (to see why a phase failed). */
const benchLogLevel = Deno.env.get("BENCH_LOG") as LogLevel | undefined;
const serverLog = benchLogLevel
  ? createLogger({ level: benchLogLevel, write: (line) => console.error(line) })
  : silentLogger;

/** The mixer output the configuration gives (the same for every server of this run). */
const output = testConfig().mixer;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * What an ffmpeg child of the server does, from its arguments: video decoders write raw
 * video and audio decoders s16le PCM; encoders read them (the mixer's A/V encoder both, in
 * Matroska).
 */
function roleOf(pid: number): string {
  let args: string[];
  try {
    args = Deno.readTextFileSync(`/proc/${pid}/cmdline`).split("\0");
  } catch {
    return "other";
  }
  const lastInput = args.lastIndexOf("-i");
  const inputs = args.slice(0, lastInput);
  const outputs = args.slice(lastInput);
  if (outputs.includes("rawvideo")) return "video decoders";
  if (outputs.includes("s16le")) return "audio decoders";
  // The mixer's A/V encoder reads both in one Matroska stream (media/mixer/av_encoder.ts).
  if (inputs.includes("matroska")) return "A/V encoder";
  return inputs.includes("rawvideo")
    ? "video encoder"
    : inputs.includes("s16le")
    ? "audio encoder"
    : "other";
}

/** What one measured window of the server gives. */
interface Window {
  /** This process and its descendants, share of one core. */
  cpu: number;
  /** This process alone, share of one core. */
  processCpu: number;
  /** This process's threads by name, shares of one core. */
  threads: Map<string, number>;
  /** The ffmpeg children by role, shares of one core. */
  roles: Map<string, number>;
  /** Video frames per second arriving at each mixer's output reader, by mixer. */
  outFps: Map<string, number>;
  /** `/stream/find` of each mixer's output at the window's end, by mixer. */
  records: Map<string, StreamRecord>;
  /** `VIDEO_LOST` gained over the window, by mixer. */
  lost: Map<string, number>;
  /** Output audio frames per second, by mixer (50 for 20 ms Opus frames). */
  audioFps: Map<string, number>;
}

/** A server of one engine with `sources` VOD inputs `in0`... of the clip playing. */
class Bench {
  readonly #arrivals = new Map<string, VideoArrivals>();

  private constructor(readonly server: TestServer) {}

  static async start(engine: "native" | "wasm", clipPath: string, sources: number) {
    const config = testConfig({ media: { engine } });
    await Deno.mkdir(config.folders.media, { recursive: true });
    await Deno.copyFile(clipPath, `${config.folders.media}/input.mp4`);
    const bench = new Bench(await startTestServer(config, serverLog));
    try {
      for (let i = 0; i < sources; i++) {
        await bench.#ok("/vod/startup", { uri: "vod-live://input.mp4", localStreamName: `in${i}` });
      }
    } catch (err) {
      await bench.stop();
      throw err;
    }
    return bench;
  }

  /** Starts the mixer `name` (output stream of that name) of `inputs`; waits for its output. */
  async mix(name: string, inputs: string[], media: { hasVideo: boolean; hasAudio: boolean }) {
    await this.#ok("/mixer/startup", { uri: `mixer://${name}`, localStreamName: name, ...media });
    await this.addInputs(name, inputs);
    if (media.hasVideo) this.#arrivals.set(name, new VideoArrivals(this.#stream(name)));
    const mixer = this.server.services.mixers.get(`mixer://${name}`);
    const deadline = performance.now() + flowTimeoutMs;
    const flowing = () =>
      media.hasVideo ? this.#arrivals.get(name)!.pts.length > 0 : mixer.stats.audioFrames > 0;
    while (!flowing()) {
      if (performance.now() > deadline) {
        const records = await (await this.server.post("/mixer/find_all", {})).text();
        throw new Error(`no output from mixer ${name} in ${flowTimeoutMs} ms: ${records}`);
      }
      await sleep(50);
    }
  }

  /** Adds the VOD streams `inputs` to the mixer `name`. */
  async addInputs(name: string, inputs: string[]): Promise<void> {
    for (const input of inputs) {
      await this.#ok("/mixer/add", { uri: `mixer://${name}`, remoteStreamName: input });
    }
  }

  /** The audio track of the mixer `name`'s output. */
  audioTrack(name: string): Track | undefined {
    return this.#stream(name).tracks.find((t) => t.kind === "audio");
  }

  /** Measures a window of `ms` over the mixers `names`. */
  async measure(ms: number, names: string[] = []): Promise<Window> {
    const lostBefore = await this.#records(names);
    const audioBefore = names.map((n) => this.#audioFrames(n));
    const start = sampleTree(Deno.pid);
    await sleep(ms);
    const end = sampleTree(Deno.pid);
    const records = await this.#records(names);
    const seconds = (end.atMs - start.atMs) / 1000;
    const roles = new Map<string, number>();
    for (const pid of end.ticks.keys()) {
      if (pid === Deno.pid) continue;
      const role = roleOf(pid);
      roles.set(role, (roles.get(role) ?? 0) + cpuShareBetween(start, end, (p) => p === pid));
    }
    return {
      cpu: cpuShareBetween(start, end),
      processCpu: cpuShareBetween(start, end, (pid) => pid === Deno.pid),
      threads: new Map(threadSharesBetween(start, end)),
      roles,
      outFps: new Map(
        names.filter((n) => this.#arrivals.has(n)).map((n) => [
          n,
          this.#arrivals.get(n)!.countBetween(start.atMs, end.atMs) / seconds,
        ]),
      ),
      records,
      lost: new Map(names.map((n) => [n, lostOf(records.get(n)) - lostOf(lostBefore.get(n))])),
      audioFps: new Map(
        names.map((n, i) => [n, (this.#audioFrames(n) - audioBefore[i]) / seconds]),
      ),
    };
  }

  async stop(): Promise<void> {
    await Promise.all([...this.#arrivals.values()].map((r) => r.close()));
    await this.server.stop();
  }

  #audioFrames(name: string): number {
    return this.server.services.mixers.get(`mixer://${name}`).stats.audioFrames;
  }

  /** `/stream/find` with metrics of each stream of `names`. */
  async #records(names: string[]): Promise<Map<string, StreamRecord>> {
    const out = new Map<string, StreamRecord>();
    for (const name of names) {
      const res = await this.server.post("/stream/find", { name, display: ["metrics"] });
      const [record] = await res.json() as StreamRecord[];
      if (record) out.set(name, record);
    }
    return out;
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

const lostOf = (record: StreamRecord | undefined) => record?.metrics?.VIDEO_LOST ?? 0;
const inputNames = (from: number, count: number) =>
  Array.from({ length: count }, (_, i) => `in${from + i}`);

const inputIds = Array.from({ length: inputsPerMixer }, (_, i) => i);

/** A peer's inputs: the clip `inputsPerMixer` times in real time, decoded on one thread each. */
function peerInputArgs(clipPath: string): string[] {
  return [
    ...peerProgressArgs,
    // The native engine runs every decoding ffmpeg with one thread.
    ...inputIds.flatMap(() => ["-threads", "1", "-re", "-i", clipPath]),
  ];
}

/** The inputs' pictures scaled to a quarter of the output and stacked 2x2 as `[v]`. */
function stackGraph(): string {
  const [tileWidth, tileHeight] = [output.width / 2, output.height / 2];
  return [
    ...inputIds.map((i) => `[${i}:v]scale=${tileWidth}:${tileHeight}:flags=area[v${i}]`),
    `${inputIds.map((i) => `[v${i}]`).join("")}xstack=inputs=4:layout=0_0|w0_0|0_h0|w0_h0[v]`,
  ].join(";");
}

/** The peer: the inputs in a 2x2 `xstack` and an `amix`, encoded as our mixer encodes. */
function peerArgs(clipPath: string, audio: Track | undefined): string[] {
  const { width, height, fps, keyFrameIntervalSec, videoBitrateKbps, audioBitrateKbps } = output;
  const mix = `${inputIds.map((i) => `[${i}:a]`).join("")}amix=inputs=${inputIds.length}[a]`;
  const video = videoEncoderArgs({
    codec: "H264",
    width,
    height,
    fps,
    keyFrameInterval: fps * keyFrameIntervalSec,
    bitrateKbps: videoBitrateKbps,
  }, "native").outputArgs;
  return [
    ...peerInputArgs(clipPath),
    ...["-filter_complex", audio ? `${stackGraph()};${mix}` : stackGraph(), "-map", "[v]"],
    // codecArgs is for an audio-only output: its `-vn` would drop the picture here.
    ...(audio
      ? ["-map", "[a]", ...codecArgs(audio, audioBitrateKbps * 1000).filter((a) => a !== "-vn")]
      : []),
    ...video,
    ...["-y", "/dev/null"],
  ];
}

/** The peer's decoding alone: every input's pictures decoded and thrown away. */
function decodePeerArgs(clipPath: string): string[] {
  return [
    ...peerInputArgs(clipPath),
    ...inputIds.flatMap((i) => ["-map", `${i}:v`]),
    ...["-f", "null", "-"],
  ];
}

/** The peer's decoding and composing: the 2x2 stack made and thrown away, not encoded. */
function composePeerArgs(clipPath: string): string[] {
  return [
    ...peerInputArgs(clipPath),
    ...["-filter_complex", stackGraph(), "-map", "[v]", "-f", "null", "-"],
  ];
}

const pct = (share: number) => `${(share * 100).toFixed(1)}%`;
const sum = (list: Iterable<number>) => [...list].reduce((a, b) => a + b, 0);
const flowing = (list: Iterable<number>) => {
  const all = [...list];
  return all.length > 0 && all.every((f) => f >= flowingShare * output.fps);
};

/** Cores per second of output: `cpu` (share of one core) over the output seconds per second. */
const perOutputSecond = (cpu: number, outFps: Iterable<number>) => cpu * output.fps / sum(outFps);

/**
 * Where CPU went in `w` over `idle`: ffmpeg children by role, process threads by name, and
 * threads that ended within the window (the process counts them, the thread list no longer
 * holds them: the wasm engine starts a Worker per job).
 */
function breakdown(w: Window, idle: Window): string {
  const over = (shares: (x: Window) => Map<string, number>) =>
    [...shares(w)].map(([name, share]) => [name, share - (shares(idle).get(name) ?? 0)] as const)
      .filter(([, share]) => share >= 0.005)
      .sort((a, b) => b[1] - a[1])
      .map(([name, share]) => `${name} ${pct(share)}`).join(", ");
  const threads = (x: Window) => sum(x.threads.values());
  const ended = w.processCpu - threads(w) - (idle.processCpu - threads(idle));
  return `ffmpeg ${over((x) => x.roles) || "-"}; process threads ${over((x) => x.threads)}; ` +
    `threads ended in the window ${pct(Math.max(0, ended))}`;
}

/** Output rate and drops of each mixer of `w`. */
function outputText(w: Window): string {
  return [...w.records].map(([name, record]) => {
    const reader = w.outFps.get(name);
    const video = reader === undefined
      ? ""
      : `${reader.toFixed(1)} fps at a reader (/stream/find fps ${record.fps}), `;
    return `${name}: ${video}VIDEO_LOST +${w.lost.get(name)} in the window (${
      lostOf(record)
    } so far), audio ${w.audioFps.get(name)!.toFixed(1)} frames/s`;
  }).join("; ");
}

async function uptime(): Promise<string> {
  return (await Deno.readTextFile("/proc/loadavg")).split(" ").slice(0, 3).join(" ");
}

let nativeBroken = false;

/** Phase 1: one then two mixers of 4 inputs; the peer afterwards. */
async function benchVideo(clipPath: string): Promise<void> {
  console.log(
    `Native engine, ${inputsPerMixer} inputs ${inputWidth}x${inputHeight} ${inputFps} fps ` +
      `H.264+AAC → mixer ${output.width}x${output.height} ${output.fps} fps H.264 ` +
      `${output.videoBitrateKbps} kbit/s + Opus ${output.audioBitrateKbps} kbit/s ` +
      `(load before: ${await uptime()})`,
  );
  const bench = await Bench.start("native", clipPath, 2 * inputsPerMixer);
  let idle: Window, one: Window, two: Window;
  let audio: Track | undefined;
  try {
    await sleep(settleMs);
    idle = await bench.measure(idleWindowMs);
    await bench.mix("m1", inputNames(0, inputsPerMixer), { hasVideo: true, hasAudio: true });
    audio = bench.audioTrack("m1");
    await sleep(warmupMs);
    one = await bench.measure(windowMs, ["m1"]);
    await bench.mix("m2", inputNames(inputsPerMixer, inputsPerMixer), {
      hasVideo: true,
      hasAudio: true,
    });
    await sleep(warmupMs);
    two = await bench.measure(windowMs, ["m1", "m2"]);
  } finally {
    await bench.stop();
  }
  const timing = { flowTimeoutMs, warmupMs, windowMs };
  const peer = await runPeers([peerArgs(clipPath, audio)], timing);
  const peerDecode = await runPeers([decodePeerArgs(clipPath)], timing);
  const peerCompose = await runPeers([composePeerArgs(clipPath)], timing);
  const load = await uptime();

  const oursOne = Math.max(0, one.cpu - idle.cpu);
  const oursTwo = Math.max(0, two.cpu - idle.cpu);
  const perOne = perOutputSecond(oursOne, one.outFps.values());
  const perPeer = perOutputSecond(peer.cpu, peer.outFps);
  const validity = !flowing(one.outFps.values())
    ? "; NOT VALID: our mixer fell behind"
    : !flowing(peer.outFps)
    ? "; NOT VALID: the ffmpeg peer fell behind real time"
    : "";
  console.log(`inputs only (subtracted): ${pct(idle.cpu)}`);
  console.log(
    `1 mixer:  ${pct(oursOne)} of a core (process ${
      pct(one.processCpu - idle.processCpu)
    } + ffmpeg ${pct(one.cpu - one.processCpu - (idle.cpu - idle.processCpu))}), ${
      perOne.toFixed(3)
    } core-s per output second`,
  );
  console.log(`          ${outputText(one)}`);
  console.log(`          where: ${breakdown(one, idle)}`);
  console.log(
    `ffmpeg xstack+amix peer: ${pct(peer.cpu)} of a core, ${peer.outFps[0].toFixed(1)} fps out, ${
      perPeer.toFixed(3)
    } core-s per output second, RSS ${peer.rssMiB.toFixed(0)} MiB`,
  );
  console.log(
    `ratio 1 mixer ours/ffmpeg, per output frame: ${
      (perOne / perPeer).toFixed(2)
    } (goal <= 1.0${validity})`,
  );
  const share = (w: Window, map: (x: Window) => Map<string, number>, key: string) =>
    (map(w).get(key) ?? 0) - (map(idle).get(key) ?? 0);
  const oursCompose = perOutputSecond(share(one, (x) => x.threads, "worker"), one.outFps.values());
  const peerComposeCpu = perOutputSecond(peerCompose.cpu - peerDecode.cpu, peerCompose.outFps);
  console.log(
    `compose, per output second: ours (kernel Worker threads) ${pct(oursCompose)} vs ffmpeg ` +
      `scale+xstack (decode+xstack ${pct(peerCompose.cpu)} - decode only ${pct(peerDecode.cpu)}) ${
        pct(peerComposeCpu)
      }: ratio ${(oursCompose / peerComposeCpu).toFixed(2)}`,
  );
  console.log(
    `decode ${inputsPerMixer} inputs: ours (video decoder ffmpegs, raw video to a pipe) ${
      pct(share(one, (x) => x.roles, "video decoders"))
    } vs ffmpeg decode only ${pct(peerDecode.cpu)}`,
  );
  const perTwo = oursTwo / 2;
  console.log(
    `2 mixers: ${pct(oursTwo)} of a core, ${pct(perTwo)} per mixer, ${
      perOutputSecond(oursTwo, two.outFps.values()).toFixed(3)
    } core-s per output second; mixers per core ${(1 / perTwo).toFixed(2)} (from 1 mixer: ${
      (1 / oursOne).toFixed(2)
    })${flowing(two.outFps.values()) ? "" : " NOT VALID: an output fell behind 30 fps"}`,
  );
  console.log(`          ${outputText(two)}`);
  console.log(`          where: ${breakdown(two, idle)}`);
  console.log(`(cpu: share of one core, over the inputs-only window; load after: ${load})`);
  if ([...one.outFps.values()].some((f) => f < output.fps / 2)) {
    nativeBroken = true;
    console.log(`OUTPUT NOT FLOWING: the mixer ran below ${output.fps / 2} fps`);
  }
}

/** Phase 2: an audio-only mixer of 1 then 4 inputs. */
async function benchAudio(clipPath: string): Promise<void> {
  console.log(`\nAudio only (hasVideo: false), native engine (load before: ${await uptime()}):`);
  const bench = await Bench.start("native", clipPath, inputsPerMixer);
  let idle: Window, one: Window, four: Window;
  try {
    await sleep(settleMs);
    idle = await bench.measure(idleWindowMs);
    await bench.mix("a", ["in0"], { hasVideo: false, hasAudio: true });
    await sleep(warmupMs);
    one = await bench.measure(windowMs, ["a"]);
    await bench.addInputs("a", inputNames(1, inputsPerMixer - 1));
    await sleep(warmupMs);
    four = await bench.measure(windowMs, ["a"]);
  } finally {
    await bench.stop();
  }
  const added = inputsPerMixer - 1;
  const perInput = (four.cpu - one.cpu) / added;
  const videoDecoders = (w: Window) => w.roles.get("video decoders") ?? 0;
  const perInputAudio = perInput - (videoDecoders(four) - videoDecoders(one)) / added;
  console.log(`1 input:  ${pct(one.cpu - idle.cpu)}; ${outputText(one)}`);
  console.log(`          where: ${breakdown(one, idle)}`);
  console.log(`4 inputs: ${pct(four.cpu - idle.cpu)}; ${outputText(four)}`);
  console.log(`          where: ${breakdown(four, idle)}`);
  console.log(
    `per added input: ${pct(perInput)} of a core; without the inputs' video decoders ` +
      `(the decoder hub decodes an input's video even for an audio-only mixer): ${
        pct(perInputAudio)
      } (load after: ${await uptime()})`,
  );
}

/** Phase 3: the wasm engine, with audio, else video only. */
async function benchWasm(clipPath: string): Promise<void> {
  console.log(`\nwasm engine (load before: ${await uptime()}):`);
  const bench = await Bench.start("wasm", clipPath, inputsPerMixer);
  try {
    await sleep(settleMs);
    const idle = await bench.measure(idleWindowMs);
    let media = { hasVideo: true, hasAudio: true };
    try {
      await bench.mix("w", inputNames(0, inputsPerMixer), media);
    } catch (err) {
      console.log(`video + audio: FAILED: ${(err as Error).message}`);
      media = { hasVideo: true, hasAudio: false };
      await bench.mix("w", inputNames(0, inputsPerMixer), media);
    }
    await sleep(warmupMs);
    const w = await bench.measure(windowMs, ["w"]);
    const cpu = w.cpu - idle.cpu;
    const outFps = w.outFps.get("w") ?? 0;
    console.log(
      `${media.hasAudio ? "video + audio" : "video only"}: ${pct(cpu)} of a core, ${
        perOutputSecond(cpu, [outFps]).toFixed(3)
      } core-s per output second, real-time factor ${(outFps / output.fps).toFixed(2)}${
        flowing([outFps]) ? "" : " (fell behind)"
      }`,
    );
    console.log(`          ${outputText(w)}`);
    console.log(`          where: ${breakdown(w, idle)} (load after: ${await uptime()})`);
  } finally {
    await bench.stop();
  }
}

const clipPath = await testClip(inputWidth, inputHeight, {
  fps: inputFps,
  keyFrameInterval: 2 * inputFps,
  seconds: clipSeconds,
});
/** Phases to run (MIXER_BENCH_PHASES, comma-separated; default all): to repeat one for an A/B. */
const phases = new Set((Deno.env.get("MIXER_BENCH_PHASES") ?? "video,audio,wasm").split(","));
if (phases.has("video")) await benchVideo(clipPath);
if (phases.has("audio")) await benchAudio(clipPath);
if (phases.has("wasm")) {
  try {
    await benchWasm(clipPath);
  } catch (err) {
    console.log(`wasm: FAILED: ${(err as Error).message}`);
  }
}
if (nativeBroken) Deno.exit(1);
