/**
 * Snapshot: the current picture of a stream as a PNG. A reader joins the stream (it starts
 * at the last keyframe), the keyframe goes through the codec engine as one-frame MPEG-TS.
 */
import { ConflictError } from "../../core/errors.ts";
import type { CodecEngine } from "../engine/engine.ts";
import type { MediaFrame } from "../frame.ts";
import { TsMuxer } from "../formats/mpegts/muxer.ts";
import { ivfOf } from "../formats/ivf.ts";
import { parseVp8Keyframe } from "../codecs/vp8.ts";
import type { Stream } from "../stream.ts";

/** Longest wait for a video keyframe before the snapshot fails with a 409, in milliseconds. */
export const snapshotKeyframeTimeoutMs = 5000;
/** Longest the engine may take to decode the picture, in milliseconds. */
export const snapshotDecodeTimeoutMs = 20_000;

/**
 * PNG bytes of the stream's current picture. A stream without video, or without a keyframe
 * within `keyframeTimeoutMs`, is a ConflictError saying so.
 */
export async function takeSnapshot(
  stream: Stream,
  engine: CodecEngine,
  keyframeTimeoutMs = snapshotKeyframeTimeoutMs,
): Promise<Uint8Array> {
  const video = stream.videoTrack;
  if (!video) throw new ConflictError(`stream ${stream.name} has no video`);
  const keyframe = await nextKeyframe(stream, video.id, keyframeTimeoutMs);
  // MPEG-TS has no VP8 mapping: VP8 goes in IVF, sized by its keyframe header.
  const vp8 = keyframe.codec === "VP8" ? parseVp8Keyframe(keyframe.data) : undefined;
  const input = vp8
    ? ivfOf([keyframe.data], vp8.width, vp8.height)
    : new TsMuxer({ tracks: [{ ...video, id: 0 }] }).mux({ ...keyframe, trackId: 0 });
  return await engine.run({
    inputArgs: ["-f", vp8 ? "ivf" : "mpegts"],
    input,
    outputArgs: ["-frames:v", "1", "-c:v", "png", "-f", "image2pipe"],
    timeoutMs: snapshotDecodeTimeoutMs,
  });
}

async function nextKeyframe(
  stream: Stream,
  trackId: number,
  timeoutMs: number,
): Promise<MediaFrame> {
  const reader = stream.reader(undefined, "snapshot");
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      reader.close();
      reject(
        new ConflictError(`stream ${stream.name} sent no keyframe within ${timeoutMs} ms`),
      );
    }, timeoutMs);
  });
  const search = (async () => {
    for await (const frame of reader) {
      if (frame.trackId === trackId && frame.keyframe) return frame;
    }
    throw new ConflictError(`stream ${stream.name} ended before a keyframe`);
  })();
  try {
    return await Promise.race([search, timeout]);
  } finally {
    clearTimeout(timer);
    reader.close();
    // The loser settles too; its outcome no longer matters.
    search.catch(() => {});
  }
}
