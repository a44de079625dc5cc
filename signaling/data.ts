/**
 * Client → backend data: `sendData {operationId, payload}` → the `OnDataEvent` hook →
 * `DataStatusEvent {operationId, status}` (ACCEPTED, or FAILED when the hook failed under
 * restOnError FAIL).
 */
import { z } from "zod";
import type { HandlerTable, SignalingContext } from "./handlers.ts";
import { parsePayload } from "./payload.ts";
import type { SignalingSession } from "./session.ts";

const sendDataPayload = z.object({ operationId: z.string().min(1), payload: z.unknown() });

async function handleSendData(
  session: SignalingSession,
  payload: unknown,
  { services }: SignalingContext,
): Promise<void> {
  const data = parsePayload(sendDataPayload, payload);
  const { operationId } = data;
  const record = session.record();
  const outcome = await services.hooks.invoke("OnDataEvent", {
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
