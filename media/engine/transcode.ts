/**
 * Frames through the codec engine: muxed as MPEG-TS on the way in, demuxed back to frames on
 * the way out. One call converts one chunk (a GOP, a segment, a clip); the native engine
 * streams it through ffmpeg, the wasm engine takes it whole.
 */
import type { MediaFrame, Track } from "../frame.ts";
import { TsDemuxer } from "../formats/mpegts/demuxer.ts";
import { TsMuxer } from "../formats/mpegts/muxer.ts";
import type { CodecEngine } from "./engine.ts";

/** Frames and tracks that came out of a conversion. */
export interface Transcoded {
  tracks: Track[];
  frames: MediaFrame[];
}

/**
 * Runs `frames` of `tracks` through ffmpeg with `outputArgs` (codec options, without the
 * output format, which is MPEG-TS) and returns the frames it produced.
 */
export async function transcodeFrames(
  engine: CodecEngine,
  tracks: Track[],
  frames: Iterable<MediaFrame> | AsyncIterable<MediaFrame>,
  outputArgs: string[],
  timeoutMs?: number,
): Promise<Transcoded> {
  const muxer = new TsMuxer({ tracks });
  async function* input(): AsyncGenerator<Uint8Array> {
    for await (const frame of frames) yield muxer.mux(frame);
  }
  const output = await engine.run({
    inputArgs: ["-f", "mpegts"],
    input: input(),
    outputArgs: [...outputArgs, "-f", "mpegts"],
    timeoutMs,
  });
  const demuxer = new TsDemuxer();
  const out = demuxer.push(output);
  out.push(...demuxer.flush());
  return { tracks: demuxer.tracks, frames: out };
}
