/**
 * `/call` checks shared by the SIP call tests: the call records as `/call/find_all` lists
 * them, waiting for a call's status, and a `/call/startup` body as the WCS examples send it.
 */
import type { CallRecord } from "../../core/records.ts";
import { waitFor } from "./media_fixtures.ts";
import type { TestServer } from "./test_server.ts";

/** The records `/call/find_all` answers. */
export async function calls(server: TestServer): Promise<CallRecord[]> {
  return await (await server.post("/call/find_all")).json();
}

/** Polls `/call/find_all` until call `callId` has `status`; its record. */
export async function callWithStatus(
  server: TestServer,
  callId: string,
  status: string,
  timeoutMs = 10_000,
): Promise<CallRecord> {
  return await waitFor(`call ${callId} ${status}`, async () => {
    const found = (await calls(server)).find((c) => c.callId === callId);
    return found?.status === status ? found : undefined;
  }, timeoutMs);
}

/**
 * A startup body calling `callee` from alice at 127.0.0.1:`sipPort`, fields as text like the
 * WCS examples.
 */
export function startupBody(callId: string, sipPort: number, callee = "echo") {
  return {
    callId,
    callee,
    sipLogin: "alice",
    sipAuthenticationName: "alice",
    sipPassword: "secret",
    sipDomain: "127.0.0.1",
    sipPort: String(sipPort),
    sipRegisterRequired: "false",
    hasAudio: "true",
    hasVideo: "false",
    visibleName: "Alice",
  };
}
