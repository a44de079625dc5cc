/**
 * An RTMP player of a published Stream: sends the sequence headers, then the stream's frames
 * from a keyframe on, as chunk bytes shared with the stream's other RTMP receivers. The
 * player reads through its own bounded StreamReader, so a slow player loses frames (and
 * waits for the next keyframe) without slowing anyone else; one that stops reading entirely
 * is dropped by the connection's write timeout.
 */
import { NotFoundError } from "../../core/errors.ts";
import type { Logger } from "../../core/log.ts";
import type { StreamRegistry } from "../../core/stream_registry.ts";
import type { CodecEngine } from "../engine/engine.ts";
import { StatusCode } from "../protocols/rtmp/command.ts";
import { type PlayTarget, sendSampleAccess, sendStatus } from "../protocols/rtmp/server.ts";
import { Stream } from "../stream.ts";
import { aacStreamFor } from "./rtmp_aac_stream.ts";
import { RtmpPackager } from "./rtmp_packager.ts";

/** What playing needs of the server. */
export interface RtmpPlayContext {
  streams: StreamRegistry;
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
  const reader = stream.reader();
  // Ending the connection wakes a reader that waits for a frame.
  target.ended.then(() => reader.close());
  try {
    await sendStatus(conn, "status", StatusCode.playReset, `playing and resetting ${name}`);
    await sendStatus(conn, "status", StatusCode.playStart, `started playing ${name}`);
    await sendSampleAccess(conn);
    await conn.writeRaw(packager.header);
    for (;;) {
      const frame = await reader.next();
      if (frame === undefined) break;
      const bytes = packager.chunks(frame);
      if (bytes) await conn.writeRaw(bytes);
    }
    if (stream.ended && !conn.closed) {
      await sendStatus(conn, "status", StatusCode.playUnpublishNotify, `${name} is unpublished`);
    }
  } finally {
    reader.close();
  }
}
