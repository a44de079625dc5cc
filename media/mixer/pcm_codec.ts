/**
 * The mixer's audio edges: compressed audio of an input decoded to PCM, and the mixed PCM
 * encoded again. Each runs one ffmpeg for its whole life (an engine that streams); PCM is
 * interleaved signed 16-bit at the mixer's rate and channels.
 */
import type { Logger } from "../../core/log.ts";
import { codecArgs } from "../engine/audio_conversion.ts";
import type { CodecEngine, LiveJob } from "../engine/engine.ts";
import {
  type InputEncoder,
  liveInputArgs,
  liveInputEncoder,
  lowDelayInputArgs,
  lowDelayOutputArgs,
} from "../engine/live_transcode.ts";
import { TsDemuxer } from "../formats/mpegts/demuxer.ts";
import type { MediaFrame, Track } from "../frame.ts";
import { ConflictError } from "../../core/errors.ts";

/**
 * Bytes a PCM decoder reads at most at a time: four 20 ms frames of 48 kHz stereo, more than
 * ffmpeg writes at once (one AAC frame, 4 KiB).
 */
const pcmReadBytes = 16 * 1024;

/** The PCM format on both edges. */
export interface PcmFormat {
  /** Samples per second per channel, in Hz. */
  sampleRate: number;
  /** Interleaved channels, 1 or 2. */
  channels: number;
}

/** ffmpeg's options for raw interleaved s16le PCM of `format`. */
function rawPcmArgs(format: PcmFormat): string[] {
  return ["-f", "s16le", "-ar", String(format.sampleRate), "-ac", String(format.channels)];
}

/** A live job of `engine`, or a typed error when the engine cannot stream. */
function startJob(engine: CodecEngine, inputArgs: string[], outputArgs: string[]): LiveJob {
  if (!engine.start) {
    throw new ConflictError(`the ${engine.kind} engine cannot run live audio for the mixer`);
  }
  return engine.start({ inputArgs, outputArgs });
}

/** What a PcmDecoder is built from. */
export interface PcmDecoderOptions {
  engine: CodecEngine;
  /** The compressed track whose frames are pushed. */
  track: Track;
  format: PcmFormat;
  /**
   * Receives PCM as ffmpeg writes it, whole sample frames, in order. The samples are valid
   * during the call only: their buffer is read into again (copy what is kept).
   */
  onPcm: (samples: Int16Array) => void;
  log: Logger;
}

/** Compressed audio (AAC, Opus, MP3, G.711) in, PCM out. */
export class PcmDecoder {
  #job: LiveJob;
  #encoder: InputEncoder;
  #reading: Promise<void>;
  #closed = false;
  /** Input frames refused because ffmpeg was behind or gone. */
  dropped = 0;

  /** Starts ffmpeg; throws when the engine cannot stream. */
  constructor(options: PcmDecoderOptions) {
    const { engine, track, format } = options;
    this.#job = startJob(
      engine,
      [...lowDelayInputArgs, ...liveInputArgs(track)],
      // Gaps in the input's timestamps are filled with silence, so the count of samples
      // out tells the time of the newest one.
      ["-vn", "-af", "aresample=async=1:first_pts=0", "-flush_packets", "1", ...rawPcmArgs(format)],
    );
    this.#encoder = liveInputEncoder(track);
    this.#reading = this.#read(options);
  }

  /** Decodes one compressed frame. */
  push(frame: MediaFrame): void {
    if (this.#closed) return;
    if (!this.#job.write(this.#encoder.encode(frame))) this.dropped++;
  }

  /** Stops ffmpeg; nothing is emitted afterwards. */
  async close(): Promise<void> {
    this.#closed = true;
    await this.#job.close();
    await this.#reading;
  }

  async #read(options: PcmDecoderOptions): Promise<void> {
    const output = this.#job.output;
    const reader = output instanceof ReadableStream ? byobReader(output) : undefined;
    try {
      await (reader ? this.#readInto(reader, options) : this.#readChunks(options));
    } catch (err) {
      if (!this.#closed) options.log.warn("audio decoding failed", { err });
    }
    if (!this.#closed) {
      options.log.warn("audio decoder ended early", { errors: this.#job.errors });
    }
  }

  /**
   * Reads a byte stream (the native engine's pipe) into one buffer over and over: iterating
   * it would allocate 64 KiB per read (ffmpeg writes about 4 KiB, 50 times a second, per
   * input) and the PCM was copied out of that again.
   */
  async #readInto(reader: ReadableStreamBYOBReader, options: PcmDecoderOptions): Promise<void> {
    const frameBytes = 2 * options.format.channels;
    let buffer = new ArrayBuffer(pcmReadBytes);
    // Bytes of a sample frame cut by the previous read, at the buffer's start.
    let filled = 0;
    try {
      for (;;) {
        const { value, done } = await reader.read(
          new Uint8Array(buffer, filled, buffer.byteLength - filled),
        );
        if (done || !value || this.#closed) return;
        // The read took the buffer over and handed it back as `value.buffer`.
        buffer = value.buffer as ArrayBuffer;
        filled += value.length;
        const whole = filled - filled % frameBytes;
        if (whole === 0) continue;
        options.onPcm(new Int16Array(buffer, 0, whole / 2));
        new Uint8Array(buffer).copyWithin(0, whole, filled);
        filled -= whole;
      }
    } finally {
      reader.releaseLock();
    }
  }

  /** Cuts output chunks of any size (the wasm engine's) into whole sample frames. */
  async #readChunks(options: PcmDecoderOptions): Promise<void> {
    const frameBytes = 2 * options.format.channels;
    let carry = new Uint8Array(0);
    for await (const chunk of this.#job.output) {
      if (this.#closed) break;
      const bytes = carry.length > 0 ? concat(carry, chunk) : chunk;
      const whole = bytes.length - bytes.length % frameBytes;
      carry = bytes.slice(whole);
      if (whole === 0) continue;
      // A copy: the chunk's buffer may be reused and Int16Array needs an even offset.
      options.onPcm(new Int16Array(bytes.slice(0, whole).buffer));
    }
  }
}

/** A BYOB reader of `stream`, or undefined when it is not a byte stream. */
function byobReader(stream: ReadableStream<Uint8Array>): ReadableStreamBYOBReader | undefined {
  try {
    return stream.getReader({ mode: "byob" });
  } catch {
    return undefined;
  }
}

function concat(a: Uint8Array, b: Uint8Array): Uint8Array {
  const out = new Uint8Array(a.length + b.length);
  out.set(a);
  out.set(b, a.length);
  return out;
}

/** What a PcmEncoder is built from. */
export interface PcmEncoderOptions {
  engine: CodecEngine;
  format: PcmFormat;
  /** The encoded track (OPUS or AAC at the format's rate); frames carry its id. */
  track: Track;
  /** Bitrate in bit/s (0: the codec's default). */
  bitrate: number;
  /** Receives each encoded frame, pts in samples on the timeline of `push`. */
  onFrame: (frame: MediaFrame) => void;
  log: Logger;
}

/** PCM in, Opus or AAC frames out, on the PCM's timeline. */
export class PcmEncoder {
  #job: LiveJob;
  #reading: Promise<void>;
  #closed = false;
  /** Sample index of the first PCM pushed: the encoded timeline starts there. */
  #firstPts: number | undefined;
  /** PCM chunks refused because ffmpeg was behind or gone. */
  dropped = 0;

  /** Starts ffmpeg; throws when the engine cannot stream. */
  constructor(options: PcmEncoderOptions) {
    const { engine, format, track, bitrate } = options;
    this.#job = startJob(engine, rawPcmArgs(format), [
      ...codecArgs(track, bitrate),
      ...lowDelayOutputArgs,
    ]);
    this.#reading = this.#read(options);
  }

  /** Encodes interleaved PCM whose first sample frame is at `pts` (in samples). */
  push(samples: Int16Array, pts: number): void {
    if (this.#closed) return;
    this.#firstPts ??= pts;
    const bytes = new Uint8Array(samples.buffer, samples.byteOffset, samples.byteLength);
    // Copied: the caller's buffer is reused for its next frame while this one may wait.
    if (!this.#job.write(bytes.slice())) this.dropped++;
  }

  /** Stops ffmpeg; nothing is emitted afterwards. */
  async close(): Promise<void> {
    this.#closed = true;
    await this.#job.close();
    await this.#reading;
  }

  async #read(options: PcmEncoderOptions): Promise<void> {
    const { track, onFrame, log } = options;
    const demuxer = new TsDemuxer();
    let offset: number | undefined;
    try {
      for await (const chunk of this.#job.output) {
        if (this.#closed) break;
        for (const frame of demuxer.push(chunk)) {
          if (frame.codec !== track.codec) continue;
          // ffmpeg restamps from its own zero: the first frame is the first sample pushed.
          offset ??= (this.#firstPts ?? 0) - frame.pts;
          const pts = frame.pts + offset;
          onFrame({ ...frame, trackId: track.id, pts, dts: pts });
        }
      }
    } catch (err) {
      if (!this.#closed) log.warn("audio encoding failed", { err });
    }
    if (!this.#closed) log.warn("audio encoder ended early", { errors: this.#job.errors });
  }
}
