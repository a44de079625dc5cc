/**
 * VOD provider: an MP4 file published as a live stream, its frames pushed at the pace of
 * their decode times. The stream ends when the file does.
 *
 * A file whose edit lists start it before 0 (B-frames decoded ahead of the first picture,
 * AAC priming) is moved later as a whole, every track by the same time: readers like RTMP
 * cannot carry negative times and would clamp them to 0, repeating timestamps.
 */
import { BadRequestError, ParseError } from "../../core/errors.ts";
import type { Logger } from "../../core/log.ts";
import { Mp4Demuxer } from "../formats/mp4/demuxer.ts";
import { Stream } from "../stream.ts";
import { type FileByteSource, openFileByteSource } from "./file_source.ts";

/** Value of `mediaProvider` in the records of VOD streams. */
export const vodMediaProvider = "VOD";

/** Lateness below which a frame is pushed without waiting, in milliseconds. */
const paceSlackMs = 2;

/** What a VodProvider publishes. */
export interface VodOptions {
  /** Real path of the MP4 file. */
  path: string;
  /** Name of the published stream. */
  name: string;
  mediaSessionId: string;
  log: Logger;
}

/** Reads an MP4 file and pushes its frames to a Stream in real time. */
export class VodProvider {
  readonly stream: Stream;
  #source: FileByteSource;
  #demuxer: Mp4Demuxer;
  #log: Logger;
  #stopped = false;
  #timer: ReturnType<typeof setTimeout> | undefined;
  #wake: (() => void) | undefined;
  #loop: Promise<void> | undefined;

  private constructor(source: FileByteSource, demuxer: Mp4Demuxer, options: VodOptions) {
    this.#source = source;
    this.#demuxer = demuxer;
    this.#log = options.log;
    this.stream = new Stream({
      name: options.name,
      mediaSessionId: options.mediaSessionId,
      tracks: demuxer.tracks,
      mediaProvider: vodMediaProvider,
      stopProvider: () => this.stop(),
    });
  }

  /**
   * Opens the file. A file that is not an MP4, or has no track of a codec the server
   * carries, or no samples, is a BadRequestError on `uri` saying why.
   */
  static async open(options: VodOptions): Promise<VodProvider> {
    const source = await openFileByteSource(options.path);
    try {
      let demuxer: Mp4Demuxer;
      try {
        demuxer = await Mp4Demuxer.open(source);
      } catch (err) {
        if (!(err instanceof ParseError)) throw err;
        throw new BadRequestError("uri", `not a playable MP4 file: ${err.message}`);
      }
      if (demuxer.tracks.length === 0) {
        throw new BadRequestError(
          "uri",
          "the file has no playable track (H.264, H.265, AAC or Opus)",
        );
      }
      if (demuxer.sampleCount === 0) {
        throw new BadRequestError("uri", "the file's tracks hold no samples");
      }
      return new VodProvider(source, demuxer, options);
    } catch (err) {
      source.close();
      throw err;
    }
  }

  /** Starts pushing frames; the returned promise settles when the file has ended or stop() ran. */
  start(): Promise<void> {
    this.#loop ??= this.#run();
    return this.#loop;
  }

  /** Stops reading; the stream ends. Idempotent. */
  async stop(): Promise<void> {
    this.#stopped = true;
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#wake?.();
    if (!this.#loop) {
      this.#loop = Promise.resolve();
      this.#source.close();
    }
    await this.#loop;
    this.stream.end();
  }

  async #run(): Promise<void> {
    const tracks = this.#demuxer.tracks;
    const startMs = performance.now();
    let firstSec: number | undefined;
    // Ticks added to each track's timestamps so the earliest decode time is not below 0.
    let shiftTicks: number[] = [];
    try {
      for (const sample of this.#demuxer.samples()) {
        if (this.#stopped) break;
        const frame = await this.#demuxer.readFrame(sample);
        const sec = sample.dts / tracks[sample.trackId].clockRate;
        if (firstSec === undefined) {
          // Samples come in decode-time order over all tracks: the first is the earliest.
          firstSec = sec;
          shiftTicks = tracks.map((t) => sec < 0 ? Math.round(-sec * t.clockRate) : 0);
        }
        frame.pts += shiftTicks[frame.trackId];
        frame.dts += shiftTicks[frame.trackId];
        const waitMs = startMs + (sec - firstSec) * 1000 - performance.now();
        if (waitMs > paceSlackMs) await this.#sleep(waitMs);
        if (this.#stopped) break;
        this.stream.push(frame);
      }
    } catch (err) {
      // A file cut or corrupted mid-way ends the stream where it breaks, like a live source.
      this.#log.warn("vod read failed", { stream: this.stream.name, err });
    } finally {
      this.#source.close();
      this.stream.end();
    }
  }

  #sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      this.#wake = resolve;
      this.#timer = setTimeout(() => {
        this.#timer = undefined;
        this.#wake = undefined;
        resolve();
      }, ms);
    });
  }
}
