/** Every operation of the management API, in contract order. */
import { callOperations } from "./call.ts";
import { cdnOperations } from "./cdn.ts";
import { hlsOperations } from "./hls.ts";
import { mixerOperations } from "./mixer.ts";
import { mpegtsOperations } from "./mpegts.ts";
import type { Operation } from "./operation.ts";
import { pullOperations } from "./pull.ts";
import { recorderOperations } from "./recorder.ts";
import { rtmpOperations } from "./rtmp.ts";
import { rtspOperations } from "./rtsp.ts";
import { sessionOperations } from "./session.ts";
import { sfuOperations } from "./sfu.ts";
import { streamOperations } from "./stream.ts";
import { transcoderOperations } from "./transcoder.ts";
import { vodOperations } from "./vod.ts";

/** The operations served under /rest-api. */
export const operations: readonly Operation[] = [
  ...callOperations,
  ...rtspOperations,
  ...streamOperations,
  ...sessionOperations,
  ...rtmpOperations,
  ...pullOperations,
  ...mixerOperations,
  ...recorderOperations,
  ...transcoderOperations,
  ...vodOperations,
  ...hlsOperations,
  ...mpegtsOperations,
  ...sfuOperations,
  ...cdnOperations,
] as Operation[];
