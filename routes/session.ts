/** The `connection`, `logger` and `data` groups: Web SDK client sessions. */
import { z } from "zod";
import { connectionRecord } from "../core/records.ts";
import { findFilter, noParams, operation, requiredString } from "./operation.ts";

/** Levels of a client log. */
export const clientLogLevels = ["ERROR", "WARN", "INFO", "DEBUG", "TRACE"] as const;

/** Operations of the connection, logger and data groups. */
export const sessionOperations = [
  operation({
    path: "/connection/find_all",
    summary: "List every client session.",
    body: noParams,
    response: z.array(connectionRecord),
  }),
  operation({
    path: "/connection/find",
    summary: "List the client sessions whose fields equal the given values.",
    body: findFilter(connectionRecord),
    response: z.array(connectionRecord),
  }),
  operation({
    path: "/connection/terminate",
    summary: "Close a client session; its streams end.",
    body: z.object({ sessionId: requiredString }),
    response: null,
  }),
  operation({
    path: "/logger/enable_client_log",
    summary: "Log a session's signaling at a level to a file of the logs folder.",
    body: z.object({ sessionId: requiredString, logLevel: z.enum(clientLogLevels) }),
    response: null,
  }),
  operation({
    path: "/logger/disable_client_log",
    summary: "Stop logging a session's signaling.",
    body: z.object({ sessionId: requiredString }),
    response: null,
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
  }),
];
