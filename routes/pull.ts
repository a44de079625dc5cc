/** The `pull` group: streams pulled from or pushed to another server over WebSocket. */
import { z } from "zod";
import { remotePullRecord } from "../core/records.ts";
import { noParams, operation, requiredString, uriWithScheme } from "./operation.ts";

const wsUri = uriWithScheme("ws", "wss");
const pullBody = z.object({
  uri: wsUri,
  localStreamName: requiredString,
  remoteStreamName: requiredString,
});

/** Operations of the pull group. */
export const pullOperations = [
  operation({
    path: "/pull/pull",
    summary: "Play a stream of another server into a local stream.",
    body: pullBody,
    response: null,
    handle: (body, { services }) =>
      services.remotePulls.pull(body.uri, body.remoteStreamName, body.localStreamName),
  }),
  operation({
    path: "/pull/find_all",
    summary: "List every remote pull.",
    body: noParams,
    response: z.array(remotePullRecord),
    handle: (_body, { services }) => services.remotePulls.list(),
  }),
  operation({
    path: "/pull/push",
    summary: "Publish a local stream to another server.",
    body: pullBody,
    response: null,
    handle: (body, { services }) =>
      services.remotePulls.push(body.uri, body.localStreamName, body.remoteStreamName),
  }),
  operation({
    path: "/pull/terminate",
    summary: "Stop a remote pull or push.",
    body: z.object({ uri: wsUri }),
    response: null,
    handle: (body, { services }) => services.remotePulls.terminate(body.uri),
  }),
];
