/** The `mpegts` group. */
import { z } from "zod";
import { filterRecords } from "../core/filter.ts";
import { mpegtsRecord } from "../core/records.ts";
import { findFilter, noParams, operation, plainString, requiredString } from "./operation.ts";

/** Operations of the mpegts group. */
export const mpegtsOperations = [
  operation({
    path: "/mpegts/startup",
    summary:
      "Open an MPEG-TS receiver (SRT or UDP) on a port of its own that publishes a local stream; with `uri` (srt://host:port?streamid=..&passphrase=..&latency=ms), pull from that SRT listener instead.",
    body: z.object({
      localStreamName: requiredString,
      transport: z.enum(["srt", "udp"]).meta({ examples: ["udp"] }),
      uri: plainString.optional(),
    }),
    response: mpegtsRecord,
    handle: ({ localStreamName, transport, uri }, { services }) =>
      services.mpegts.startup(localStreamName, transport, uri),
  }),
  operation({
    path: "/mpegts/find",
    summary: "List the MPEG-TS receivers whose fields equal the given values.",
    body: findFilter(mpegtsRecord),
    response: z.array(mpegtsRecord),
    handle: (filter, { services }) => filterRecords(services.mpegts.list(), filter),
  }),
  operation({
    path: "/mpegts/find_all",
    summary: "List every MPEG-TS receiver.",
    body: noParams,
    response: z.array(mpegtsRecord),
    handle: (_body, { services }) => services.mpegts.list(),
  }),
  operation({
    path: "/mpegts/terminate",
    summary: "Close an MPEG-TS receiver and end its stream.",
    body: z.object({ localStreamName: requiredString }),
    response: null,
    handle: ({ localStreamName }, { services }) => services.mpegts.terminate(localStreamName),
  }),
];
