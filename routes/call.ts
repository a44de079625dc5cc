/** The `call` group: SIP calls, optionally bridged to RTMP. */
import { z } from "zod";
import { callRecord } from "../core/records.ts";
import { filterRecords } from "../core/filter.ts";
import { findFilter, noParams, operation, plainString, requiredString } from "./operation.ts";

/** `/call/startup` sends booleans as text; both forms are accepted. */
const textBoolean = z.union([z.boolean(), z.enum(["true", "false"])]).transform((v) =>
  v === true || v === "true"
);
/** `/call/startup` sends the port as text; both forms are accepted. */
const textPort = z.union([z.int().min(1).max(65535), z.string().regex(/^[0-9]{1,5}$/, "a port")])
  .transform((v) => Number(v)).refine((v) => v >= 1 && v <= 65535, "a port from 1 to 65535");
/** Optional text fields the SDK sends empty when unset. */
const optionalText = plainString.optional();

/** Operations of the call group. */
export const callOperations = [
  operation({
    path: "/call/startup",
    summary: "Place a SIP call, optionally bridged to an RTMP address.",
    body: z.object({
      callId: plainString.min(1).max(128).optional(),
      callee: requiredString,
      rtmpUrl: plainString.optional(),
      rtmpStream: optionalText,
      hasAudio: textBoolean.optional(),
      hasVideo: textBoolean.optional(),
      sipLogin: requiredString,
      sipAuthenticationName: optionalText,
      sipPassword: z.string().optional(),
      sipDomain: requiredString,
      sipOutboundProxy: optionalText,
      sipPort: textPort.optional(),
      appKey: optionalText,
      sipRegisterRequired: textBoolean.optional(),
      visibleName: optionalText,
    }),
    response: null,
    handle: async (body, { services }) => {
      await services.calls.startup({
        ...body,
        rtmpUrl: body.rtmpUrl || undefined,
        hasAudio: body.hasAudio ?? true,
        hasVideo: body.hasVideo ?? false,
      });
    },
  }),
  operation({
    path: "/call/find_all",
    summary: "List every call.",
    body: noParams,
    response: z.array(callRecord),
    handle: (_body, { services }) => services.calls.list(),
  }),
  operation({
    path: "/call/find",
    summary: "List the calls whose fields equal the given values.",
    body: findFilter(callRecord),
    response: z.array(callRecord),
    handle: (filter, { services }) => filterRecords(services.calls.list(), filter),
  }),
  operation({
    path: "/call/terminate",
    summary: "Hang up a call.",
    body: z.object({ callId: requiredString }),
    response: null,
    handle: async ({ callId }, { services }) => await services.calls.terminate(callId),
  }),
  operation({
    path: "/call/send_dtmf",
    summary: "Send DTMF digits in a call.",
    body: z.object({
      callId: requiredString,
      dtmf: z.string().regex(/^[0-9A-D*#]+$/, "digits 0-9, A-D, * or #").meta({
        examples: ["12#"],
      }),
      type: z.enum(["RFC2833", "INFO", "INFO_RELAY", "INBAND"]).optional(),
    }),
    response: null,
    handle: async ({ callId, dtmf, type }, { services }) =>
      await services.calls.get(callId).sendDtmf(dtmf, type ?? "RFC2833"),
  }),
  operation({
    path: "/call/inject_sound",
    summary: "Play a sound file of the media folder into a call.",
    body: z.object({ callId: requiredString, fileName: requiredString }),
    response: null,
    handle: async ({ callId, fileName }, { services }) =>
      await services.calls.injectSound(callId, fileName),
  }),
  operation({
    path: "/call/inject_stream/startup",
    summary: "Send a stream's media into a call in place of the caller's.",
    body: z.object({ callId: requiredString, streamName: requiredString }),
    response: null,
    handle: ({ callId, streamName }, { services }) =>
      services.calls.injectStream(callId, streamName),
  }),
  operation({
    path: "/call/inject_stream/terminate",
    summary: "Stop injecting a stream into a call.",
    body: z.object({ callId: requiredString }),
    response: null,
    handle: ({ callId }, { services }) => services.calls.stopInjecting(callId),
  }),
];
