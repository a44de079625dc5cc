/**
 * The encoder's ffmpeg output split into frames: H.264 from MPEG-TS (length-prefixed NAL
 * units, SPS/PPS in band), VP8 from IVF. Each frame carries its picture's number in the run
 * (ffmpeg stamps picture n at n / fps, since the raw input is read at `-r fps`), which ties
 * it to the pts of the picture it encodes.
 */
import { vp8IsKeyframe } from "../codecs/vp8.ts";
import { TsDemuxer } from "../formats/mpegts/demuxer.ts";
import { IvfReader } from "../formats/ivf.ts";
import type { EncodedVideoCodec } from "./video_codec.ts";

/** One encoded picture as ffmpeg wrote it. */
export interface EncodedPicture {
  /** The picture's number in its run (0 for the first picture written to this ffmpeg). */
  index: number;
  keyframe: boolean;
  /** H.264: 4-byte length-prefixed NAL units; VP8: the frame. */
  data: Uint8Array;
}

/** Reads one run's output, chunk by chunk. */
export interface EncodedPictureReader {
  /** Feeds output bytes; returns the pictures they complete. */
  push(chunk: Uint8Array): EncodedPicture[];
  /** Ends the output: returns what was still held (the last picture of a run). */
  flush(): EncodedPicture[];
}

/** A reader of the output of an encoder of `codec` at `fps` frames per second. */
export function encodedPictureReader(
  codec: EncodedVideoCodec,
  fps: number,
): EncodedPictureReader {
  return codec === "H264" ? new TsPictureReader(fps) : new IvfPictureReader(fps);
}

/** H.264 in MPEG-TS: pts in 90 kHz. */
class TsPictureReader implements EncodedPictureReader {
  #demuxer = new TsDemuxer();
  #fps: number;

  constructor(fps: number) {
    this.#fps = fps;
  }

  push(chunk: Uint8Array): EncodedPicture[] {
    return this.#pictures(this.#demuxer.push(chunk));
  }

  flush(): EncodedPicture[] {
    return this.#pictures(this.#demuxer.flush());
  }

  #pictures(frames: ReturnType<TsDemuxer["push"]>): EncodedPicture[] {
    return frames.filter((f) => f.codec === "H264").map((f) => ({
      index: Math.round(f.pts * this.#fps / 90000),
      keyframe: f.keyframe,
      data: f.data,
    }));
  }
}

/** VP8 in IVF: timestamps in the file header's time base. */
class IvfPictureReader implements EncodedPictureReader {
  #reader = new IvfReader();
  #fps: number;

  constructor(fps: number) {
    this.#fps = fps;
  }

  push(chunk: Uint8Array): EncodedPicture[] {
    const frames = this.#reader.push(chunk);
    const header = this.#reader.header;
    if (!header) return [];
    const secondsPerTick = header.timeBaseNum / header.timeBaseDen;
    return frames.filter((f) => f.data.length > 0).map((f) => ({
      index: Math.round(f.timestamp * secondsPerTick * this.#fps),
      keyframe: vp8IsKeyframe(f.data),
      data: f.data,
    }));
  }

  flush(): EncodedPicture[] {
    return [];
  }
}
