/**
 * The codecs WebRTC publishers and players negotiate: H.264 (packetization-mode 1, preferred),
 * VP8 and Opus. A publisher's codec is picked from its offer; a player is offered exactly the
 * publisher's codec, since packets are forwarded as they came.
 */
import { RTCRtpCodecParameters } from "werift";
import type { AudioCodec, VideoCodec } from "../../frame.ts";
import { fmtpParameter, type SdpCodec, type SdpMedia } from "./sdp.ts";

/** RTCP feedback every video codec gets: NACK, PLI and FIR. */
const videoFeedback = [
  { type: "nack" },
  { type: "nack", parameter: "pli" },
  { type: "ccm", parameter: "fir" },
];

/** H.264 profile-level-ids in order of preference (constrained baseline first). */
const h264Profiles = ["42e01f", "42001f"];

/** A codec of a stream: what werift negotiates plus the name of the media plane. */
export interface NegotiatedCodec {
  kind: "audio" | "video";
  /** Media-plane name ("H264", "VP8", "OPUS"). */
  codec: VideoCodec | AudioCodec;
  /** werift's description, with the fmtp of the offer. */
  params: RTCRtpCodecParameters;
}

function isH264Mode1(c: SdpCodec): boolean {
  return c.name.toUpperCase() === "H264" && fmtpParameter(c.fmtp, "packetization-mode") === "1";
}

function h264Rank(c: SdpCodec): number {
  const profile = fmtpParameter(c.fmtp, "profile-level-id")?.toLowerCase() ?? "";
  const rank = h264Profiles.indexOf(profile);
  return rank < 0 ? h264Profiles.length : rank;
}

/** The codec a publisher's m-line will use, or undefined when it offers none we take. */
export function pickPublishCodec(media: SdpMedia): NegotiatedCodec | undefined {
  if (media.kind === "audio") {
    const opus = media.codecs.find((c) => c.name.toLowerCase() === "opus" && c.clockRate === 48000);
    return opus && toNegotiated("audio", "OPUS", opus, []);
  }
  const h264 = media.codecs.filter(isH264Mode1).sort((a, b) => h264Rank(a) - h264Rank(b))[0];
  if (h264) return toNegotiated("video", "H264", h264, videoFeedback);
  const vp8 = media.codecs.find((c) => c.name.toUpperCase() === "VP8");
  return vp8 && toNegotiated("video", "VP8", vp8, videoFeedback);
}

/**
 * The player's codec matching `source` (the publisher's), or undefined when the player's
 * m-line does not offer it (forwarding without conversion is then impossible).
 */
export function matchPlayCodec(
  media: SdpMedia,
  source: NegotiatedCodec,
): NegotiatedCodec | undefined {
  const name = source.params.name.toLowerCase();
  const candidates = media.codecs.filter((c) => c.name.toLowerCase() === name);
  if (source.codec !== "H264") {
    const feedback = source.kind === "video" ? videoFeedback : [];
    return candidates[0] && toNegotiated(source.kind, source.codec, candidates[0], feedback);
  }
  const profile = fmtpParameter(source.params.parameters ?? "", "profile-level-id")?.slice(0, 4);
  const match = candidates.filter(isH264Mode1).find((c) =>
    fmtpParameter(c.fmtp, "profile-level-id")?.slice(0, 4).toLowerCase() === profile?.toLowerCase()
  );
  return match && toNegotiated("video", "H264", match, videoFeedback);
}

function toNegotiated(
  kind: "audio" | "video",
  codec: VideoCodec | AudioCodec,
  offered: SdpCodec,
  rtcpFeedback: { type: string; parameter?: string }[],
): NegotiatedCodec {
  const params = new RTCRtpCodecParameters({
    mimeType: `${kind}/${offered.name}`,
    clockRate: offered.clockRate,
    channels: offered.channels,
    payloadType: offered.payloadType,
    rtcpFeedback,
    parameters: offered.fmtp || undefined,
  });
  return { kind, codec, params };
}
