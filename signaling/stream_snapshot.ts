/**
 * `snapshot` of the Web SDK (`stream.snapshot()`): a PNG of the stream named in the message,
 * answered to the stream object that asked, which may be NEW (created only for this), PLAYING
 * or PUBLISHING.
 *
 * Success is told twice, as the SDK reads both: the stream event `snapshotCompleted` with
 * `payload.snapshot` (what current demo pages listen for) and the legacy status
 * `SNAPSHOT_COMPLETE` with the image in `info` (`stream.getInfo()`; the SDK keeps the stream's
 * status). Failure is the event `snapshotFailed` with `payload.info`, and for a stream object
 * the server does not hold (a NEW one) also the legacy status FAILED: sent for a stream that
 * plays or publishes, FAILED would make the SDK close that stream.
 */
import { Buffer } from "node:buffer";
import { z } from "zod";
import { ConflictError, ParseError } from "../core/errors.ts";
import { takeSnapshot } from "../media/publishers/snapshot.ts";
import { Stream } from "../media/stream.ts";
import type { HandlerTable, SignalingContext } from "./handlers.ts";
import { parsePayload } from "./payload.ts";
import type { SignalingSession } from "./session.ts";

const snapshotObject = z.looseObject({
  mediaSessionId: z.string().min(1),
  name: z.string().min(1),
});

/** `info` of a snapshot of a stream that is not published. */
export const snapshotNotFoundInfo = "Stream not found";
/** `info` of a snapshot that failed for a reason the client need not know. */
export const snapshotErrorInfo = "Failed by error";

async function handleSnapshot(
  session: SignalingSession,
  payload: unknown,
  { services, log }: SignalingContext,
): Promise<void> {
  const { mediaSessionId, name } = parsePayload(snapshotObject, payload);
  const reply = { mediaSessionId, name, streamName: name };
  let png: Uint8Array;
  try {
    const stream = services.streams.published(name);
    if (!stream) throw new SnapshotRefused(snapshotNotFoundInfo);
    if (!(stream instanceof Stream)) {
      throw new SnapshotRefused(`stream ${name} carries no frames to take a picture of`);
    }
    png = await takeSnapshot(stream, services.engine);
  } catch (err) {
    const info = reasonOf(err);
    log.info("snapshot failed", { name, mediaSessionId, reason: (err as Error).message });
    session.send("notifyStreamEvent", { ...reply, type: "snapshotFailed", payload: { info } });
    if (services.streams.list().every((s) => s.mediaSessionId !== mediaSessionId)) {
      session.send("notifyStreamStatusEvent", { ...reply, status: "FAILED", info });
    }
    return;
  }
  const snapshot = Buffer.from(png).toString("base64");
  session.send("notifyStreamEvent", { ...reply, type: "snapshotCompleted", payload: { snapshot } });
  session.send("notifyStreamStatusEvent", {
    ...reply,
    status: "SNAPSHOT_COMPLETE",
    info: snapshot,
  });
}

/** A snapshot refused for a reason the client is told as is. */
class SnapshotRefused extends Error {}

/** The `info` a client gets for a failed snapshot. */
function reasonOf(err: unknown): string {
  if (err instanceof SnapshotRefused || err instanceof ConflictError) return err.message;
  // A codec the engine's input cannot carry.
  if (err instanceof ParseError) return err.message;
  return snapshotErrorInfo;
}

/** Registers the `snapshot` message. */
export function registerStreamSnapshot(handlers: HandlerTable): void {
  handlers.register("snapshot", handleSnapshot);
}
