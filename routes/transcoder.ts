/** The `transcoder` and `transcoder2` groups. */
import { z } from "zod";
import {
  transcoder2Encoder,
  transcoder2Record,
  transcoderEncoder,
  transcoderRecord,
} from "../core/records.ts";
import { findFilter, noParams, operation, requiredString, uriWithScheme } from "./operation.ts";

const position = { x: z.int(), y: z.int() };

/** The five operations of one transcoder generation. */
function transcoderGroup(
  scheme: "transcoder" | "transcoder2",
  encoder: z.ZodObject,
  record: z.ZodObject,
) {
  const uri = uriWithScheme(scheme);
  return [
    operation({
      path: `/${scheme}/startup`,
      summary: "Transcode a stream into a new local stream.",
      body: z.object({
        uri,
        remoteStreamName: requiredString,
        localStreamName: requiredString,
        encoder,
      }),
      response: null,
    }),
    operation({
      path: `/${scheme}/find`,
      summary: "List the transcoders whose fields equal the given values.",
      body: findFilter(record),
      response: z.array(record),
    }),
    operation({
      path: `/${scheme}/find_all`,
      summary: "List every transcoder.",
      body: noParams,
      response: z.array(record),
    }),
    operation({
      path: `/${scheme}/terminate`,
      summary: "End a transcoder and its output stream.",
      body: z.object({ uri }),
      response: null,
    }),
    operation({
      path: `/${scheme}/set_watermark`,
      summary: "Draw an image over the transcoder's output.",
      body: z.object({ uri, watermark: requiredString, ...position }),
      response: null,
    }),
  ];
}

/** Operations of the transcoder and transcoder2 groups. */
export const transcoderOperations = [
  ...transcoderGroup("transcoder", transcoderEncoder, transcoderRecord),
  ...transcoderGroup("transcoder2", transcoder2Encoder, transcoder2Record),
];
