/** The `push` and `pull/rtmp` groups: streams to and from RTMP servers. */
import { z } from "zod";
import { filterRecords } from "../core/filter.ts";
import { pushRecord, rtmpPullRecord } from "../core/records.ts";
import { redactUri } from "../core/redact.ts";
import {
  findFilter,
  noParams,
  operation,
  plainString,
  requiredString,
  uriWithScheme,
} from "./operation.ts";

const rtmpUri = uriWithScheme("rtmp", "rtmps");
const byMediaSession = z.object({ mediaSessionId: requiredString });

/** Operations of the push and pull/rtmp groups. */
export const rtmpOperations = [
  operation({
    path: "/push/startup",
    summary: "Publish a local stream to an RTMP address.",
    body: z.object({
      streamName: requiredString,
      rtmpUrl: rtmpUri,
      rtmpTransponderFullUrl: z.boolean().optional(),
      options: z.record(z.string(), z.unknown()).optional(),
    }),
    response: pushRecord,
    handle: (body, { services }) =>
      services.pushes.startup(
        body.streamName,
        body.rtmpUrl,
        body.rtmpTransponderFullUrl ?? false,
        services.engine,
      ),
  }),
  operation({
    path: "/push/find",
    summary: "List the pushes whose fields equal the given values.",
    body: findFilter(pushRecord),
    response: z.array(pushRecord),
    // Records show redacted URLs; a filter with the full URL matches them once redacted too.
    handle: (body, { services }) =>
      filterRecords(
        services.pushes.list(),
        body.rtmpUrl === undefined ? body : { ...body, rtmpUrl: redactUri(body.rtmpUrl) },
      ),
  }),
  operation({
    path: "/push/find_all",
    summary: "List every push.",
    body: noParams,
    response: z.array(pushRecord),
    handle: (_body, { services }) => services.pushes.list(),
  }),
  operation({
    path: "/push/terminate",
    summary: "Stop a push.",
    body: byMediaSession,
    response: null,
    handle: (body, { services }) => services.pushes.terminate(body.mediaSessionId),
  }),
  operation({
    path: "/push/mute",
    summary: "Send silence in place of the pushed audio.",
    body: byMediaSession,
    response: null,
    handle: (body, { services }) => {
      services.pushes.get(body.mediaSessionId).mute("/push/mute");
    },
  }),
  operation({
    path: "/push/unmute",
    summary: "Send the stream's audio again.",
    body: byMediaSession,
    response: null,
    handle: (body, { services }) => {
      services.pushes.get(body.mediaSessionId).unmute();
    },
  }),
  operation({
    path: "/push/sound_on",
    summary: "Mix a sound file of the media folder into the pushed audio.",
    body: z.object({
      mediaSessionId: requiredString,
      soundFile: requiredString,
      loop: z.boolean().optional(),
    }),
    response: null,
    handle: (body, { services }) =>
      services.pushes.soundOn(
        body.mediaSessionId,
        body.soundFile,
        body.loop ?? false,
        services.engine,
      ),
  }),
  operation({
    path: "/push/sound_off",
    summary: "Stop mixing the sound file.",
    body: byMediaSession,
    response: null,
    handle: (body, { services }) => services.pushes.soundOff(body.mediaSessionId),
  }),
  operation({
    path: "/pull/rtmp/pull",
    group: "pull/rtmp",
    summary: "Play a remote RTMP stream into a local stream.",
    body: z.object({ uri: rtmpUri, localStreamName: plainString.optional() }),
    response: null,
    handle: (body, { services }) => services.rtmpPulls.pull(body.uri, body.localStreamName),
  }),
  operation({
    path: "/pull/rtmp/find_all",
    group: "pull/rtmp",
    summary: "List every RTMP pull.",
    body: noParams,
    response: z.array(rtmpPullRecord),
    handle: (_body, { services }) => services.rtmpPulls.list(),
  }),
  operation({
    path: "/pull/rtmp/terminate",
    group: "pull/rtmp",
    summary: "Stop an RTMP pull and end its stream.",
    body: z.object({ uri: rtmpUri }),
    response: null,
    handle: (body, { services }) => services.rtmpPulls.terminate(body.uri),
  }),
];
