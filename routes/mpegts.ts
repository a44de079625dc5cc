/** The `mpegts` and `sfu` groups. */
import { z } from "zod";
import { mpegtsRecord, sfuStats } from "../core/records.ts";
import { findFilter, noParams, operation, requiredString } from "./operation.ts";

/** Operations of the mpegts and sfu groups. */
export const mpegtsOperations = [
  operation({
    path: "/mpegts/startup",
    summary: "Open an MPEG-TS receiver (SRT) that publishes a local stream.",
    body: z.object({ localStreamName: requiredString, transport: z.enum(["srt", "udp"]) }),
    response: mpegtsRecord,
  }),
  operation({
    path: "/mpegts/find",
    summary: "List the MPEG-TS receivers whose fields equal the given values.",
    body: findFilter(mpegtsRecord),
    response: z.array(mpegtsRecord),
  }),
  operation({
    path: "/mpegts/find_all",
    summary: "List every MPEG-TS receiver.",
    body: noParams,
    response: z.array(mpegtsRecord),
  }),
  operation({
    path: "/mpegts/terminate",
    summary: "Close an MPEG-TS receiver and end its stream.",
    body: z.object({ localStreamName: requiredString }),
    response: null,
  }),
  operation({
    path: "/sfu/stats",
    summary: "Statistics of an SFU room.",
    body: z.object({ roomName: requiredString }),
    response: sfuStats,
  }),
];
