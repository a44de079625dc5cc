/**
 * The video decoder of a transcoding pipeline: a streaming one (one ffmpeg for its life) on
 * engines that can stream, a chunked one (a run per GOP) on the others.
 */
import type { VideoDecoder, VideoDecoderOptions } from "./video_codec.ts";
import { ChunkedVideoDecoder } from "./video_decoder_chunked.ts";
import { StreamingVideoDecoder } from "./video_decoder_streaming.ts";

/** A decoder of `options.track`'s frames into raw I420 pictures, for `options.engine`. */
export function createVideoDecoder(options: VideoDecoderOptions): VideoDecoder {
  return options.engine.start
    ? new StreamingVideoDecoder(options)
    : new ChunkedVideoDecoder(options);
}
