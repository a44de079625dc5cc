/** The `vod` group: files of the media folder played as live streams. */
import { z } from "zod";
import { vodRecord } from "../core/records.ts";
import { findFilter, noParams, operation, uriWithScheme } from "./operation.ts";

const vodUri = uriWithScheme("vod-live", "vod");

/** Operations of the vod group. */
export const vodOperations = [
  operation({
    path: "/vod/startup",
    summary: "Play a file of the media folder as a live stream.",
    body: z.object({ uri: vodUri, localStreamName: z.string().optional() }),
    response: null,
  }),
  operation({
    path: "/vod/find",
    summary: "List the VOD streams whose fields equal the given values.",
    body: findFilter(vodRecord),
    response: z.array(vodRecord),
  }),
  operation({
    path: "/vod/find_all",
    summary: "List every VOD stream.",
    body: noParams,
    response: z.array(vodRecord),
  }),
  operation({
    path: "/vod/terminate",
    summary: "End a VOD stream.",
    body: z.object({ uri: vodUri, localStreamName: z.string().optional() }),
    response: null,
  }),
];
