/** The `call` group: SIP calls, optionally bridged to RTMP. */
import { z } from "zod";
import { callRecord } from "../core/records.ts";
import { findFilter, noParams, operation, plainString, requiredString } from "./operation.ts";

/** `/call/startup` sends booleans as text; both forms are accepted. */
const textBoolean = z.union([z.boolean(), z.enum(["true", "false"])]);
/** `/call/startup` sends the port as text; both forms are accepted. */
const textPort = z.union([z.int().min(1).max(65535), z.string().regex(/^[0-9]{1,5}$/, "a port")]);

/** Operations of the call group. */
export const callOperations = [
  operation({
    path: "/call/startup",
    summary: "Place a SIP call, optionally bridged to an RTMP address.",
    body: z.object({
      callId: z.string().optional(),
      callee: requiredString,
      rtmpUrl: plainString.optional(),
      rtmpStream: z.string().optional(),
      hasAudio: textBoolean.optional(),
      hasVideo: textBoolean.optional(),
      sipLogin: requiredString,
      sipAuthenticationName: z.string().optional(),
      sipPassword: z.string().optional(),
      sipDomain: requiredString,
      sipOutboundProxy: z.string().optional(),
      sipPort: textPort.optional(),
      appKey: z.string().optional(),
      sipRegisterRequired: textBoolean.optional(),
      visibleName: z.string().optional(),
    }),
    response: null,
  }),
  operation({
    path: "/call/find_all",
    summary: "List every call.",
    body: noParams,
    response: z.array(callRecord),
  }),
  operation({
    path: "/call/find",
    summary: "List the calls whose fields equal the given values.",
    body: findFilter(callRecord),
    response: z.array(callRecord),
  }),
  operation({
    path: "/call/terminate",
    summary: "Hang up a call.",
    body: z.object({ callId: requiredString }),
    response: null,
  }),
  operation({
    path: "/call/send_dtmf",
    summary: "Send DTMF digits in a call.",
    body: z.object({
      callId: requiredString,
      dtmf: z.string().regex(/^[0-9A-D*#]+$/, "digits 0-9, A-D, * or #").meta({
        examples: ["12#"],
      }),
      type: z.enum(["RFC2833", "INFO", "INFO_RELAY"]).optional(),
    }),
    response: null,
  }),
  operation({
    path: "/call/inject_sound",
    summary: "Play a sound file of the media folder into a call.",
    body: z.object({ callId: requiredString, fileName: requiredString }),
    response: null,
  }),
  operation({
    path: "/call/inject_stream/startup",
    summary: "Send a stream's media into a call in place of the caller's.",
    body: z.object({ callId: requiredString, streamName: requiredString }),
    response: null,
  }),
  operation({
    path: "/call/inject_stream/terminate",
    summary: "Stop injecting a stream into a call.",
    body: z.object({ callId: requiredString }),
    response: null,
  }),
];
