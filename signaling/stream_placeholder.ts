/**
 * `publishStream` / `playStream` until WebRTC is built: the SDK must get a final status for
 * every publish or play (its stop() retries forever while a stream is PENDING), so each one
 * is answered FAILED saying why. The WebRTC module registers its own handlers over these.
 */
import { z } from "zod";
import type { HandlerTable, MessageHandler } from "./handlers.ts";
import { parsePayload } from "./payload.ts";

/** Info of the FAILED status of a publish or play. */
export const webrtcNotBuiltInfo = "WebRTC publish/play is not built yet";

const streamObject = z.looseObject({
  mediaSessionId: z.string().min(1),
  name: z.string().optional(),
});

function failStream(published: boolean): MessageHandler {
  return (session, payload) => {
    const stream = parsePayload(streamObject, payload);
    session.send("notifyStreamStatusEvent", {
      mediaSessionId: stream.mediaSessionId,
      name: stream.name ?? "",
      published,
      status: "FAILED",
      info: webrtcNotBuiltInfo,
    });
  };
}

/** Registers the placeholder `publishStream` and `playStream` handlers. */
export function registerStreamPlaceholder(handlers: HandlerTable): void {
  handlers.register("publishStream", failStream(true));
  handlers.register("playStream", failStream(false));
}
