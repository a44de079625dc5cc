/** The `stream` group: list, filter, end, snapshot and record streams; send stream events. */
import { Buffer } from "node:buffer";
import { z } from "zod";
import { ConflictError, NotFoundError } from "../core/errors.ts";
import { filterRecords } from "../core/filter.ts";
import { streamRecord } from "../core/records.ts";
import { takeSnapshot } from "../media/publishers/snapshot.ts";
import { deliverStreamEvent } from "../media/publishers/stream_events.ts";
import { Stream } from "../media/stream.ts";
import { findFilter, noParams, operation, requiredString } from "./operation.ts";
import { startRecordingOperation, stopRecordingOperation } from "./recorder.ts";

const streamFind = findFilter(streamRecord, {
  /** Extra parts of the records to include; "metrics" adds the metrics object. */
  display: z.array(z.enum(["metrics"])).optional(),
}).omit({ metrics: true });

/** Operations of the stream group. */
export const streamOperations = [
  operation({
    path: "/stream/find_all",
    summary: "List every stream.",
    body: noParams,
    response: z.array(streamRecord),
    handle: (_body, { services }) => services.streams.list().map((s) => s.record()),
  }),
  operation({
    path: "/stream/find",
    summary: "List the streams whose fields equal the given values.",
    body: streamFind,
    response: z.array(streamRecord),
    handle: ({ display, ...filter }, { services }) => {
      const metrics = display?.includes("metrics") ?? false;
      const records = services.streams.list().map((s) => s.record({ metrics }));
      return filterRecords(records, filter);
    },
  }),
  operation({
    path: "/stream/terminate",
    summary: "End a stream; its clients get the status with info 'Stopped by rest /terminate'.",
    body: z.object({ mediaSessionId: requiredString }),
    response: null,
    handle: async ({ mediaSessionId }, { services }) => {
      await services.streams.get(mediaSessionId).terminate("Stopped by rest /terminate");
    },
  }),
  operation({
    path: "/stream/snapshot",
    summary:
      "Take a PNG picture of a stream (its width and height); 409 when no keyframe arrives within 5 s.",
    body: z.object({ streamName: requiredString }),
    response: z.object({ data: z.string().describe("base64 PNG") }),
    handle: async ({ streamName }, { services }) => {
      const stream = services.streams.published(streamName);
      if (!stream) throw new NotFoundError(`stream ${streamName} not found`);
      if (!(stream instanceof Stream)) {
        throw new ConflictError(`stream ${streamName} carries no frames to take a picture of`);
      }
      const png = await takeSnapshot(stream, services.engine);
      return { data: Buffer.from(png).toString("base64") };
    },
  }),
  startRecordingOperation("/stream/startRecording"),
  stopRecordingOperation("/stream/stopRecording"),
  operation({
    path: "/stream/event/send",
    summary: "Send a data event to every Web SDK player of a stream; 409 when it has none.",
    body: z.object({ streamName: requiredString, payload: z.record(z.string(), z.unknown()) }),
    response: null,
    handle: ({ streamName, payload }, { services }) => {
      const stream = services.streams.published(streamName);
      if (!stream) throw new NotFoundError(`stream ${streamName} not found`);
      // Web SDK (WebRTC) players take stream events, whatever the stream came over; RTMP, HLS
      // and other readers have no way to get one.
      const delivered = stream instanceof Stream
        ? deliverStreamEvent(stream, services.streams.list(), "data", payload)
        : 0;
      if (delivered === 0) {
        throw new ConflictError(
          `stream ${streamName} has no player that takes events (only Web SDK players do)`,
        );
      }
    },
  }),
];
