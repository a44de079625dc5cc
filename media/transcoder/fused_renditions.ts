/**
 * Fused renditions: every plain H.264 rendition of one source (no watermark, native engine)
 * made by one ffmpeg that decodes the source once, splits the picture, and resamples, scales
 * and encodes each rendition in the same process; the encoded renditions come back as the
 * video streams of one MPEG-TS pipe, split here by stream. No raw picture crosses a pipe or
 * the server (the decoder → raw frames → encoder path moved 10 MB/s of pictures per 360p30
 * rendition through two pipes and the server, and ran one more ffmpeg per rendition).
 *
 * Timestamps: the source's frames go in with their own pts and dts (fragmented MP4, IVF for
 * VP8), and ffmpeg runs with `-copyts`, so every encoded frame comes out on the source's
 * timeline less the input's origin (the `fps` filter resamples a profile's frame rate on
 * ticks of that timeline; a missing input frame repeats the last picture). A rendition of
 * frame rate 0 keeps the source's frames and their pts.
 *
 * The set of renditions changes (one added or removed) by a new ffmpeg, started at the
 * source's next keyframe beside the running one: each rendition moves to the new process
 * at that process's first frame (a keyframe) once the old process has given every frame
 * before it, so readers see no gap and no frame twice. The old process ends when no
 * rendition is left on it; two decode only for the few frames of the handover. A source gap
 * longer than `sourceGapMs` restarts the process at the next keyframe instead of filling
 * the gap with repeats.
 *
 * Bounds: compressed frames wait for ffmpeg's stdin up to `maxPendingFusedWrites`, beyond
 * which they are dropped (and frames referring to them, up to the next keyframe), counted
 * for every rendition of the process; frames of a new process waiting for the old one to
 * catch up are bounded by `maxHeldFrames`.
 */
import type { Logger } from "../../core/log.ts";
import type { CodecEngine, LiveJob } from "../engine/engine.ts";
import { timestampWrap } from "../formats/mpegts/pes.ts";
import { TsDemuxer } from "../formats/mpegts/demuxer.ts";
import { FragmentedInput } from "./fused_input.ts";
import type { MediaFrame, Track } from "../frame.ts";
import { pipelineVideoClockHz, type VideoEncoderSettings } from "./video_codec.ts";
import { videoCodecArgs } from "./video_encoder_args.ts";
import {
  type DecoderInput,
  decoderInput,
  decoderProbeArgs,
  isDisposable,
  keyframeSize,
} from "./video_decoder_input.ts";

/** Compressed frames that may wait for the fused ffmpeg's stdin (about 1 s at 30 fps). */
export const maxPendingFusedWrites = 30;
/**
 * Frames of a new process held per rendition while the old one has not reached them (about
 * 2 s at 30 fps); beyond, the rendition moves at once and the frames it missed are counted.
 */
const maxHeldFrames = 60;
/** Keyframe spacing of a rendition that keeps the source's frame rate, in seconds. */
const followedKeyFrameIntervalSec = 2;
/** x264's longest keyframe interval, in frames: keyframes are then forced by time. */
const maxGopFrames = 600;

/** One rendition made by the fused ffmpeg. */
export interface FusedOutput {
  /**
   * What to encode: H.264 at `width` x `height` (even, known), `fps` frames per second (0:
   * the source's frames as they come), a keyframe every `keyFrameInterval` frames (0: every
   * 2 s), `bitrateKbps` (0: the encoder's default for the size).
   */
  readonly settings: VideoEncoderSettings;
  /**
   * Each encoded frame in presentation order (= decode order: no B-frames), pts = dts on
   * the source's timeline in 90 kHz, data as length-prefixed NAL units with SPS and PPS in
   * front of every keyframe; trackId 0 (the receiver sets its own).
   */
  onFrame(frame: MediaFrame): void;
  /** Called for each source gap longer than the gap limit. */
  onSourceGap?(gapMs: number): void;
  /** Called with the count of output frames lost (source frames not written, a handover). */
  onDropped?(frames: number): void;
}

/** A rendition of the group and where its frames come from. */
interface OutputState {
  output: FusedOutput;
  /** The process whose frames it gets; undefined until one gives it a keyframe. */
  owner: FusedRun | undefined;
  /** pts of the last frame it was given. */
  lastPts: number;
  /** Frames of a newer process than its owner, from a keyframe, waiting for the handover. */
  held: MediaFrame[];
  heldRun: FusedRun | undefined;
}

/** One fused ffmpeg and the renditions it encodes, by output stream index. */
interface FusedRun {
  /** Order of start: a larger one is newer. */
  serial: number;
  job: LiveJob;
  input: TimedInput;
  outputs: OutputState[];
  /** True until a keyframe was written (at start, or after a lost reference). */
  awaitingKeyframe: boolean;
  /** pts of the last source frame written, in 90 kHz (to place the output's pts). */
  lastInputPts90k: number;
  alive: boolean;
  reading: Promise<void>;
}

/** What a group of fused renditions is built from. */
export interface FusedRenditionsOptions {
  engine: CodecEngine;
  /** The source's video track; its frames go to `push` in decode order. */
  track: Track;
  log: Logger;
  /** Asks the source for a keyframe (a process is to start). */
  requestKeyframe: () => void;
  /** Longest source gap repeated over, in ms; a longer one restarts the process. */
  sourceGapMs: number;
}

/** The fused renditions of one source. */
export class FusedRenditions {
  #options: FusedRenditionsOptions;
  #outputs = new Map<FusedOutput, OutputState>();
  /** Running processes, oldest first; the last is the current one. */
  #runs: FusedRun[] = [];
  #serial = 0;
  /** True when the current process does not encode the renditions now asked for. */
  #restart = false;
  #stopping = new Set<Promise<void>>();
  #lastInputPts90k: number | undefined;
  #closed = false;

  constructor(options: FusedRenditionsOptions) {
    this.#options = options;
  }

  /** Renditions in the group. */
  get size(): number {
    return this.#outputs.size;
  }

  /** Processes running (one, two during a handover). */
  get processes(): number {
    return this.#runs.length;
  }

  /** Adds a rendition; it starts with the process started at the source's next keyframe. */
  add(output: FusedOutput): void {
    if (this.#closed || this.#outputs.has(output)) return;
    this.#outputs.set(output, {
      output,
      owner: undefined,
      lastPts: -Infinity,
      held: [],
      heldRun: undefined,
    });
    this.#askRestart();
  }

  /** Removes a rendition: nothing more reaches it; the last one stops every process. */
  remove(output: FusedOutput): void {
    if (!this.#outputs.delete(output)) return;
    if (this.#outputs.size === 0) {
      for (const run of this.#runs) this.#stop(run);
      this.#runs = [];
      this.#restart = false;
      return;
    }
    // The process keeps encoding it until the next keyframe's process takes over.
    this.#askRestart();
    this.#retireIdle();
  }

  /** A compressed frame of the source, in decode order. */
  push(frame: MediaFrame): void {
    if (this.#closed || this.#outputs.size === 0) return;
    const pts90k = to90k(frame.pts, this.#options.track.clockRate);
    const last = this.#lastInputPts90k;
    this.#lastInputPts90k = pts90k;
    const gapMs = last === undefined ? 0 : (pts90k - last) * 1000 / pipelineVideoClockHz;
    if (gapMs > this.#options.sourceGapMs) this.#onGap(gapMs);
    if (frame.keyframe && (this.#restart || !this.#current?.alive)) this.#startAt(frame);
    const current = this.#current;
    for (const run of this.#runs) {
      if (this.#write(run, frame, pts90k) || run !== current) continue;
      for (const output of this.#outputs.keys()) output.onDropped?.(1);
    }
  }

  /** Stops every process and waits for their exit. */
  async close(): Promise<void> {
    this.#closed = true;
    for (const run of this.#runs) this.#stop(run);
    this.#runs = [];
    this.#outputs.clear();
    await Promise.all(this.#stopping);
  }

  get #current(): FusedRun | undefined {
    return this.#runs[this.#runs.length - 1];
  }

  #askRestart(): void {
    if (this.#restart) return;
    this.#restart = true;
    this.#options.requestKeyframe();
  }

  /**
   * A source gap: the running processes stop (their `fps` filters would fill the gap with
   * repeats in one burst) and a new one starts at the next keyframe.
   */
  #onGap(gapMs: number): void {
    const rounded = Math.round(gapMs);
    this.#options.log.warn("source gap skipped", { gapMs: rounded });
    for (const run of this.#runs) this.#stop(run);
    this.#runs = [];
    for (const state of this.#outputs.values()) {
      state.owner = undefined;
      state.held = [];
      state.heldRun = undefined;
      state.output.onSourceGap?.(rounded);
    }
    this.#askRestart();
  }

  /** Starts a process for the renditions now asked for, at `keyframe`. */
  #startAt(keyframe: MediaFrame): void {
    const { engine, track, log } = this.#options;
    const outputs = [...this.#outputs.values()];
    const size = keyframeSize(track, keyframe) ?? { width: 2, height: 2 };
    const input = timedInput(track, size, keyframe);
    let job: LiveJob;
    try {
      job = engine.start!({
        inputArgs: ["-copyts", ...decoderProbeArgs, ...input.args],
        outputArgs: fusedOutputArgs(outputs.map((s) => s.output.settings)),
        maxPendingWrites: maxPendingFusedWrites,
      });
    } catch (err) {
      // Tried again at the next keyframe.
      log.warn("fused encoder cannot start", { err });
      return;
    }
    this.#restart = false;
    const run: FusedRun = {
      serial: ++this.#serial,
      job,
      input,
      outputs,
      awaitingKeyframe: true,
      lastInputPts90k: to90k(keyframe.pts, track.clockRate),
      alive: true,
      reading: Promise.resolve(),
    };
    run.reading = this.#read(run);
    this.#runs.push(run);
    log.debug("fused encoder started", {
      renditions: outputs.map((s) => `${s.output.settings.width}x${s.output.settings.height}`),
      running: this.#runs.length,
    });
    this.#retireIdle();
  }

  /** Writes a source frame to a process; false when it was lost for it. */
  #write(run: FusedRun, frame: MediaFrame, pts90k: number): boolean {
    if (!run.alive) return false;
    if (run.awaitingKeyframe && !frame.keyframe) return false;
    let bytes: Uint8Array;
    try {
      bytes = run.input.encode(frame);
    } catch (err) {
      // A damaged access unit: lost like a refused write.
      this.#options.log.debug("video frame not decodable", { err });
      bytes = new Uint8Array(0);
    }
    if (bytes.length === 0 || !run.job.write(bytes)) {
      // Frames referring to a lost one would decode to garbage: wait for the next keyframe.
      if (!isDisposable(this.#options.track.codec, frame.data)) run.awaitingKeyframe = true;
      return false;
    }
    run.awaitingKeyframe = false;
    run.lastInputPts90k = pts90k;
    return true;
  }

  async #read(run: FusedRun): Promise<void> {
    const demuxer = new TsDemuxer();
    try {
      for await (const chunk of run.job.output) {
        for (const frame of demuxer.push(chunk)) {
          const state = run.outputs[frame.trackId];
          if (state && frame.codec === "H264") this.#deliver(run, state, frame);
        }
      }
    } catch (err) {
      if (run.alive) this.#options.log.warn("fused encoder output failed", { err });
    }
    if (!run.alive || this.#closed) return;
    // ffmpeg exited on its own: the renditions it had wait for the next process.
    this.#options.log.warn("fused encoder ended early", { errors: run.job.errors });
    this.#stop(run);
    this.#runs = this.#runs.filter((r) => r !== run);
    for (const state of run.outputs) {
      if (state.owner !== run) continue;
      if (state.heldRun) this.#moveOn(state);
      else state.owner = undefined;
    }
    if (this.#outputs.size > 0) this.#askRestart();
  }

  /** One encoded frame of a process for one rendition. */
  #deliver(run: FusedRun, state: OutputState, encoded: MediaFrame): void {
    if (!this.#outputs.has(state.output) || !run.alive) return;
    // Back on the source's timeline: the input muxer's offset taken off, and the 33-bit
    // wrap put back where the source's pts are.
    let pts = encoded.pts - run.input.offset90k;
    pts += Math.round((run.lastInputPts90k - pts) / timestampWrap) * timestampWrap;
    const frame: MediaFrame = { ...encoded, trackId: 0, pts, dts: pts };
    if (state.owner === undefined) {
      if (!frame.keyframe) return;
      state.owner = run;
    }
    if (state.owner === run) {
      if (state.heldRun && state.held.length > 0 && frame.pts >= state.held[0].pts) {
        // The old process reached the new one's first frame: the new one takes over.
        this.#moveOn(state);
        return;
      }
      this.#emit(state, frame);
      return;
    }
    if (run.serial < state.owner.serial) return;
    // A newer process: its frames wait from its first keyframe until the owner has caught up.
    if (state.heldRun !== run) {
      if (!frame.keyframe) return;
      state.held = [];
      state.heldRun = run;
    }
    state.held.push(frame);
    // The owner is past the new process's first frame already: it takes over at once. Or
    // the owner fell behind too far: it takes over, and the frames between are lost.
    if (frame.pts <= state.lastPts) this.#moveOn(state);
    else if (state.held.length > maxHeldFrames) this.#moveOn(state, true);
  }

  /**
   * Moves a rendition to the process of its held frames, and gives those frames; `forced`
   * when its owner had not reached them (the output frames between are counted as lost).
   */
  #moveOn(state: OutputState, forced = false): void {
    const run = state.heldRun!;
    const held = state.held;
    state.owner = run;
    state.held = [];
    state.heldRun = undefined;
    const fps = state.output.settings.fps;
    if (forced && held[0].pts > state.lastPts && state.lastPts > -Infinity) {
      const missing = fps > 0 ? (held[0].pts - state.lastPts) * fps / pipelineVideoClockHz - 1 : 1;
      state.output.onDropped?.(Math.max(1, Math.round(missing)));
    }
    for (const frame of held) this.#emit(state, frame);
    this.#retireIdle();
  }

  #emit(state: OutputState, frame: MediaFrame): void {
    if (frame.pts <= state.lastPts) return;
    state.lastPts = frame.pts;
    state.output.onFrame(frame);
  }

  /** Stops the processes other than the current one that no rendition takes frames from. */
  #retireIdle(): void {
    const current = this.#current;
    const idle = this.#runs.filter((run) =>
      run !== current &&
      ![...this.#outputs.values()].some((state) => state.owner === run)
    );
    if (idle.length === 0) return;
    this.#runs = this.#runs.filter((run) => !idle.includes(run));
    for (const run of idle) this.#stop(run);
  }

  #stop(run: FusedRun): void {
    run.alive = false;
    const stopping = run.job.close().catch(() => {}).then(() => run.reading);
    this.#stopping.add(stopping);
    stopping.finally(() => this.#stopping.delete(stopping));
  }
}

/**
 * The source's frames as ffmpeg reads them, with their pts and dts: a fragmented MP4 for
 * H.264 and H.265 (see fused_input.ts), IVF for VP8, as the decoder has it.
 */
function timedInput(
  track: Track,
  size: { width: number; height: number },
  keyframe: MediaFrame,
): TimedInput {
  // IVF timestamps are the frames' own (no offset).
  if (track.codec === "VP8") return { ...decoderInput(track, size), offset90k: 0 };
  return new FragmentedInput(track, size, keyframe.dts);
}

/** A fused process's input, and what its container adds to every pts (90 kHz). */
interface TimedInput extends DecoderInput {
  readonly offset90k: number;
}

function to90k(pts: number, clockRate: number): number {
  return clockRate === pipelineVideoClockHz
    ? pts
    : Math.round(pts * pipelineVideoClockHz / clockRate);
}

/**
 * ffmpeg's output options for the fused renditions: the decoded picture split in as many
 * branches, each resampled to its frame rate (`fps` filter, none when it follows the
 * source), scaled with area averaging into its size (aspect kept, letterboxed in black as
 * the kernels fit), then encoded as the single encoder would (`videoCodecArgs`, options
 * given per output stream); one MPEG-TS out, every frame written at once.
 */
export function fusedOutputArgs(renditions: readonly VideoEncoderSettings[]): string[] {
  const n = renditions.length;
  const branches = n === 1 ? ["[0:v]"] : renditions.map((_, i) => `[s${i}]`);
  const graph = [
    ...(n === 1 ? [] : [`[0:v]split=${n}${branches.join("")}`]),
    ...renditions.map(({ width, height, fps }, i) => {
      const filters = [
        ...(fps > 0 ? [`fps=${fps}`] : []),
        `scale=w=${width}:h=${height}:force_original_aspect_ratio=decrease` +
        `:force_divisible_by=2:flags=area`,
        `pad=w=${width}:h=${height}:x=(ow-iw)/2:y=(oh-ih)/2:color=black`,
        "format=yuv420p",
      ];
      return `${branches[i]}${filters.join(",")}[o${i}]`;
    }),
  ].join(";");
  const streams = renditions.flatMap((settings, i) => {
    const follows = settings.fps <= 0;
    const gop = settings.keyFrameInterval > 0
      ? settings.keyFrameInterval
      : follows
      ? maxGopFrames
      : Math.round(settings.fps * followedKeyFrameIntervalSec);
    const codec = videoCodecArgs({ ...settings, keyFrameInterval: gop }, "native");
    // Every option for this output stream only (`-g` → `-g:v:1`).
    const own = codec.map((arg, j) => j % 2 === 0 ? `${arg.split(":")[0]}:v:${i}` : arg);
    const forced = follows && settings.keyFrameInterval <= 0
      ? [`-force_key_frames:v:${i}`, `expr:gte(t,n_forced*${followedKeyFrameIntervalSec})`]
      : [];
    // The source's own pts, to the tick: the default time base is 1 / the frame rate
    // guessed from the first packets, which moves jittered pts (RTMP's milliseconds) onto
    // its grid, and two processes guessing apart would not continue each other's frames.
    const timeBase = follows ? [`-enc_time_base:v:${i}`, `1:${pipelineVideoClockHz}`] : [];
    return ["-map", `[o${i}]`, ...own, ...forced, ...timeBase];
  });
  return [
    "-filter_complex",
    graph,
    ...streams,
    // Each filtered picture gives one frame, on its own pts (no further rate conversion).
    ...["-an", "-fps_mode", "passthrough", "-flush_packets", "1"],
    // A PES that declares its length is demuxed as soon as it is in, not at the next one.
    ...["-muxdelay", "0", "-muxpreload", "0", "-omit_video_pes_length", "0", "-f", "mpegts"],
  ];
}
