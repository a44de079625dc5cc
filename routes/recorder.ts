/** The `recorder` and `multipleRecorder` groups. */
import { z } from "zod";
import { multiRecorderRecord, recorderRecord, recordingConfig } from "../core/records.ts";
import { noParams, operation, requiredString, uriWithScheme } from "./operation.ts";

const multiUri = uriWithScheme("multi-recorder");

/** The operation at `path` that starts recording a stream (`/recorder/startup` and its alias). */
export function startRecordingOperation(path: string) {
  return operation({
    path,
    summary: "Start recording a stream to a file.",
    body: z.object({ mediaSessionId: requiredString, config: recordingConfig.optional() }),
    response: null,
    handle: ({ mediaSessionId, config }, { services }) =>
      services.recorders.startup(mediaSessionId, config),
  });
}

/** The operation at `path` that stops recording a stream (`/recorder/terminate` and its alias). */
export function stopRecordingOperation(path: string) {
  return operation({
    path,
    summary: "Stop recording a stream; the file gets its final name.",
    body: z.object({ mediaSessionId: requiredString }),
    response: null,
    handle: ({ mediaSessionId }, { services }) => services.recorders.terminate(mediaSessionId),
  });
}

/** Operations of the recorder and multipleRecorder groups. */
export const recorderOperations = [
  startRecordingOperation("/recorder/startup"),
  stopRecordingOperation("/recorder/terminate"),
  operation({
    path: "/recorder/find_all",
    summary: "List every recorder.",
    body: noParams,
    response: z.array(recorderRecord),
    handle: (_body, { services }) => services.recorders.list(),
  }),
  operation({
    path: "/multipleRecorder/startup",
    summary: "Create a recorder of several streams into one file.",
    body: z.object({ uri: multiUri }),
    response: null,
    handle: ({ uri }, { services }) => services.recorders.multiStartup(uri),
  }),
  operation({
    path: "/multipleRecorder/add",
    summary: "Add a stream to a multi-recorder.",
    body: z.object({ uri: multiUri, mediaSessionId: requiredString }),
    response: null,
    handle: ({ uri, mediaSessionId }, { services }) =>
      services.recorders.multiAdd(uri, mediaSessionId),
  }),
  operation({
    path: "/multipleRecorder/remove",
    summary: "Remove a stream from a multi-recorder.",
    body: z.object({ uri: multiUri, mediaSessionId: requiredString }),
    response: null,
    handle: ({ uri, mediaSessionId }, { services }) =>
      services.recorders.multiRemove(uri, mediaSessionId),
  }),
  operation({
    path: "/multipleRecorder/find_all",
    summary: "List every multi-recorder.",
    body: noParams,
    response: z.array(multiRecorderRecord),
    handle: (_body, { services }) => services.recorders.multiList(),
  }),
  operation({
    path: "/multipleRecorder/terminate",
    summary: "Stop a multi-recorder and close its file.",
    body: z.object({ uri: multiUri }),
    response: null,
    handle: ({ uri }, { services }) => services.recorders.multiTerminate(uri),
  }),
];
