/**
 * REMB (draft-alvestrand-rmcat-remb): the receiver's estimated maximum bitrate for the media
 * it gets on one transport, an RTCP payload-specific feedback (PT 206, FMT 15). Browsers send
 * it from their receive-side estimator; the server sends it to publishers as a bitrate cap.
 */
import type { RtcpPacket } from "werift";
import { ReceiverEstimatedMaxBitrate, RtcpPayloadSpecificFeedback } from "werift";

/** Largest mantissa of the REMB bitrate (18 bits). */
const maxMantissa = 0x3ffff;

/** A REMB from `senderSsrc` capping the media of `ssrcs` at `bps` bits per second. */
export function rembPacket(
  senderSsrc: number,
  bps: number,
  ssrcs: readonly number[],
): RtcpPayloadSpecificFeedback {
  let mantissa = Math.max(0, Math.floor(bps));
  let exp = 0;
  while (mantissa > maxMantissa) {
    mantissa >>>= 1;
    exp++;
  }
  return new RtcpPayloadSpecificFeedback({
    feedback: new ReceiverEstimatedMaxBitrate({
      senderSsrc,
      mediaSsrc: 0,
      ssrcNum: ssrcs.length,
      brExp: exp,
      brMantissa: mantissa,
      bitrate: BigInt(mantissa) << BigInt(exp),
      ssrcFeedbacks: [...ssrcs],
    }),
  });
}

/** What a REMB says: the bitrate in bits per second and the SSRCs it covers. */
export interface Remb {
  bps: number;
  ssrcs: readonly number[];
}

/** The REMB in `rtcp`, undefined when it is another packet. */
export function readRemb(rtcp: RtcpPacket): Remb | undefined {
  if (rtcp.type !== RtcpPayloadSpecificFeedback.type) return undefined;
  const feedback = (rtcp as RtcpPayloadSpecificFeedback).feedback;
  if (!(feedback instanceof ReceiverEstimatedMaxBitrate)) return undefined;
  return { bps: Number(feedback.bitrate), ssrcs: feedback.ssrcFeedbacks };
}
