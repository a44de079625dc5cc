/**
 * An RTMP player of a published Stream: sends the sequence headers, then joins the stream's
 * `RtmpFanout`, which writes it the stream's frames from a keyframe on as chunk bytes shared
 * with the stream's other RTMP players. A slow player loses bundles (and waits for a
 * keyframe) without slowing anyone else; one that stops reading entirely is dropped by the
 * connection's write timeout.
 */
import { NotFoundError } from "../../core/errors.ts";
import type { Logger } from "../../core/log.ts";
import type { StreamDirectory } from "../stream_record.ts";
import type { CodecEngine } from "../engine/engine.ts";
import { StatusCode } from "../protocols/rtmp/command.ts";
import type { RtmpConn } from "../protocols/rtmp/conn.ts";
import { type PlayTarget, sendSampleAccess, sendStatus } from "../protocols/rtmp/server.ts";
import { Stream } from "../stream.ts";
import { aacStreamFor } from "./rtmp_aac_stream.ts";
import { RtmpFanout } from "./rtmp_fanout.ts";
import { RtmpPackager } from "./rtmp_packager.ts";

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
  const { conn } = target;
  await sendStatus(conn, "status", StatusCode.playReset, `playing and resetting ${name}`);
  await sendStatus(conn, "status", StatusCode.playStart, `started playing ${name}`);
  await sendSampleAccess(conn);
  const packager = RtmpPackager.of(stream);
  let headerVersion;
  do {
    // Written again if the stream's encoder set its parameter sets meanwhile.
    headerVersion = packager.headerVersion;
    await conn.writeRaw(packager.header);
  } while (headerVersion !== packager.headerVersion);
  if (stream.ended || conn.closed) return unpublished(conn, stream, name);
  // Taken after the await: the fan-out of the moment may have ended with its last player.
  const fanout = RtmpFanout.of(stream);
  const { player, done } = fanout.add(conn);
  // Ending the connection takes the player out.
  target.ended.then(() => fanout.remove(player));
  // Not awaited here: this function's frame is let go while the player plays (an async
  // frame and its await held about half a KiB per idle player).
  return done.then(() => unpublished(conn, stream, name));
}

/** Tells a player whose stream ended (and that is still there) that it was unpublished. */
async function unpublished(conn: RtmpConn, stream: Stream, name: string): Promise<void> {
  if (stream.ended && !conn.closed) {
    await sendStatus(conn, "status", StatusCode.playUnpublishNotify, `${name} is unpublished`);
  }
}
