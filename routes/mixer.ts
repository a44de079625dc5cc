/** The `mixer` group: compose several streams into one. */
import { z } from "zod";
import { mixerLoadExample } from "../core/mixer_load.ts";
import { mixerRecord } from "../core/records.ts";
import { noParams, operation, plainString, requiredString, uriWithScheme } from "./operation.ts";

const mixerUri = uriWithScheme("mixer");
const position = { x: z.int(), y: z.int() };
const testStart = z.object({
  feedingStreams: z.array(z.string()).min(1),
  mixerCount: z.int().min(1),
  streamsInMixer: z.int().min(1),
  intervalInSeconds: z.int().min(1),
});

/** Operations of the mixer group. */
export const mixerOperations = [
  operation({
    path: "/mixer/startup",
    summary: "Create a mixer whose output is a local stream.",
    body: z.object({
      uri: mixerUri,
      localStreamName: requiredString.optional(),
      hasVideo: z.boolean().optional(),
      hasAudio: z.boolean().optional(),
      watermark: plainString.optional(),
      background: z.string().optional(),
      mixerLayoutClass: z.string().optional(),
      mixerLayoutDir: plainString.optional(),
    }),
    response: null,
    handle: async (body, { services }) => void await services.mixers.startup(body),
  }),
  operation({
    path: "/mixer/add",
    summary: "Add a stream to a mixer.",
    body: z.object({
      uri: mixerUri,
      remoteStreamName: requiredString,
      audioLevel: z.int().min(0).optional(),
      videoMuted: z.boolean().optional(),
    }),
    response: null,
    handle: ({ uri, remoteStreamName, ...input }, { services }) =>
      services.mixers.add(uri, remoteStreamName, input),
  }),
  operation({
    path: "/mixer/remove",
    summary: "Remove a stream from a mixer.",
    body: z.object({ uri: mixerUri, remoteStreamName: requiredString }),
    response: null,
    handle: ({ uri, remoteStreamName }, { services }) =>
      services.mixers.remove(uri, remoteStreamName),
  }),
  operation({
    path: "/mixer/find_all",
    summary: "List every mixer.",
    body: noParams,
    response: z.array(mixerRecord),
    handle: (_body, { services }) => services.mixers.list(),
  }),
  operation({
    path: "/mixer/terminate",
    summary: "End a mixer and its output stream.",
    body: z.object({ uri: mixerUri }),
    response: null,
    handle: ({ uri }, { services }) => services.mixers.terminate(uri),
  }),
  operation({
    path: "/mixer/setAudioVideo",
    summary: "Set audio level and video mute of the inputs whose names match a regular expression.",
    body: z.object({
      uri: mixerUri,
      streams: z.string().refine((s) => {
        try {
          new RegExp(s);
          return true;
        } catch {
          return false;
        }
      }, "must be a valid regular expression"),
      audioLevel: z.int().min(0).optional(),
      videoMuted: z.boolean().optional(),
    }),
    response: null,
    handle: ({ uri, streams, ...input }, { services }) =>
      services.mixers.setAudioVideo(uri, streams, input),
  }),
  operation({
    path: "/mixer/set_body_watermark",
    summary: "Draw an image over the mixer's output; an empty name removes it.",
    body: z.object({ uri: mixerUri, watermark: plainString, ...position }),
    response: null,
    handle: ({ uri, watermark, x, y }, { services }) =>
      services.mixers.setBodyWatermark(uri, watermark, x, y),
  }),
  operation({
    path: "/mixer/set_stream_watermark",
    summary: "Draw an image over one input of a mixer; an empty name removes it.",
    body: z.object({
      uri: mixerUri,
      watermark: plainString,
      mediaSessionId: requiredString,
      ...position,
    }),
    response: null,
    handle: ({ uri, mediaSessionId, watermark, x, y }, { services }) =>
      services.mixers.setStreamWatermark(uri, mediaSessionId, watermark, x, y),
  }),
  operation({
    path: "/mixer/set_parameter",
    summary: "Change the layout folder of a mixer on the fly.",
    body: z.object({ uri: mixerUri, mixerLayoutDir: plainString }),
    response: null,
    handle: ({ uri, mixerLayoutDir }, { services }) =>
      services.mixers.setLayoutDir(uri, mixerLayoutDir),
  }),
  operation({
    path: "/mixer/test/start",
    summary:
      "Start a load test: mixerCount mixers (mixer://mixer-test-<n>), one every intervalInSeconds, each fed streamsInMixer of feedingStreams.",
    body: testStart,
    response: null,
    handle: (body, { services }) => services.mixers.load.start(body),
  }),
  operation({
    path: "/mixer/test/stop",
    summary: "Stop the mixer load test and end the mixers it started.",
    body: noParams,
    response: null,
    handle: (_body, { services }) => services.mixers.load.stop(),
  }),
  operation({
    path: "/mixer/test/get_start_example",
    summary: "An example body of /mixer/test/start.",
    body: noParams,
    response: testStart,
    handle: () => mixerLoadExample,
  }),
];
