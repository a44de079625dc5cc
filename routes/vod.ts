/** The `vod` group: files of the media folder played as live streams. */
import { z } from "zod";
import { filterRecords } from "../core/filter.ts";
import { vodRecord } from "../core/records.ts";
import { findFilter, noParams, operation, plainString, uriWithScheme } from "./operation.ts";

const vodUri = uriWithScheme("vod-live", "vod");

/** Operations of the vod group. */
export const vodOperations = [
  operation({
    path: "/vod/startup",
    summary: "Play a file of the media folder as a live stream.",
    body: z.object({ uri: vodUri, localStreamName: plainString.optional() }),
    response: null,
    handle: ({ uri, localStreamName }, { services }) => services.vod.startup(uri, localStreamName),
  }),
  operation({
    path: "/vod/find",
    summary: "List the VOD streams whose fields equal the given values.",
    body: findFilter(vodRecord),
    response: z.array(vodRecord),
    handle: (filter, { services }) => filterRecords(services.vod.list(), filter),
  }),
  operation({
    path: "/vod/find_all",
    summary: "List every VOD stream.",
    body: noParams,
    response: z.array(vodRecord),
    handle: (_body, { services }) => services.vod.list(),
  }),
  operation({
    path: "/vod/terminate",
    summary: "End a VOD stream.",
    body: z.object({ uri: vodUri, localStreamName: plainString.optional() }),
    response: null,
    handle: ({ uri, localStreamName }, { services }) =>
      services.vod.terminate(uri, localStreamName),
  }),
];
