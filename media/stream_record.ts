/**
 * The Stream record of the management API and what a registry needs of a stream: the media
 * bus (stream.ts) and its providers implement these without knowing any registry. The
 * registries of core/ re-export them.
 */
import { z } from "zod";

const nullableString = z.string().nullable();
const muteState = z.object({ muted: z.boolean() });

/** Keys of the `metrics` object of a Stream when `display` has "metrics". */
export const streamMetricKeys = [
  "VIDEO_SYNC",
  "VIDEO_K_FRAMES",
  "AUDIO_SYNC",
  "VIDEO_NACK",
  "AUDIO_RATE",
  "AUDIO_LOST",
  "VIDEO_LOST",
  "VIDEO_CODEC",
  "VIDEO_B_FRAMES",
  "VIDEO_PLI",
  "AUDIO_CODEC",
  "VIDEO_RATE",
  "VIDEO_WIDTH",
  "VIDEO_GOP_SIZE",
  "VIDEO_HEIGHT",
  "VIDEO_FPS",
  "VIDEO_P_FRAMES",
] as const;

/** A media session: a published or played stream. */
export const streamRecord = z.object({
  custom: z.record(z.string(), z.unknown()),
  nodeId: nullableString,
  appKey: z.string(),
  sessionId: z.string(),
  mediaSessionId: z.string(),
  remoteMediaElementId: nullableString,
  name: z.string(),
  published: z.boolean(),
  hasVideo: z.boolean(),
  hasAudio: z.boolean(),
  status: z.string(),
  sdp: z.string(),
  info: nullableString,
  record: z.boolean(),
  recordName: nullableString,
  width: z.int(),
  height: z.int(),
  bitrate: z.int(),
  minBitrate: z.int(),
  maxBitrate: z.int(),
  quality: z.int(),
  rtmpUrl: nullableString,
  mediaProvider: z.string(),
  audioCodec: z.string(),
  videoCodec: z.string(),
  history: z.boolean(),
  gop: z.int(),
  fps: z.int(),
  audioBitrate: z.int(),
  codecImpl: z.string(),
  transport: z.string(),
  cvoExtension: z.boolean(),
  createDate: z.int(),
  mediaType: z.string(),
  parentMediaSessionId: z.string().optional(),
  audioState: muteState,
  videoState: muteState,
  metrics: z.partialRecord(z.enum(streamMetricKeys), z.int()).optional(),
});
/** A Stream record. */
export type StreamRecord = z.infer<typeof streamRecord>;

/** What a stream registry needs of a stream. */
export interface RegisteredStream {
  /** Identifies the stream for terminate, recording, mixer and recorder operations. */
  readonly mediaSessionId: string;
  /** The stream name. */
  readonly name: string;
  /** True for a published (provided) stream, false for a played one. */
  readonly published: boolean;
  /** The Stream record of the API; `metrics` filled only when asked for. */
  record(options?: { metrics?: boolean }): StreamRecord;
  /** Ends the stream; `info` is the reason its clients are told. */
  terminate(info: string): Promise<void>;
}

/** What providers and players need of the server's streams: add, remove, find by name. */
export interface StreamDirectory {
  /** Adds a stream; a duplicate id, or a second publisher of a name, is a ConflictError. */
  add(stream: RegisteredStream): void;
  /** Removes a stream if present. */
  remove(stream: RegisteredStream): void;
  /** The published stream of this name, if any. */
  published(name: string): RegisteredStream | undefined;
}

/**
 * What viewers' protocols need of the server's streams: besides the directory, the stream a
 * viewer plays opened through the server's gate (the CDN's access check, or a stream pulled
 * from another node), and the viewer followed so a revoked key can stop it.
 */
export interface ViewerDirectory extends StreamDirectory {
  /** The stream a viewer presenting access key `key` plays under `name`; undefined: none. */
  open(name: string, key?: string): Promise<RegisteredStream | undefined>;
  /** Follows a viewer; `stop` ends it with the reason. The returned function ends the watch. */
  watchViewer(name: string, key: string | undefined, stop: (info: string) => void): () => void;
}
