/**
 * The codecs WebRTC publishers and players negotiate: H.264 (packetization-mode 1, preferred),
 * VP8 and Opus. A publisher's codec is picked from its offer; a player of a WebRTC publisher
 * is offered exactly the publisher's codec, since packets are forwarded as they came. A player
 * of any other stream gets the stream's video codec and, for audio, the stream's codec when
 * the player takes it (Opus, G.711) or Opus converted by the codec engine.
 */
import { RTCRtpCodecParameters } from "werift";
import type { AudioCodec, Track, VideoCodec } from "../../frame.ts";
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

/** A player's codec for one track of a stream, and the conversion it needs, if any. */
export interface PlayCodec {
  codec: NegotiatedCodec;
  /** Set when the track's audio must be converted to Opus first. */
  convertToOpus: boolean;
}

/** Audio codecs that pass to a WebRTC player as they are, when its offer has them. */
const passThroughAudio = new Set<string>(["OPUS", "PCMU", "PCMA"]);
/** Audio codecs the codec engine converts to Opus. */
const convertibleToOpus = new Set<string>(["AAC", "PCMU", "PCMA", "G722"]);

/**
 * The codec of a player's m-line for a stream's `track` (packets made from frames), or
 * undefined when the player can take the track neither as it is nor converted.
 */
export function matchFramePlayCodec(media: SdpMedia, track: Track): PlayCodec | undefined {
  if (track.kind === "video") {
    if (track.codec === "H264") {
      // Any profile: the parameter sets travel in-band, and browsers decode what they get.
      const h264 = media.codecs.filter(isH264Mode1).sort((a, b) => h264Rank(a) - h264Rank(b))[0];
      return h264 &&
        { codec: toNegotiated("video", "H264", h264, videoFeedback), convertToOpus: false };
    }
    const same = media.codecs.find((c) => c.name.toUpperCase() === track.codec);
    return same && {
      codec: toNegotiated("video", track.codec, same, videoFeedback),
      convertToOpus: false,
    };
  }
  if (passThroughAudio.has(track.codec)) {
    const same = media.codecs.find((c) =>
      c.name.toUpperCase() === track.codec && c.clockRate === track.clockRate
    );
    if (same) return { codec: toNegotiated("audio", track.codec, same, []), convertToOpus: false };
  }
  if (!convertibleToOpus.has(track.codec)) return undefined;
  const opus = media.codecs.find((c) => c.name.toLowerCase() === "opus" && c.clockRate === 48000);
  return opus && { codec: toNegotiated("audio", "OPUS", opus, []), convertToOpus: true };
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

/** Payload types of the server's own offer (an incoming SIP call), as Chrome numbers them. */
const offerPayloadTypes = { opus: 111, h264: 102 } as const;

/**
 * The codecs of the server's offer to a browser (an incoming SIP call): Opus, and H.264
 * (packetization-mode 1, constrained baseline) when `video`.
 */
export function serverOfferCodecs(video: boolean): NegotiatedCodec[] {
  const codecs = [toNegotiated("audio", "OPUS", {
    name: "opus",
    clockRate: 48000,
    channels: 2,
    payloadType: offerPayloadTypes.opus,
    fmtp: "minptime=10;useinbandfec=1",
  }, [])];
  if (video) {
    codecs.push(toNegotiated("video", "H264", {
      name: "H264",
      clockRate: 90000,
      payloadType: offerPayloadTypes.h264,
      fmtp: `level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=${h264Profiles[0]}`,
    }, videoFeedback));
  }
  return codecs;
}

/** H.264 profile-level-ids a receiving offer lists, with their payload types. */
const receiveH264Profiles = [
  { profile: "42e01f", payloadType: 102 },
  { profile: "42001f", payloadType: 104 },
  { profile: "4d001f", payloadType: 106 },
  { profile: "64001f", payloadType: 108 },
] as const;
/** Payload type of VP8 in a receiving offer, as Chrome numbers it. */
const receiveVp8PayloadType = 96;

/**
 * The codecs of the server's offer to receive a stream from another server (a remote pull):
 * Opus, and H.264 (packetization-mode 1, the common profiles) or VP8, so the remote can send
 * its publisher's video as it is; the answer says which one it sends.
 */
export function receiveOfferCodecs(): NegotiatedCodec[] {
  const [opus] = serverOfferCodecs(false);
  const h264 = receiveH264Profiles.map(({ profile, payloadType }) =>
    toNegotiated("video", "H264", {
      name: "H264",
      clockRate: 90000,
      payloadType,
      fmtp: `level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=${profile}`,
    }, videoFeedback)
  );
  const vp8 = toNegotiated("video", "VP8", {
    name: "VP8",
    clockRate: 90000,
    payloadType: receiveVp8PayloadType,
    fmtp: "",
  }, videoFeedback);
  return [...h264, vp8, opus];
}
