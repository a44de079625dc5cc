/** The `sfu` group: statistics of the SFU rooms of the SFU SDK. */
import { z } from "zod";
import { sfuStats } from "../core/records.ts";
import { operation, requiredString } from "./operation.ts";

/** Operations of the sfu group. */
export const sfuOperations = [
  operation({
    path: "/sfu/stats",
    summary:
      "Statistics of an SFU room: each participant's published tracks (codec, bitrate, resolution, fps, alive, measured from the RTP received; feedbackStats: NACK, PLI, FIR packets its subscribers sent, packets resent, PLIs sent to the publisher, sentREMB: the bitrate the publisher is told it may send, bit/s), the tracks it receives (source track id → forwarded layer, null without layers) and incomingFeedbackStats (source track id → the NACKs, PLIs, FIRs it sent, its latest receiver report's loss and jitter, remb: its latest bandwidth estimate in bit/s, 0 before one; transportCcFeedback: the transport-cc feedback packets it sent on the track's transport, transportCcEstimate: the bandwidth the server estimates from them in bit/s, 0 before one); 404 for an unknown room.",
    body: z.object({ roomName: requiredString }),
    response: sfuStats,
    handle: ({ roomName }, { services }) => services.sfu.stats(roomName),
  }),
];
