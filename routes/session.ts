/** The `connection`, `logger` and `data` groups: Web SDK client sessions. */
import { z } from "zod";
import { filterRecords } from "../core/filter.ts";
import { connectionRecord } from "../core/records.ts";
import { clientLogLevels } from "../core/session_registry.ts";
import { findFilter, noParams, operation, requiredString } from "./operation.ts";

/** Operations of the connection, logger and data groups. */
export const sessionOperations = [
  operation({
    path: "/connection/find_all",
    summary: "List every client session.",
    body: noParams,
    response: z.array(connectionRecord),
    handle: (_body, { services }) => services.sessions.list().map((s) => s.record()),
  }),
  operation({
    path: "/connection/find",
    summary: "List the client sessions whose fields equal the given values.",
    body: findFilter(connectionRecord),
    response: z.array(connectionRecord),
    handle: (filter, { services }) =>
      filterRecords(services.sessions.list().map((s) => s.record()), filter),
  }),
  operation({
    path: "/connection/terminate",
    summary: "Close a client session; its streams end.",
    body: z.object({ sessionId: requiredString }),
    response: null,
    handle: async ({ sessionId }, { services }) => {
      await services.sessions.get(sessionId).terminate("Terminated by rest /connection/terminate");
    },
  }),
  operation({
    path: "/logger/enable_client_log",
    summary: "Log a session's signaling at a level to a file of the logs folder.",
    body: z.object({ sessionId: requiredString, logLevel: z.enum(clientLogLevels) }),
    response: null,
    handle: async ({ sessionId, logLevel }, { services }) => {
      await services.sessions.get(sessionId).enableClientLog(logLevel);
    },
  }),
  operation({
    path: "/logger/disable_client_log",
    summary: "Stop logging a session's signaling.",
    body: z.object({ sessionId: requiredString }),
    response: null,
    handle: async ({ sessionId }, { services }) => {
      await services.sessions.get(sessionId).disableClientLog();
    },
  }),
  operation({
    path: "/data/send",
    summary: "Send a payload to a client session (the SDK's APP_DATA event).",
    body: z.object({
      nodeId: z.string().optional(),
      operationId: z.string().optional(),
      sessionId: requiredString,
      payload: z.unknown().refine((p) => p !== undefined, "is required"),
    }),
    response: null,
    handle: (body, { services }) => {
      const session = services.sessions.get(body.sessionId);
      session.send("OnDataEvent", {
        nodeId: body.nodeId ?? services.nodeId,
        appKey: session.record().appKey,
        sessionId: body.sessionId,
        operationId: body.operationId ?? crypto.randomUUID(),
        payload: body.payload,
      });
    },
  }),
];
