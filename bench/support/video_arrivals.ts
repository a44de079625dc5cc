/** The video frames a reader of a Stream receives, timed, for output rates and latencies. */
import type { Stream } from "../../media/stream.ts";

/** The wall time each video frame of a Stream arrived at a reader, in arrival order. */
export class VideoArrivals {
  /** pts of each frame, in the track's clock. */
  readonly pts: number[] = [];
  /** Arrival of each frame, from `performance.now()`. */
  readonly atMs: number[] = [];
  #reader: ReturnType<Stream["reader"]>;
  #reading: Promise<void>;

  constructor(stream: Stream) {
    const videoId = stream.videoTrack?.id;
    const reader = stream.reader();
    this.#reader = reader;
    this.#reading = (async () => {
      for await (const frame of reader) {
        if (frame.trackId !== videoId) continue;
        this.pts.push(frame.pts);
        this.atMs.push(performance.now());
      }
    })();
  }

  /** Video frames that arrived in [fromMs, toMs). */
  countBetween(fromMs: number, toMs: number): number {
    return this.atMs.filter((t) => t >= fromMs && t < toMs).length;
  }

  /** Stops reading. */
  async close(): Promise<void> {
    this.#reader.close();
    await this.#reading;
  }
}
