/**
 * A stream whose audio is rewritten in chunks (mixing a sound in, for `/push/sound_on`) while
 * its video passes through. Mixing decodes and re-encodes the audio through whole-chunk
 * engine jobs (plain codec conversion uses the engine's live jobs instead, see
 * engine/audio_conversion.ts), so the source's audio frames are gathered into chunks of a
 * fixed number of samples and each chunk is rewritten by one asynchronous call; the new
 * frames are stamped from the chunk's own start time, so timing stays exact whatever the
 * engine does to timestamps. Video is held until the audio of its time has been converted,
 * which keeps the output interleaved and adds the chunk's length plus one conversion's run
 * time of latency.
 */
import type { Logger } from "../../core/log.ts";
import { aacSamplesPerFrame } from "../codecs/aac.ts";
import type { MediaFrame, Track } from "../frame.ts";
import { Stream, type StreamReader } from "../stream.ts";

/** Samples per chunk: 46080 = 48 Opus frames of 20 ms at 48 kHz = 45 AAC frames (0.96 s). */
export const chunkSamples = 46_080;
/** Longest video is held waiting for audio before it goes out anyway, in milliseconds. */
export const maxVideoHoldMs = 4_000;

/** One chunk of source audio to rewrite. */
export interface AudioChunk {
  frames: MediaFrame[];
  /** Samples the frames cover, in the source audio clock. */
  samples: number;
}

/** What a chunked audio stream is built from. */
export interface ChunkedAudioOptions {
  source: Stream;
  /** The source's audio track whose frames are rewritten. */
  audio: Track;
  /** The rewritten audio track (same id; AAC, `aacSamplesPerFrame` samples a frame). */
  output: Track;
  /** Samples of one source frame. */
  samplesOf: (frame: MediaFrame) => number;
  /** Rewrites a chunk into AAC frame payloads, in order (timestamps are set here). */
  convert: (chunk: AudioChunk) => Promise<Uint8Array[]>;
  /** Ends the output once it has had no reader for a chunk's time. */
  stopWhenUnread: boolean;
  log: Logger;
}

/** The source stream with its audio rewritten chunk by chunk. */
export class ChunkedAudioStream {
  readonly output: Stream;
  #options: ChunkedAudioOptions;
  #reader: StreamReader;
  #chunk: MediaFrame[] = [];
  #samples = 0;
  #video: MediaFrame[] = [];
  #jobs: Promise<void> = Promise.resolve();
  #stopped = false;
  #run: Promise<void>;

  constructor(options: ChunkedAudioOptions) {
    this.#options = options;
    const { source, audio, output } = options;
    this.output = new Stream({
      name: source.name,
      mediaSessionId: crypto.randomUUID(),
      tracks: source.tracks.map((t) => (t.id === audio.id ? output : t)),
      mediaProvider: source.mediaProvider,
      stopProvider: () => this.stop(),
    });
    this.#reader = source.reader(undefined, "transcoder");
    this.#run = this.#loop();
  }

  /** True once stopped (explicitly, or for lack of readers). */
  get stopped(): boolean {
    return this.#stopped;
  }

  /** Stops reading the source; the output ends after the chunks under way. */
  async stop(): Promise<void> {
    this.#stopped = true;
    this.#reader.close();
    await this.#run;
  }

  async #loop(): Promise<void> {
    const { source, audio } = this.#options;
    try {
      for (;;) {
        const frame = await this.#reader.next();
        if (frame === undefined || this.#stopped) break;
        if (frame.trackId === audio.id) this.#addAudio(frame);
        else if (source.tracks[frame.trackId]?.kind === "video") this.#holdVideo(frame);
      }
    } finally {
      this.#reader.close();
      await this.#jobs;
      this.#releaseVideo(Infinity);
      this.output.end();
    }
  }

  #addAudio(frame: MediaFrame): void {
    this.#chunk.push(frame);
    this.#samples += this.#options.samplesOf(frame);
    if (this.#samples < chunkSamples) return;
    const chunk = { frames: this.#chunk, samples: this.#samples };
    this.#chunk = [];
    this.#samples = 0;
    this.#jobs = this.#jobs.then(() => this.#convert(chunk));
  }

  #holdVideo(frame: MediaFrame): void {
    this.#video.push(frame);
    const clock = this.#options.source.tracks[frame.trackId].clockRate;
    if ((frame.dts - this.#video[0].dts) * 1000 / clock > maxVideoHoldMs) {
      this.#releaseVideo(Infinity);
    }
  }

  /** Sends the held video up to `untilSec` (source time, in seconds). */
  #releaseVideo(untilSec: number): void {
    let i = 0;
    for (; i < this.#video.length; i++) {
      const frame = this.#video[i];
      if (frame.dts / this.#options.source.tracks[frame.trackId].clockRate > untilSec) break;
      this.output.push(frame);
    }
    this.#video.splice(0, i);
  }

  async #convert(chunk: AudioChunk): Promise<void> {
    if (this.#stopped) return;
    const { audio, output, log, source } = this.#options;
    let payloads: Uint8Array[] = [];
    try {
      payloads = await this.#options.convert(chunk);
    } catch (err) {
      log.warn("audio chunk conversion failed", { stream: source.name, err });
    }
    const startSec = chunk.frames[0].pts / audio.clockRate;
    const keep = Math.min(
      payloads.length,
      Math.floor(chunk.samples * output.clockRate / audio.clockRate / aacSamplesPerFrame),
    );
    for (let i = 0; i < keep; i++) {
      const pts = Math.round(startSec * output.clockRate) + i * aacSamplesPerFrame;
      // Interleave: video up to this audio frame's time first.
      this.#releaseVideo(pts / output.clockRate);
      this.output.push({
        trackId: output.id,
        codec: "AAC",
        pts,
        dts: pts,
        keyframe: true,
        data: payloads[i],
      });
    }
    this.#releaseVideo(startSec + chunk.samples / audio.clockRate);
    if (this.#options.stopWhenUnread && this.output.readerCount === 0) {
      this.#stopped = true;
      this.#reader.close();
    }
  }
}
