/**
 * One audio track converted continuously: frames in as they come, converted frames out with
 * little delay, on the input's timeline. The native engine runs one ffmpeg for the whole life
 * of the conversion (MPEG-TS, or raw G.711 or MP3, on stdin, MPEG-TS on stdout, every
 * buffering stage turned off). An engine that cannot stream (wasm) converts chunks of
 * `chunkedConversionMs` instead, which adds about a chunk's length plus one run of latency.
 *
 * ffmpeg restamps what it writes, so the output's pts are mapped back onto the input's clock:
 * the first output frame of a run is aligned with the first input frame of that run, and the
 * rest keep their distance from it (gaps included).
 */
import type { Logger } from "../../core/log.ts";
import { TsDemuxer } from "../formats/mpegts/demuxer.ts";
import { TsMuxer } from "../formats/mpegts/muxer.ts";
import type { MediaFrame, Track } from "../frame.ts";
import type { CodecEngine, LiveJob } from "./engine.ts";

/** Audio gathered per run when the engine cannot stream, in milliseconds. */
export const chunkedConversionMs = 1000;
/** Longest one chunked run may take, in milliseconds. */
const chunkRunTimeoutMs = 10_000;
/** Input frames remembered to measure the delay of the output, about 10 s of audio. */
const latencyWindowFrames = 512;

/**
 * ffmpeg options that keep a live conversion from buffering: no input probing beyond the
 * first packets (a probe size of 2 KB alone held ~250 ms of audio; 32 bytes: ~40 ms), and
 * every output packet written and flushed at once.
 */
export const lowDelayInputArgs = [
  "-fflags",
  "nobuffer",
  "-probesize",
  "32",
  "-analyzeduration",
  "0",
];
export const lowDelayOutputArgs = [
  ...["-flush_packets", "1", "-muxdelay", "0", "-muxpreload", "0"],
  // One PES per audio frame: by default the muxer gathers ~3 KB of audio per PES.
  ...["-pes_payload_size", "0", "-f", "mpegts"],
];
/** G.711 leaves ffmpeg raw (MPEG-TS has no mapping for it) and is cut into frames of this, in ms. */
export const g711FrameMs = 20;

/** Turns ffmpeg's output bytes into frames (pts in ffmpeg's own clock). */
interface OutputParser {
  push(chunk: Uint8Array): MediaFrame[];
  flush(): MediaFrame[];
}

/** Cuts raw G.711 or G.722 (one byte a clock unit) into frames of `g711FrameMs`. */
class G711Framer implements OutputParser {
  #pending = new Uint8Array(0);
  #samples = 0;
  constructor(private readonly track: Track) {}

  push(chunk: Uint8Array): MediaFrame[] {
    const bytes = this.track.clockRate * (this.track.channels ?? 1) * g711FrameMs / 1000;
    const data = new Uint8Array(this.#pending.length + chunk.length);
    data.set(this.#pending);
    data.set(chunk, this.#pending.length);
    const frames: MediaFrame[] = [];
    let at = 0;
    for (; at + bytes <= data.length; at += bytes) {
      frames.push(this.#frame(data.slice(at, at + bytes)));
    }
    this.#pending = data.slice(at);
    return frames;
  }

  flush(): MediaFrame[] {
    if (this.#pending.length === 0) return [];
    const last = this.#frame(this.#pending);
    this.#pending = new Uint8Array(0);
    return [last];
  }

  #frame(data: Uint8Array): MediaFrame {
    const pts = this.#samples;
    this.#samples += data.length / (this.track.channels ?? 1);
    const codec = this.track.codec;
    return { trackId: this.track.id, codec, pts, dts: pts, keyframe: true, data };
  }
}

/** True for the codecs ffmpeg writes raw rather than in MPEG-TS (G.711, G.722). */
function isRawAudio(track: Track): boolean {
  return track.codec === "PCMU" || track.codec === "PCMA" || track.codec === "G722";
}

/** ffmpeg's raw format of G.711 or G.722. */
function rawFormat(codec: string): string {
  return codec === "PCMU" ? "mulaw" : codec === "PCMA" ? "alaw" : "g722";
}

/** What a live transcode is built from. */
export interface LiveTranscodeOptions {
  engine: CodecEngine;
  /** The track converted (its frames are passed to `push`). */
  input: Track;
  /** The converted track: codec, clock, channels; output frames carry its id. */
  output: Track;
  /** ffmpeg's codec options for the output (`-c:a ...`), without the format. */
  codecArgs: string[];
  /** Receives each converted frame, pts in `output.clockRate` on the input's timeline. */
  onFrame: (frame: MediaFrame) => void;
  log: Logger;
}

/** Delay a conversion adds, measured on its own frames. */
export interface ConversionLatency {
  /** Wall time from the first input frame to the first output frame, in ms (-1 before). */
  firstOutputMs: number;
  /** Mean wall time from an input frame to the output frame covering its time, in ms. */
  meanDelayMs: number;
  /** Largest such delay, in ms. */
  maxDelayMs: number;
  /** Output frames measured. */
  frames: number;
}

/** How the frames of one track are encoded for ffmpeg's input. */
export interface InputEncoder {
  encode(frame: MediaFrame): Uint8Array;
}

/** ffmpeg's input format options for frames of `input`: raw G.711 or G.722, MP3 or MPEG-TS. */
export function liveInputArgs(input: Track): string[] {
  // Raw G.722 is 16 kHz mono by definition.
  if (input.codec === "G722") return ["-f", rawFormat(input.codec)];
  if (input.codec === "PCMU" || input.codec === "PCMA") {
    return [
      ...["-f", input.codec === "PCMU" ? "mulaw" : "alaw"],
      ...["-ar", String(input.clockRate), "-ac", String(input.channels ?? 1)],
    ];
  }
  // MP3 frames carry their own headers: the elementary stream needs no container.
  return input.codec === "MP3" ? ["-f", "mp3"] : ["-f", "mpegts"];
}

/** A new encoder of `input`'s frames into what `liveInputArgs` tells ffmpeg to expect. */
export function liveInputEncoder(input: Track): InputEncoder {
  if (isRawAudio(input) || input.codec === "MP3") {
    return { encode: (f) => f.data };
  }
  const track = { ...input, id: 0 };
  const muxer = new TsMuxer({ tracks: [track] });
  return { encode: (f) => muxer.mux({ ...f, trackId: 0 }) };
}

/** A continuous conversion of one audio track. */
export class LiveTranscode {
  readonly latency: ConversionLatency = {
    firstOutputMs: -1,
    meanDelayMs: 0,
    maxDelayMs: 0,
    frames: 0,
  };
  #options: LiveTranscodeOptions;
  #inputArgs: string[];
  #job: LiveJob | undefined;
  #encoder: InputEncoder | undefined;
  #reading: Promise<void> = Promise.resolve();
  #chunk: MediaFrame[] = [];
  #chunks: Promise<void> = Promise.resolve();
  #closed = false;
  #outputEnded = false;
  /** Input pts (output clock) and arrival of recent input frames, for the delay. */
  #inputPts: number[] = [];
  #inputWallMs: number[] = [];
  #firstInputMs = -1;
  /** pts of the first input frame, in the output clock. */
  #firstInputPts = 0;
  #delaySumMs = 0;
  /** Dropped input frames (ffmpeg behind or gone). */
  dropped = 0;

  constructor(options: LiveTranscodeOptions) {
    this.#options = options;
    this.#inputArgs = liveInputArgs(options.input);
    if (options.engine.start) {
      this.#job = options.engine.start({
        inputArgs: [...lowDelayInputArgs, ...this.#inputArgs],
        outputArgs: [
          ...options.codecArgs,
          ...(isRawAudio(options.output)
            ? ["-flush_packets", "1", ...this.#outputFormat]
            : lowDelayOutputArgs),
        ],
      });
      this.#encoder = liveInputEncoder(options.input);
      this.#reading = this.#read(this.#job);
    }
  }

  /** False once the conversion is closed or its ffmpeg has ended on its own. */
  get running(): boolean {
    return !this.#closed && !this.#outputEnded;
  }

  /** True when the engine streams (else chunks of `chunkedConversionMs` are converted). */
  get streaming(): boolean {
    return this.#job !== undefined;
  }

  /** Converts one input frame; its output follows through `onFrame`. */
  push(frame: MediaFrame): void {
    if (this.#closed) return;
    const { input, output } = this.#options;
    const nowMs = performance.now();
    const pts = Math.round(frame.pts * output.clockRate / input.clockRate);
    if (this.#firstInputMs < 0) {
      this.#firstInputMs = nowMs;
      this.#firstInputPts = pts;
    }
    if (this.#inputPts.length >= latencyWindowFrames) {
      this.#inputPts.shift();
      this.#inputWallMs.shift();
    }
    this.#inputPts.push(pts);
    this.#inputWallMs.push(nowMs);
    if (this.#job) {
      if (!this.#job.write(this.#encoder!.encode(frame))) this.dropped++;
      return;
    }
    this.#chunk.push(frame);
    const spanMs = (frame.pts - this.#chunk[0].pts) * 1000 / input.clockRate;
    if (spanMs < chunkedConversionMs) return;
    const chunk = this.#chunk;
    this.#chunk = [];
    this.#chunks = this.#chunks.then(() => this.#convertChunk(chunk));
  }

  /** Stops the conversion: ffmpeg is stopped and nothing more is emitted. */
  async close(): Promise<void> {
    this.#closed = true;
    await this.#job?.close();
    await this.#reading;
    await this.#chunks;
  }

  /** ffmpeg's output format: MPEG-TS, or raw G.711. */
  get #outputFormat(): string[] {
    const { output } = this.#options;
    if (!isRawAudio(output)) return ["-f", "mpegts"];
    return ["-f", rawFormat(output.codec)];
  }

  #newParser(): OutputParser {
    if (isRawAudio(this.#options.output)) return new G711Framer(this.#options.output);
    const demuxer = new TsDemuxer();
    return { push: (chunk) => demuxer.push(chunk), flush: () => demuxer.flush() };
  }

  async #read(job: LiveJob): Promise<void> {
    const parser = this.#newParser();
    const run = this.#newRun();
    try {
      for await (const chunk of job.output) {
        if (this.#closed) break;
        for (const frame of parser.push(chunk)) run(frame);
      }
    } catch (err) {
      if (!this.#closed) this.#options.log.warn("live conversion output failed", { err });
    }
    this.#outputEnded = true;
    if (!this.#closed) {
      this.#options.log.warn("live conversion ended early", { errors: job.errors });
    }
  }

  async #convertChunk(frames: MediaFrame[]): Promise<void> {
    if (this.#closed) return;
    const encoder = liveInputEncoder(this.#options.input);
    const parts = frames.map((f) => encoder.encode(f));
    const input = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
    let offset = 0;
    for (const part of parts) {
      input.set(part, offset);
      offset += part.length;
    }
    try {
      const out = await this.#options.engine.run({
        inputArgs: this.#inputArgs,
        input,
        outputArgs: [...this.#options.codecArgs, ...this.#outputFormat],
        timeoutMs: chunkRunTimeoutMs,
        live: true,
      });
      const parser = this.#newParser();
      const run = this.#newRun(frames[0].pts);
      for (const frame of [...parser.push(out), ...parser.flush()]) run(frame);
    } catch (err) {
      if (!this.#closed) this.#options.log.warn("audio chunk conversion failed", { err });
    }
  }

  /**
   * The handler of one run's output: maps ffmpeg's pts onto the input's timeline, anchored at
   * the run's first input frame (`firstInputPts`, input clock; the first frame pushed when
   * absent), and emits.
   */
  #newRun(firstInputPts?: number): (frame: MediaFrame) => void {
    const { input, output, onFrame } = this.#options;
    let offset: number | undefined;
    return (frame) => {
      if (frame.codec !== output.codec || this.#closed) return;
      if (offset === undefined) {
        const anchor = firstInputPts === undefined
          ? this.#firstInputPts
          : Math.round(firstInputPts * output.clockRate / input.clockRate);
        offset = anchor - frame.pts;
      }
      const pts = frame.pts + offset;
      this.#measure(pts);
      onFrame({ ...frame, trackId: output.id, pts, dts: pts });
    };
  }

  #measure(pts: number): void {
    const nowMs = performance.now();
    const latency = this.latency;
    if (latency.firstOutputMs < 0) latency.firstOutputMs = nowMs - this.#firstInputMs;
    // The latest input frame that starts at or before this output frame's time.
    let wallMs = -1;
    while (this.#inputPts.length > 0 && this.#inputPts[0] <= pts) {
      wallMs = this.#inputWallMs[0];
      this.#inputPts.shift();
      this.#inputWallMs.shift();
    }
    if (wallMs < 0) return;
    const delayMs = nowMs - wallMs;
    latency.frames++;
    this.#delaySumMs += delayMs;
    latency.meanDelayMs = Math.round(this.#delaySumMs / latency.frames);
    latency.maxDelayMs = Math.max(latency.maxDelayMs, Math.round(delayMs));
  }
}
