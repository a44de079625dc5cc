/**
 * Client → backend data: `sendData {operationId, payload}` → the `OnDataEvent` hook →
 * `DataStatusEvent {operationId, status}` (ACCEPTED, or FAILED when the hook failed under
 * restOnError FAIL). Sessions of the built-in `roomApp` have their commands run by room_app.ts
 * instead, unless `apps.roomApp` names another backend.
 */
import { z } from "zod";
import type { HandlerTable, SignalingContext } from "./handlers.ts";
import { parsePayload } from "./payload.ts";
import { isBuiltInRoomApp, runRoomCommand } from "./room_app.ts";
import type { SignalingSession } from "./session.ts";

const sendDataPayload = z.object({ operationId: z.string().min(1), payload: z.unknown() });

async function handleSendData(
  session: SignalingSession,
  payload: unknown,
  ctx: SignalingContext,
): Promise<void> {
  const { services } = ctx;
  const data = parsePayload(sendDataPayload, payload);
  const { operationId } = data;
  const record = session.record();
  // The built-in room app is the backend of roomApp sessions, as in WCS.
  const outcome = isBuiltInRoomApp(record.appKey, services.config)
    ? runRoomCommand(session, data.payload, ctx)
    : await services.hooks.invoke("OnDataEvent", {
      nodeId: services.nodeId,
      appKey: record.appKey,
      sessionId: session.sessionId,
      operationId,
      payload: data.payload,
    }, session.restClientConfig);
  if (outcome.ok) session.send("DataStatusEvent", { operationId, status: "ACCEPTED" });
  else session.send("DataStatusEvent", { operationId, status: "FAILED", info: outcome.reason });
}

/** Registers the `sendData` handler. */
export function registerData(handlers: HandlerTable): void {
  handlers.register("sendData", handleSendData);
}
