/**
 * An SRT player (a caller with `m=request`) of a published Stream: the stream's H.264/H.265
 * video and AAC audio as MPEG-TS, from a keyframe on; Opus audio goes out as AAC through the
 * stream's shared conversion. The player reads through its own bounded StreamReader and
 * sending never waits for the peer (SRT drops what is too late to play), so a slow player
 * loses frames without slowing anyone else; one that stops answering is ended by the
 * connection's peer idle timeout.
 */
import { NotFoundError } from "../../core/errors.ts";
import type { Logger } from "../../core/log.ts";
import type { CodecEngine } from "../engine/engine.ts";
import { TsMuxer } from "../formats/mpegts/muxer.ts";
import type { SrtConnection } from "../protocols/srt/connection.ts";
import { Stream, type StreamReader } from "../stream.ts";
import type { MediaFrame } from "../frame.ts";
import type { StreamDirectory } from "../stream_record.ts";
import { aacStreamFor } from "./rtmp_aac_stream.ts";

/** Codecs an SRT player receives; tracks of other codecs are left out. */
const tsCodecs = new Set(["H264", "H265", "AAC"]);

/** What playing needs of the server. */
export interface SrtPlayContext {
  streams: StreamDirectory;
  /** Converts Opus audio to AAC. */
  engine: CodecEngine;
  log: Logger;
}

/**
 * Plays the published stream `name` on `connection` until either ends; the connection is
 * closed when the stream ends. A missing stream, or one with no track MPEG-TS carries here,
 * is a NotFoundError.
 */
export async function playSrt(
  context: SrtPlayContext,
  name: string,
  connection: SrtConnection,
): Promise<void> {
  const published = context.streams.published(name);
  if (!(published instanceof Stream) || published.ended) {
    throw new NotFoundError(`stream ${name} not found`);
  }
  const stream = aacStreamFor(published, context.engine, context.log);
  const tracks = stream.tracks.filter((t) => tsCodecs.has(t.codec));
  if (tracks.length === 0) throw new NotFoundError(`stream ${name} has no H.264, H.265 or AAC`);
  const muxer = new TsMuxer({ tracks });
  const muxed = new Set(tracks.map((t) => t.id));
  const reader = stream.reader(undefined, "srt");
  // Ending the connection wakes a reader that waits for a frame.
  connection.closed.then(() => reader.close());
  try {
    await sendFrames(
      reader,
      connection,
      (frame) => muxed.has(frame.trackId) ? muxer.mux(frame) : undefined,
    );
  } finally {
    reader.close();
    await connection.close();
  }
}

/**
 * Sends the reader's frames (as `packets` makes them) on `connection` until the reader is
 * drained. A callback loop on `poll` rather than an await per frame: sending never waits, so
 * no promise per frame is needed.
 */
function sendFrames(
  reader: StreamReader,
  connection: SrtConnection,
  packets: (frame: MediaFrame) => Uint8Array | undefined,
): Promise<void> {
  const { promise, resolve, reject } = Promise.withResolvers<void>();
  const pump = (): void => {
    try {
      for (;;) {
        const frame = reader.poll(pump);
        if (frame === undefined) {
          if (reader.drained) resolve();
          return;
        }
        const bytes = packets(frame);
        if (bytes) connection.send(bytes);
      }
    } catch (err) {
      reject(err);
    }
  };
  pump();
  return promise;
}
