/** The `transcoder` and `transcoder2` groups. */
import { z } from "zod";
import { filterRecords } from "../core/filter.ts";
import {
  transcoder2Encoder,
  transcoder2Record,
  transcoderEncoder,
  transcoderRecord,
} from "../core/records.ts";
import type { EncoderRequest } from "../core/transcoder_registry.ts";
import {
  findFilter,
  noParams,
  operation,
  plainString,
  requiredString,
  uriWithScheme,
} from "./operation.ts";

const position = { x: z.int(), y: z.int() };

/** The five operations of one transcoder generation. */
function transcoderGroup(
  scheme: "transcoder" | "transcoder2",
  encoder: z.ZodType<EncoderRequest>,
  record: z.ZodObject,
) {
  const uri = uriWithScheme(scheme);
  return [
    operation({
      path: `/${scheme}/startup`,
      summary: "Transcode a stream into a new local stream.",
      body: z.object({
        uri,
        remoteStreamName: requiredString.meta({ examples: ["stream1"] }),
        localStreamName: requiredString.meta({ examples: ["stream1-transcoded"] }),
        encoder,
      }),
      response: null,
      handle: (body, { services }) => services.transcoders.startup(scheme, body),
    }),
    operation({
      path: `/${scheme}/find`,
      summary: "List the transcoders whose fields equal the given values.",
      body: findFilter(record),
      response: z.array(record),
      handle: (filter, { services }) =>
        filterRecords(services.transcoders.list(scheme as "transcoder"), filter),
    }),
    operation({
      path: `/${scheme}/find_all`,
      summary: "List every transcoder.",
      body: noParams,
      response: z.array(record),
      handle: (_body, { services }) => services.transcoders.list(scheme as "transcoder"),
    }),
    operation({
      path: `/${scheme}/terminate`,
      summary: "End a transcoder and its output stream.",
      body: z.object({ uri }),
      response: null,
      handle: ({ uri }, { services }) => services.transcoders.terminate(scheme, uri),
    }),
    operation({
      path: `/${scheme}/set_watermark`,
      summary: "Draw an image over the transcoder's output.",
      body: z.object({ uri, watermark: plainString, ...position }),
      response: null,
      handle: ({ uri, watermark, x, y }, { services }) =>
        services.transcoders.setWatermark(scheme, uri, watermark, x, y),
    }),
  ];
}

/** Operations of the transcoder and transcoder2 groups. */
export const transcoderOperations = [
  ...transcoderGroup("transcoder", transcoderEncoder, transcoderRecord),
  ...transcoderGroup("transcoder2", transcoder2Encoder, transcoder2Record),
];
