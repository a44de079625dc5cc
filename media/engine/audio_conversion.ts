/**
 * A stream with its audio converted to another codec (AAC to Opus for WebRTC players, Opus to
 * AAC for RTMP), video passing through. There is one conversion per (source stream, target
 * codec), shared by every reader that needs it: it starts with its first reader and stops,
 * closing its ffmpeg, when the last one leaves (the reader count is the reference count).
 * Video is held until the audio of its time has come out of the conversion, so the output
 * stays interleaved in time order; the hold is the conversion's own latency.
 */
import type { Logger } from "../../core/log.ts";
import { buildAsc } from "../codecs/aac.ts";
import type { AudioCodec, MediaFrame, Track } from "../frame.ts";
import { Stream, type StreamReader } from "../stream.ts";
import type { ReaderKind } from "../stream_tally.ts";
import type { CodecEngine } from "./engine.ts";
import { LiveTranscode } from "./live_transcode.ts";

/** Codecs audio can be converted to. */
export type AudioTarget = "OPUS" | "AAC" | "PCMU" | "PCMA" | "G722";
/** Sample rate of G.711 (and RTP clock of G.722, RFC 3551 §4.5.2), in Hz. */
const g711SampleRate = 8000;
/** Sample rate G.722 codes, in Hz. */
const g722SampleRate = 16000;

/** Longest span of video held waiting for converted audio, in milliseconds. */
export const maxVideoHoldMs = 1000;
/** Sample rate of converted audio, in Hz (Opus runs at 48 kHz; AAC made from Opus too). */
const convertedSampleRate = 48_000;
/** Bitrate of Opus made for WebRTC players, in bit/s. */
export const opusBitrate = 64_000;
/** Bitrate of AAC made for RTMP receivers, in bit/s. */
export const aacBitrate = 128_000;
/** AAC-LC audio object type. */
const aacLcObjectType = 2;

/** Conversions by source, then by `<target>/<bitrate>` (bitrate empty for the codec's own). */
const conversions = new WeakMap<Stream, Map<string, AudioConversion>>();

/**
 * The shared conversion of `source`'s first audio track to `target` (made on first use, or
 * again after the previous one stopped), at `bitrate` bit/s when given (an HLS audio
 * rendition), else the codec's default. Read it like any Stream.
 */
export function convertedAudio(
  source: Stream,
  target: AudioTarget,
  engine: CodecEngine,
  log: Logger,
  bitrate?: number,
): Stream {
  let byTarget = conversions.get(source);
  if (!byTarget) conversions.set(source, byTarget = new Map());
  const key = `${target}/${bitrate ?? ""}`;
  let conversion = byTarget.get(key);
  if (!conversion || conversion.closing) {
    conversion = new AudioConversion(source, target, engine, log, bitrate);
    byTarget.set(key, conversion);
  }
  return conversion;
}

/** The track `audio` becomes when converted to `target` by `engine`, at `sampleRate` Hz. */
export function targetTrack(
  audio: Track,
  target: AudioTarget,
  engine: CodecEngine,
  sampleRate = convertedSampleRate,
): Track {
  const g711 = target === "PCMU" || target === "PCMA" || target === "G722";
  // WebRTC's Opus is signalled as stereo (a mono Opus stream decodes the same); ffmpeg.wasm
  // 0.12.10 crashes encoding stereo Opus (memory access out of bounds), so there it is mono.
  // AAC keeps the source's layout up to stereo; G.711 and G.722 are mono as telephony knows them.
  const channels = g711
    ? 1
    : target === "OPUS"
    ? (engine.kind === "wasm" ? 1 : 2)
    : Math.min(audio.channels ?? 2, 2);
  // Opus always runs its RTP clock at 48 kHz, whatever rate it codes; G.711 at 8 kHz.
  const clockRate = g711 ? g711SampleRate : target === "OPUS" ? convertedSampleRate : sampleRate;
  const track: Track = {
    id: audio.id,
    kind: "audio",
    codec: target,
    clockRate,
    // G.722 codes 16 kHz under its 8 kHz RTP clock.
    sampleRate: target === "G722" ? g722SampleRate : clockRate,
    channels,
  };
  if (target === "OPUS") track.config = { codec: "OPUS" };
  if (target === "AAC") {
    track.config = { codec: "AAC", asc: buildAsc(aacLcObjectType, clockRate, channels) };
  }
  return track;
}

/** ffmpeg's encoder options for `track`, at `bitrate` bit/s (default: the codec's own). */
export function codecArgs(track: Track, bitrate?: number): string[] {
  const rate = ["-ar", String(track.clockRate), "-ac", String(track.channels)];
  if (track.codec === "PCMU" || track.codec === "PCMA") {
    return ["-vn", "-c:a", track.codec === "PCMU" ? "pcm_mulaw" : "pcm_alaw", ...rate];
  }
  if (track.codec === "G722") {
    return ["-vn", "-c:a", "g722", "-ar", String(g722SampleRate), "-ac", "1"];
  }
  return track.codec === "OPUS"
    ? [
      ...["-vn", "-c:a", "libopus", "-b:a", String(bitrate || opusBitrate)],
      ...["-frame_duration", "20", ...rate],
    ]
    : ["-vn", "-c:a", "aac", "-b:a", String(bitrate || aacBitrate), ...rate];
}

/** A source stream with its audio converted; a Stream started and stopped by its readers. */
export class AudioConversion extends Stream {
  readonly source: Stream;
  readonly #audio: Track;
  readonly #engine: CodecEngine;
  readonly #log: Logger;
  readonly #bitrate: number | undefined;
  #transcode: LiveTranscode | undefined;
  #reader: StreamReader | undefined;
  #run: Promise<void> | undefined;
  #closing = false;
  #video: MediaFrame[] = [];
  /** End of the converted audio so far, in seconds of the stream's timeline. */
  #audioUntilSec = -Infinity;

  constructor(
    source: Stream,
    target: AudioTarget,
    engine: CodecEngine,
    log: Logger,
    bitrate?: number,
  ) {
    const audio = source.tracks.find((t) => t.kind === "audio");
    if (!audio) throw new RangeError(`stream ${source.name} has no audio to convert`);
    const output = targetTrack(audio, target, engine);
    super({
      name: source.name,
      mediaSessionId: crypto.randomUUID(),
      tracks: source.tracks.map((t) => (t.id === audio.id ? output : t)),
      mediaProvider: source.mediaProvider,
      stopProvider: () => this.#stop(),
    });
    this.source = source;
    this.#audio = audio;
    this.#engine = engine;
    this.#log = log;
    this.#bitrate = bitrate;
  }

  /** The codec audio is converted from. */
  get from(): AudioCodec {
    return this.#audio.codec as AudioCodec;
  }

  /** True once the conversion stops or has stopped: new readers need a new conversion. */
  get closing(): boolean {
    return this.#closing || this.ended;
  }

  /** The running conversion (for its latency), once a reader started it. */
  get transcode(): LiveTranscode | undefined {
    return this.#transcode;
  }

  /** Video passes through: the source is the one to ask for a keyframe. */
  override requestKeyframe(): void {
    this.source.requestKeyframe();
  }

  /** A reader; the first one starts the conversion. */
  override reader(queueFrames?: number, kind?: ReaderKind): StreamReader {
    if (!this.#run && !this.ended) this.#start();
    return super.reader(queueFrames, kind);
  }

  /** Detaches a reader; when it was the last, the conversion stops and the stream ends. */
  override detach(reader: StreamReader): void {
    super.detach(reader);
    if (this.readerCount === 0 && this.#run && !this.#closing) void this.terminate("no readers");
  }

  #start(): void {
    const output = this.tracks[this.#audio.id];
    this.#transcode = new LiveTranscode({
      engine: this.#engine,
      input: this.#audio,
      output,
      codecArgs: codecArgs(output, this.#bitrate),
      onFrame: (frame) => this.#onAudio(frame),
      log: this.#log.child({
        stream: this.name,
        conversion: `${this.#audio.codec}>${output.codec}`,
      }),
    });
    this.#reader = this.source.reader(undefined, "transcoder");
    this.#run = this.#loop(this.#reader, this.#transcode);
  }

  async #loop(reader: StreamReader, transcode: LiveTranscode): Promise<void> {
    try {
      for (;;) {
        const frame = await reader.next();
        if (frame === undefined) break;
        if (frame.trackId === this.#audio.id) transcode.push(frame);
        else if (this.tracks[frame.trackId]?.kind === "video") this.#holdVideo(frame);
      }
    } finally {
      reader.close();
      await transcode.close();
      this.#releaseVideo(Infinity);
      this.end();
    }
  }

  async #stop(): Promise<void> {
    this.#closing = true;
    this.#reader?.close();
    await this.#run;
  }

  #onAudio(frame: MediaFrame): void {
    const clock = this.tracks[frame.trackId].clockRate;
    this.#audioUntilSec = frame.pts / clock;
    this.#releaseVideo(this.#audioUntilSec);
    this.push(frame);
  }

  #holdVideo(frame: MediaFrame): void {
    const clock = this.tracks[frame.trackId].clockRate;
    // Nothing to wait for once the conversion has given up (its ffmpeg failed).
    if (frame.dts / clock <= this.#audioUntilSec || !this.#transcode?.running) {
      this.#releaseVideo(Infinity);
      this.push(frame);
      return;
    }
    this.#video.push(frame);
    // Audio late or absent: video goes out `maxVideoHoldMs` behind, steadily, not in bursts.
    this.#releaseVideo((frame.dts - maxVideoHoldMs * clock / 1000) / clock);
  }

  /** Sends the held video up to `untilSec` (stream time, in seconds). */
  #releaseVideo(untilSec: number): void {
    let i = 0;
    for (; i < this.#video.length; i++) {
      const frame = this.#video[i];
      if (frame.dts / this.tracks[frame.trackId].clockRate > untilSec) break;
      this.push(frame);
    }
    this.#video.splice(0, i);
  }
}
