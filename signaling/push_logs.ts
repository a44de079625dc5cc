/** `pushLogs {logs}`: SDK log lines appended to the session's client log when it is on. */
import { z } from "zod";
import type { HandlerTable } from "./handlers.ts";
import { parsePayload } from "./payload.ts";

const pushLogsPayload = z.object({ logs: z.string() });

/** Registers the `pushLogs` handler. */
export function registerPushLogs(handlers: HandlerTable): void {
  handlers.register("pushLogs", (session, payload) => {
    session.clientLog.writePushed(parsePayload(pushLogsPayload, payload).logs);
  }, { beforeEstablished: true });
}
