/**
 * An RTMP player of a published Stream: sends the sequence headers, then the stream's frames
 * from a keyframe on, as chunk bytes shared with the stream's other RTMP players (audio
 * bundled with the next picture, see `RtmpPackager.playChunks`). The player reads through its
 * own bounded StreamReader, so a slow player loses frames (and waits for the next keyframe)
 * without slowing anyone else; one that stops reading entirely is dropped by the
 * connection's write timeout.
 */
import { NotFoundError } from "../../core/errors.ts";
import type { Logger } from "../../core/log.ts";
import type { StreamDirectory } from "../stream_record.ts";
import type { CodecEngine } from "../engine/engine.ts";
import { StatusCode } from "../protocols/rtmp/command.ts";
import type { RtmpConn } from "../protocols/rtmp/conn.ts";
import { type PlayTarget, sendSampleAccess, sendStatus } from "../protocols/rtmp/server.ts";
import { Stream, type StreamReader } from "../stream.ts";
import { aacStreamFor } from "./rtmp_aac_stream.ts";
import { RtmpPackager } from "./rtmp_packager.ts";
import { joinChunkBytes } from "../protocols/rtmp/chunk_writer.ts";

/** What playing needs of the server. */
export interface RtmpPlayContext {
  streams: StreamDirectory;
  /** Converts Opus audio to AAC. */
  engine: CodecEngine;
  log: Logger;
}

/**
 * Plays the published stream `name` to `target` until either ends; Opus audio is sent as
 * AAC through the stream's shared conversion.
 */
export async function playRtmp(
  context: RtmpPlayContext,
  name: string,
  target: PlayTarget,
): Promise<void> {
  const published = context.streams.published(name);
  if (!(published instanceof Stream) || published.ended) {
    throw new NotFoundError(`stream ${name} not found`);
  }
  const stream = aacStreamFor(published, context.engine, context.log);
  const packager = RtmpPackager.of(stream);
  const { conn } = target;
  const reader = stream.reader(undefined, "rtmp");
  // Ending the connection wakes a reader that waits for a frame.
  target.ended.then(() => reader.close());
  try {
    await sendStatus(conn, "status", StatusCode.playReset, `playing and resetting ${name}`);
    await sendStatus(conn, "status", StatusCode.playStart, `started playing ${name}`);
    await sendSampleAccess(conn);
    await conn.writeRaw(packager.header);
    await sendFrames(reader, packager, conn, packager.headerVersion);
    if (stream.ended && !conn.closed) {
      const tail = packager.endChunks();
      if (tail) await conn.writeRaw(tail);
      await sendStatus(conn, "status", StatusCode.playUnpublishNotify, `${name} is unpublished`);
    }
  } finally {
    reader.close();
  }
}

/**
 * Writes the reader's frames to `conn`, one write at a time, until the reader is drained;
 * rejects when a write fails. A callback loop on `poll` rather than an await per frame: the
 * per-frame promises were most of what a player allocated.
 */
function sendFrames(
  reader: StreamReader,
  packager: RtmpPackager,
  conn: RtmpConn,
  headerVersion: number,
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
        let bytes = packager.playChunks(frame);
        if (bytes && packager.headerVersion !== headerVersion) {
          // The stream's encoder set its parameter sets after the headers went out.
          headerVersion = packager.headerVersion;
          bytes = joinChunkBytes([packager.header, bytes]);
        }
        if (bytes) {
          conn.writeRaw(bytes).then(pump, reject);
          return;
        }
      }
    } catch (err) {
      reject(err);
    }
  };
  pump();
  return promise;
}
