/**
 * The records the management API returns, as zod schemas: the one source for response
 * types, `find` filters and the OpenAPI document. Field names and types follow the
 * contract (shared/reference/management-api.md, "Resources and their fields").
 */
import { z } from "zod";
import { streamRecord } from "../media/stream_record.ts";

export { streamMetricKeys, type StreamRecord, streamRecord } from "../media/stream_record.ts";

/**
 * A string without control characters (NUL, line breaks, escapes): every field that becomes
 * a file name, a path or a URI, so such input is a 400 naming the field rather than an fs
 * error (a 500) or a forged log line.
 */
export const plainString = z.string().regex(
  // deno-lint-ignore no-control-regex
  /^[^\u0000-\u001f\u007f]*$/,
  "must not contain control characters",
);

const nullableString = z.string().nullable();
const clientInfo = z.object({
  architecture: z.string(),
  bitness: z.string(),
  brands: z.array(z.object({ brand: z.string(), version: z.string() })),
  fullVersionList: z.array(z.object({ brand: z.string(), version: z.string() })),
  mobile: z.boolean(),
  platform: z.string(),
  platformVersion: z.string(),
}).partial();

/** A client session of the Web SDK. */
export const connectionRecord = z.object({
  custom: z.looseObject({ clientInfo: clientInfo.optional() }),
  appKey: z.string(),
  sessionId: z.string(),
  origin: z.string(),
  sipRegisterRequired: z.boolean(),
  sipLogin: z.string(),
  sipPort: z.int(),
  width: z.int(),
  height: z.int(),
  supportedResolutions: z.string(),
  useDTLS: z.boolean(),
  useWsTunnel: z.boolean(),
  useWsTunnelPacketization2: z.boolean(),
  useBase64BinaryEncoding: z.boolean(),
  keepAlive: z.boolean(),
  msePacketizationVersion: z.int(),
  mediaProviders: z.array(z.string()),
  authToken: z.string(),
  clientVersion: z.string(),
  clientOSVersion: z.string(),
  clientBrowserVersion: z.string(),
});
/** A Connection record. */
export type ConnectionRecord = z.infer<typeof connectionRecord>;

/** A SIP call. */
export const callRecord = z.object({
  custom: z.record(z.string(), z.unknown()),
  nodeId: nullableString,
  appKey: nullableString,
  sessionId: nullableString,
  callId: z.string(),
  parentCallId: nullableString,
  incoming: z.boolean(),
  status: z.string(),
  sipStatus: z.int().nullable(),
  rtmpUrl: nullableString,
  rtmpStream: nullableString,
  rtmpStreamStatus: nullableString,
  caller: z.string(),
  callee: z.string(),
  hasAudio: z.boolean(),
  hasVideo: z.boolean(),
  sdp: nullableString,
  visibleName: z.string(),
  inviteParameters: z.unknown(),
  mediaProvider: z.string(),
  sipMessageRaw: nullableString,
  isMsrp: z.boolean(),
  target: z.unknown(),
  holdForTransfer: z.boolean(),
});
/** A Call record. */
export type CallRecord = z.infer<typeof callRecord>;

/** An RTSP pull. */
export const rtspPullRecord = z.object({
  uri: plainString,
  toStream: z.string(),
  status: z.string(),
});
/** An RTSP pull record. */
export type RtspPullRecord = z.infer<typeof rtspPullRecord>;

/** An RTMP re-publication of a local stream. */
export const pushRecord = z.object({
  mediaSessionId: z.string(),
  streamName: plainString,
  rtmpUrl: plainString,
});
/** A Push record. */
export type PushRecord = z.infer<typeof pushRecord>;

/** Fields shared by the records of locally processed streams (VOD, mixer, transcoder, ...). */
const processedStream = {
  localMediaSessionId: z.string(),
  localStreamName: plainString,
  uri: plainString,
  status: z.string(),
  hasAudio: z.boolean(),
  hasVideo: z.boolean(),
  record: z.boolean(),
};

/** An RTMP pull into a local stream. */
export const rtmpPullRecord = z.object(processedStream);
/** An RTMP pull record. */
export type RtmpPullRecord = z.infer<typeof rtmpPullRecord>;

/** A pull of a stream from another server over WebSocket. */
export const remotePullRecord = z.object({
  localMediaSessionId: z.string(),
  remoteMediaSessionId: nullableString,
  localStreamName: plainString,
  remoteStreamName: plainString,
  uri: plainString,
  status: z.string(),
});
/** A remote-server pull record. */
export type RemotePullRecord = z.infer<typeof remotePullRecord>;

/** A mixer. */
export const mixerRecord = z.object({
  ...processedStream,
  mediaSessions: z.array(z.object({
    localMediaSessionId: z.string(),
    audioLevel: z.int(),
    videoMuted: z.boolean(),
    localStreamName: z.string(),
  })),
});
/** A Mixer record. */
export type MixerRecord = z.infer<typeof mixerRecord>;

/** Encoder settings of a transcoder (first generation). */
export const transcoderEncoder = z.object({
  width: z.int().min(0),
  height: z.int().min(0),
  keyFrameInterval: z.int().min(0),
  fps: z.int().min(0),
  watermark: plainString.optional(),
});

/** Encoder settings of a transcoder2. */
export const transcoder2Encoder = z.object({
  width: z.int().min(0),
  height: z.int().min(0),
  keyFrameInterval: z.int().min(0),
  fps: z.int().min(0),
  bitrate: z.int().min(0),
  audioRate: z.int().min(0),
  audioBitrate: z.int().min(0),
  audioCodec: z.string(),
  videoCodec: z.string(),
  videoRate: z.int().min(0),
}).partial();

/** A transcoder. */
export const transcoderRecord = z.object({
  ...processedStream,
  remoteStreamName: z.string(),
  encoder: transcoderEncoder,
  /** Video frames the transcoder dropped because it could not keep up. */
  droppedFrames: z.int().min(0).optional(),
});
/** A Transcoder record. */
export type TranscoderRecord = z.infer<typeof transcoderRecord>;

/** A transcoder2. */
export const transcoder2Record = z.object({
  ...processedStream,
  remoteStreamName: z.string(),
  encoder: transcoder2Encoder,
  /** Video frames the transcoder dropped because it could not keep up. */
  droppedFrames: z.int().min(0).optional(),
});
/** A Transcoder2 record. */
export type Transcoder2Record = z.infer<typeof transcoder2Record>;

/** A file played as a live stream. */
export const vodRecord = z.object(processedStream);
/** A VOD record. */
export type VodRecord = z.infer<typeof vodRecord>;

/** An MPEG-TS receiver (SRT or UDP). */
export const mpegtsRecord = z.object({
  ...processedStream,
  cdn: z.boolean(),
  transport: z.string(),
  timeout: z.int(),
  maxTimestampDiff: z.int(),
  allowedList: z.array(z.string()),
});
/** An MPEG-TS record. */
export type MpegtsRecord = z.infer<typeof mpegtsRecord>;

/** A recorder of one stream. */
export const recorderRecord = z.object({ fileName: plainString, mediaSessionId: z.string() });
/** A Recorder record. */
export type RecorderRecord = z.infer<typeof recorderRecord>;

/** A recorder of several streams into one file. */
export const multiRecorderRecord = z.object({
  mediaSessionsId: z.array(z.string()),
  uri: plainString,
  fileName: plainString,
});
/** A multi-recorder record. */
export type MultiRecorderRecord = z.infer<typeof multiRecorderRecord>;

/** An HLS output. */
export const hlsRecord = z.object({
  id: z.string(),
  streamName: z.string(),
  status: z.string(),
  waitingSize: z.int(),
  profiles: z.array(z.string()),
  subscribers: z.int(),
  playlist: z.string(),
  createdDate: z.int(),
  logs: z.array(z.unknown()),
});
/** An HLS record. */
export type HlsRecord = z.infer<typeof hlsRecord>;

/** Details of one HLS profile. */
export const hlsProfileDetails = z.object({
  name: z.string(),
  stream: streamRecord,
  keyFrameReceived: z.boolean(),
  videoProfile: z.object({
    type: z.string(),
    width: z.int(),
    height: z.int(),
    fps: z.int(),
    bitrate: z.int(),
    codec: z.string(),
    quality: z.int(),
    audioGroupId: z.string(),
  }),
  metrics: z.object({
    minFPS: z.number(),
    avgFPS: z.number(),
    maxFPS: z.number(),
    countGaps: z.int(),
    resolutionChanges: z.int(),
    queueSize: z.int(),
    startPts: z.int(),
    currentPts: z.int(),
  }),
  subscribers: z.int(),
});

/** A viewer of an HLS output. */
export const hlsSubscriber = z.object({
  id: z.string(),
  ip: z.string(),
  port: z.int(),
  userAgent: z.string(),
  active: z.boolean(),
  metrics: z.object({
    profileTime: z.record(z.string(), z.int()),
    requestsNumber: z.int(),
    requestsStatuses: z.record(z.string(), z.int()),
    profileSwitches: z.int(),
    maxResponseTime: z.int(),
    minResponseTime: z.int(),
    avgResponseTime: z.number(),
  }),
});

const sfuFeedback = z.object({
  receivedNACK: z.int(),
  receivedPLI: z.int(),
  receivedFIR: z.int(),
  retransmitted: z.int(),
  sentPLI: z.int(),
  /** The bitrate the publisher was last told (REMB) it may send, in bit/s; 0 when none. */
  sentREMB: z.int(),
});

const sfuTrack = z.object({
  id: z.string(),
  codec: z.string(),
  bitrate: z.int(),
  alive: z.boolean(),
  type: z.enum(["AUDIO", "VIDEO"]),
  sampleRate: z.int().optional(),
  channels: z.int().optional(),
  width: z.int().optional(),
  height: z.int().optional(),
  fps: z.int().optional(),
  /** RTCP about the track: NACK, PLI, FIR packets its subscribers sent, resends, PLIs sent. */
  feedbackStats: sfuFeedback.optional(),
});

/** Statistics of an SFU room. */
export const sfuStats = z.object({
  roomName: z.string(),
  participants: z.array(z.object({
    nickName: z.string(),
    outgoingTracks: z.array(
      sfuTrack.or(z.object({
        id: z.string(),
        composite: z.literal(true),
        tracks: z.record(z.string(), sfuTrack),
        feedbackStats: sfuFeedback.optional(),
      })),
    ),
    incomingTracks: z.record(z.string(), z.string().nullable()),
    /**
     * By source track id: the RTCP the participant sent about it (NACK, PLI, FIR packets; of
     * its latest receiver report the fraction lost 0-1, packets lost and jitter in RTP units;
     * its latest bandwidth estimate (REMB) in bit/s, 0 before one; the transport-cc feedback
     * packets it sent on the track's transport, and the estimate the server derived from
     * them in bit/s, 0 before one).
     */
    incomingFeedbackStats: z.record(
      z.string(),
      z.object({
        receivedNACK: z.int(),
        receivedPLI: z.int(),
        receivedFIR: z.int(),
        fractionLost: z.number(),
        packetsLost: z.int(),
        jitter: z.int(),
        remb: z.int(),
        transportCcFeedback: z.int(),
        transportCcEstimate: z.int(),
      }),
    ).optional(),
  })),
});

/** A node of the CDN. */
export const cdnNode = z.object({
  id: z.string(),
  globalState: z.string(),
  processingState: z.string(),
  role: z.string(),
  /** Server version of the node. */
  version: z.string().optional(),
  /** Groups of the node. */
  groups: z.array(z.string()).optional(),
  /** Load the node announces (streams, players, transcodes, load average per core). */
  load: z.record(z.string(), z.number()).optional(),
  /** Relays this node pulls from that node (absent for this node itself). */
  inbound: z.int().optional(),
  /** Relays this node serves to that node (absent for this node itself). */
  outbound: z.int().optional(),
});

/** A CDN transcoding profile. */
export const cdnProfile = z.object({
  audio: z.object({
    type: z.literal("audio").optional(),
    bitrate: z.int().min(0).optional(),
    channels: z.int().min(1).max(8).optional(),
    rate: z.int().min(1).optional(),
    codec: z.string().optional(),
  }).optional(),
  video: z.object({
    type: z.literal("video").optional(),
    bitrate: z.int().min(0).optional(),
    fps: z.int().min(0).optional(),
    gop: z.int().min(0).optional(),
    height: z.int().min(0).optional(),
    quality: z.int().min(0).optional(),
    width: z.int().min(0).optional(),
    codec: z.string().optional(),
    codecImpl: z.string().optional(),
    preset: z.string().optional(),
  }).optional(),
});

/** Recording settings of `startRecording` and `/recorder/startup`. */
export const recordingConfig = z.object({
  /** File name with placeholders {streamName}, {startTime}, {endTime}, {mediaSessionId}. */
  fileTemplate: plainString.min(1).optional(),
  /** Size at which a new file starts, e.g. "20M" (K, M or G). */
  rotation: z.string().regex(/^[1-9][0-9]*[KMG]$/, "a size like 20M (K, M or G)")
    .meta({ examples: ["20M"] }).optional(),
});
