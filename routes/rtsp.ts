/** The `rtsp` group: pull IP cameras into local streams. */
import { z } from "zod";
import { filterRecords } from "../core/filter.ts";
import { rtspPullRecord } from "../core/records.ts";
import { redactUri } from "../core/redact.ts";
import { findFilter, noParams, operation, plainString, uriWithScheme } from "./operation.ts";

const rtspUri = uriWithScheme("rtsp", "rtsps");

/** Operations of the rtsp group. */
export const rtspOperations = [
  operation({
    path: "/rtsp/startup",
    summary:
      "Pull an RTSP source into a local stream (named after the uri without credentials and secret parameters when no name is given).",
    body: z.object({ uri: rtspUri, localStreamName: plainString.optional() }),
    response: null,
    handle: ({ uri, localStreamName }, { services }) => services.rtsp.startup(uri, localStreamName),
  }),
  operation({
    path: "/rtsp/find_all",
    summary: "List every RTSP pull.",
    body: noParams,
    response: z.array(rtspPullRecord),
    handle: (_body, { services }) => services.rtsp.list(),
  }),
  operation({
    path: "/rtsp/find",
    summary: "List the RTSP pulls whose fields equal the given values.",
    body: findFilter(rtspPullRecord),
    response: z.array(rtspPullRecord),
    // Records show redacted uris; a filter with the full uri matches them once redacted too.
    handle: (filter, { services }) =>
      filterRecords(
        services.rtsp.list(),
        filter.uri === undefined ? filter : { ...filter, uri: redactUri(filter.uri) },
      ),
  }),
  operation({
    path: "/rtsp/terminate",
    summary: "Stop an RTSP pull and end its stream.",
    body: z.object({ uri: rtspUri }),
    response: null,
    handle: ({ uri }, { services }) => services.rtsp.terminate(uri),
  }),
];
