/**
 * SDP offer/answer of a SIP call (RFC 3264): the offer we send in an INVITE (G.711, G.722 and
 * Opus audio with telephone-event, H.264 video when asked), what the far end's answer leaves
 * us with, and our answer to the far end's offer (incoming INVITE or re-INVITE). Hold is read
 * both ways: a direction attribute, or the older `c=0.0.0.0` (RFC 2543).
 */
import { BadRequestError, ParseError } from "../../../core/errors.ts";
import {
  attribute,
  fmtp,
  parseSdp,
  rtpmap,
  type Sdp,
  type SdpAttribute,
  type SdpMedia,
  writeSdp,
} from "../../formats/sdp/sdp.ts";

/** Media directions of RFC 3264 §5.1. */
export type MediaDirection = "sendrecv" | "sendonly" | "recvonly" | "inactive";

/** What our side of a call offers or answers with. */
export interface CallMediaOffer {
  /** Address the far end sends media to (the `c=` line). */
  address: string;
  audioPort: number;
  /** Offer H.264 video on this port when set. */
  videoPort?: number;
  /** Our direction (default sendrecv); sendonly puts the far end on hold. */
  direction?: MediaDirection;
  /** The `o=` session id (default: a random number). */
  sessionId?: string;
  /** The `o=` version; the caller makes it grow on each re-offer of a session (default 1). */
  sessionVersion?: number;
  /**
   * Put Opus first in the offer (default: PCMU, PCMA, G.722, then Opus, the order PBXs and
   * G.711 phones expect): for a call whose audio is Opus already, such as a browser's.
   */
  preferOpus?: boolean;
}

/** Audio codecs of a call. */
export type CallAudioCodec = "PCMU" | "PCMA" | "G722" | "OPUS";

/** The audio both sides agreed on. */
export interface NegotiatedAudio {
  codec: CallAudioCodec;
  payloadType: number;
  /** Payload type of telephone-event, when the far end takes RFC 4733 events. */
  telephoneEventPt?: number;
  /** Clock of that telephone-event, in Hz (8000 or, with Opus, often 48000). */
  telephoneEventClockRate?: number;
  /** Where the far end receives: RTP on `port`, RTCP on `rtcpPort` (default port + 1). */
  remote: { host: string; port: number; rtcpPort?: number };
  /** The far end's direction (sendonly: it holds us, recvonly: we hold it). */
  direction: MediaDirection;
}

/** The video both sides agreed on. */
export interface NegotiatedVideo {
  codec: "H264";
  payloadType: number;
  remote: NegotiatedAudio["remote"];
  direction: MediaDirection;
}

/** The media of a call after offer/answer. */
export interface NegotiatedMedia {
  audio?: NegotiatedAudio;
  video?: NegotiatedVideo;
}

/** Static payload types of G.711 and G.722 (RFC 3551). */
const pcmuPt = 0;
const pcmaPt = 8;
const g722Pt = 9;
/** Our dynamic payload types in offers. */
const offeredTelephoneEventPt = 101;
const offeredOpusPt = 111;
/** telephone-event at Opus's clock, as browsers offer it beside the 8 kHz one. */
const offeredOpusTelephoneEventPt = 110;
/** Opus as WebRTC speaks it (RFC 7587): 48 kHz clock, signalled stereo. */
const opusRtpmap = "opus/48000/2";
/** Opus fmtp: in-band FEC taken, packets from 10 ms. */
const opusFmtp = "minptime=10;useinbandfec=1";
/** Clock of G.711, G.722 (RFC 3551 §4.5.2) and the classic telephone-event, in Hz. */
const narrowbandClockRate = 8000;
/** Clock of Opus, in Hz. */
const opusClockRate = 48000;
const offeredH264Pt = 96;
/** DTMF events 0-15 plus flash (16), RFC 4733 §3.2. */
const telephoneEvents = "0-16";
/** Packet time of our audio, in milliseconds. */
const audioPtimeMs = 20;
/** H.264 we send and take: non-interleaved packetization, Constrained Baseline level 3.1. */
const h264Fmtp = "packetization-mode=1;profile-level-id=42e01f";
/** Highest UDP port. */
const maxPort = 65535;
const directions: readonly string[] = ["sendrecv", "sendonly", "recvonly", "inactive"];

function origin(o: CallMediaOffer): string {
  const id = o.sessionId ?? String(Math.floor(Math.random() * 1e12));
  return `- ${id} ${o.sessionVersion ?? 1} IN ${addressType(o.address)} ${o.address}`;
}

function addressType(address: string): string {
  return address.includes(":") ? "IP6" : "IP4";
}

function description(o: CallMediaOffer, media: SdpMedia[]): Sdp {
  return {
    version: 0,
    origin: origin(o),
    sessionName: "-",
    connection: `IN ${addressType(o.address)} ${o.address}`,
    timing: ["0 0"],
    bandwidths: [],
    other: [],
    attributes: [],
    media,
  };
}

function section(type: string, port: number, formats: string[], attributes: SdpAttribute[]) {
  return { type, port, portCount: 1, protocol: "RTP/AVP", formats, bandwidths: [], attributes };
}

/** The rtpmap (and fmtp) attributes of one of our audio codecs. */
function codecAttributes(pt: number, codec: CallAudioCodec): SdpAttribute[] {
  if (codec !== "OPUS") return [{ name: "rtpmap", value: `${pt} ${codec}/${narrowbandClockRate}` }];
  return [
    { name: "rtpmap", value: `${pt} ${opusRtpmap}` },
    { name: "fmtp", value: `${pt} ${opusFmtp}` },
  ];
}

function audioAttributes(
  codecs: { pt: number; codec: CallAudioCodec }[],
  events: { pt: number; clockRate: number }[],
  direction: MediaDirection,
): SdpAttribute[] {
  const attrs: SdpAttribute[] = codecs.flatMap((c) => codecAttributes(c.pt, c.codec));
  for (const { pt, clockRate } of events) {
    attrs.push({ name: "rtpmap", value: `${pt} telephone-event/${clockRate}` });
    attrs.push({ name: "fmtp", value: `${pt} ${telephoneEvents}` });
  }
  attrs.push({ name: "ptime", value: String(audioPtimeMs) }, { name: direction });
  return attrs;
}

function videoAttributes(pt: number, direction: MediaDirection): SdpAttribute[] {
  return [
    { name: "rtpmap", value: `${pt} H264/90000` },
    { name: "fmtp", value: `${pt} ${h264Fmtp}` },
    { name: direction },
  ];
}

/**
 * Our offer: PCMU (0), PCMA (8), G.722 (9), Opus (111; first with `preferOpus`) and
 * telephone-event at
 * 8 kHz (101) and 48 kHz (110) audio at 20 ms, and H.264 (96) when `videoPort` is set.
 */
export function buildCallOffer(o: CallMediaOffer): string {
  const direction = o.direction ?? "sendrecv";
  const narrowband = [
    { pt: pcmuPt, codec: "PCMU" as const },
    { pt: pcmaPt, codec: "PCMA" as const },
    { pt: g722Pt, codec: "G722" as const },
  ];
  const opus = { pt: offeredOpusPt, codec: "OPUS" as const };
  const codecs = o.preferOpus ? [opus, ...narrowband] : [...narrowband, opus];
  const events = [
    { pt: offeredTelephoneEventPt, clockRate: narrowbandClockRate },
    { pt: offeredOpusTelephoneEventPt, clockRate: opusClockRate },
  ];
  const media = [
    section(
      "audio",
      o.audioPort,
      [...codecs, ...events].map((c) => String(c.pt)),
      audioAttributes(codecs, events, direction),
    ),
  ];
  if (o.videoPort !== undefined) {
    media.push(
      section(
        "video",
        o.videoPort,
        [String(offeredH264Pt)],
        videoAttributes(offeredH264Pt, direction),
      ),
    );
  }
  return writeSdp(description(o, media));
}

function parse(text: string): Sdp {
  try {
    return parseSdp(text);
  } catch (err) {
    if (err instanceof ParseError) {
      throw new BadRequestError("sdp", `malformed SDP: ${err.message}`);
    }
    throw err;
  }
}

/** The encoding name of a format of a section (static types by number), upper-case. */
function encodingOf(m: SdpMedia, format: string): { name: string; clockRate: number } | undefined {
  if (!/^\d{1,3}$/.test(format)) return undefined;
  const pt = Number(format);
  const map = rtpmap(m, pt);
  if (map) return { name: map.encoding.toUpperCase(), clockRate: map.clockRate };
  if (pt === pcmuPt) return { name: "PCMU", clockRate: 8000 };
  if (pt === pcmaPt) return { name: "PCMA", clockRate: 8000 };
  if (pt === g722Pt) return { name: "G722", clockRate: 8000 };
  return undefined;
}

/** True for plain RTP profiles (no SRTP, which the call media does not speak). */
function plainRtp(m: SdpMedia): boolean {
  return m.protocol === "RTP/AVP" || m.protocol === "RTP/AVPF";
}

/** Where a section's far end receives, and its direction (`c=0.0.0.0` is a hold). */
function endpoint(
  sdp: Sdp,
  m: SdpMedia,
): { remote: NegotiatedAudio["remote"]; direction: MediaDirection } {
  const connection = m.connection ?? sdp.connection;
  const parts = connection?.split(" ") ?? [];
  if (parts.length < 3 || parts[0] !== "IN") {
    throw new BadRequestError("sdp", `SDP ${m.type} section without a usable c= line`);
  }
  const host = parts[2].split("/")[0];
  const flag = m.attributes.find((a) => directions.includes(a.name)) ??
    sdp.attributes.find((a) => directions.includes(a.name));
  let direction = (flag?.name ?? "sendrecv") as MediaDirection;
  if (host === "0.0.0.0" || host === "::") direction = withoutReceive(direction);
  if (m.port > maxPort) {
    throw new BadRequestError("sdp", `SDP ${m.type} port ${m.port} out of range`);
  }
  const remote: NegotiatedAudio["remote"] = { host, port: m.port };
  const rtcp = /^(\d{1,5})/.exec(attribute(m, "rtcp") ?? "");
  if (rtcp && Number(rtcp[1]) > 0 && Number(rtcp[1]) <= maxPort) remote.rtcpPort = Number(rtcp[1]);
  return { remote, direction };
}

/** A direction minus the far end's receiving. */
function withoutReceive(direction: MediaDirection): MediaDirection {
  return direction === "sendrecv" || direction === "sendonly" ? "sendonly" : "inactive";
}

/** The direction that answers `theirs` given what we want (`ours`), RFC 3264 §6.1. */
function answerDirection(theirs: MediaDirection, ours: MediaDirection): MediaDirection {
  const theySend = theirs === "sendrecv" || theirs === "sendonly";
  const theyReceive = theirs === "sendrecv" || theirs === "recvonly";
  const weSend = theyReceive && (ours === "sendrecv" || ours === "sendonly");
  const weReceive = theySend && (ours === "sendrecv" || ours === "recvonly");
  return weSend ? (weReceive ? "sendrecv" : "sendonly") : weReceive ? "recvonly" : "inactive";
}

interface AudioChoice {
  codec: CallAudioCodec;
  payloadType: number;
  telephoneEventPt?: number;
  telephoneEventClockRate?: number;
}

/** Our codec for an encoding of the far end's SDP, if we speak it. */
function callCodec(enc: { name: string; clockRate: number }): CallAudioCodec | undefined {
  const narrowband = enc.name === "PCMU" || enc.name === "PCMA" || enc.name === "G722";
  if (narrowband && enc.clockRate === narrowbandClockRate) {
    return enc.name as CallAudioCodec;
  }
  return enc.name === "OPUS" && enc.clockRate === opusClockRate ? "OPUS" : undefined;
}

/**
 * The first G.711, G.722 or Opus format of a section (its preference order) and its
 * telephone-event: the one at the codec's clock (RFC 4733 §2.1), else any.
 */
function chooseAudio(m: SdpMedia): AudioChoice | undefined {
  let choice: AudioChoice | undefined;
  const events: { pt: number; clockRate: number }[] = [];
  for (const format of m.formats) {
    const enc = encodingOf(m, format);
    if (!enc) continue;
    const codec = callCodec(enc);
    if (!choice && codec) choice = { codec, payloadType: Number(format) };
    if (enc.name === "TELEPHONE-EVENT") {
      events.push({ pt: Number(format), clockRate: enc.clockRate });
    }
  }
  if (!choice) return undefined;
  const clockRate = choice.codec === "OPUS" ? opusClockRate : narrowbandClockRate;
  const event = events.find((e) => e.clockRate === clockRate) ?? events[0];
  if (event) {
    choice.telephoneEventPt = event.pt;
    choice.telephoneEventClockRate = event.clockRate;
  }
  return choice;
}

/** The H.264 format of a section: packetization-mode 1 first, else any. */
function chooseH264(m: SdpMedia): number | undefined {
  let any: number | undefined;
  for (const format of m.formats) {
    const enc = encodingOf(m, format);
    if (enc?.name !== "H264") continue;
    const pt = Number(format);
    if (fmtp(m, pt).get("packetization-mode") === "1") return pt;
    any ??= pt;
  }
  return any;
}

/**
 * The media of the far end's answer to our offer. No accepted audio of ours is a
 * BadRequestError; a rejected section (port 0) is left out; `c=0.0.0.0` reads as a hold.
 */
export function negotiateAnswer(answerSdp: string): NegotiatedMedia {
  const sdp = parse(answerSdp);
  const result: NegotiatedMedia = {};
  for (const m of sdp.media) {
    if (m.port === 0 || !plainRtp(m)) continue;
    if (m.type === "audio" && !result.audio) {
      const choice = chooseAudio(m);
      if (choice) result.audio = { ...choice, ...endpoint(sdp, m) };
    } else if (m.type === "video" && !result.video) {
      const pt = chooseH264(m);
      if (pt !== undefined) result.video = { codec: "H264", payloadType: pt, ...endpoint(sdp, m) };
    }
  }
  if (!result.audio) {
    throw new BadRequestError("sdp", "the answer accepts no PCMU, PCMA, G.722 or Opus audio");
  }
  return result;
}

/**
 * Our answer to the far end's offer: the first of its G.711, G.722 and Opus codecs with its
 * telephone-event,
 * H.264 when it offers it and `o.videoPort` is set; every other section rejected with port 0.
 * Our direction answers theirs (their sendonly gets recvonly). No such audio in common is a
 * BadRequestError (a SIP 488 Not Acceptable Here).
 */
export function answerCallOffer(
  offerSdp: string,
  o: CallMediaOffer,
): { sdp: string; media: NegotiatedMedia } {
  const offer = parse(offerSdp);
  const ours = o.direction ?? "sendrecv";
  const media: NegotiatedMedia = {};
  const sections: SdpMedia[] = offer.media.map((m) => {
    const rejected = section(m.type, 0, m.formats.length ? m.formats : ["0"], []);
    rejected.protocol = m.protocol;
    if (m.port === 0 || !plainRtp(m)) return rejected;
    if (m.type === "audio" && !media.audio) {
      const choice = chooseAudio(m);
      if (!choice) return rejected;
      const far = endpoint(offer, m);
      media.audio = { ...choice, ...far };
      const formats = [choice.payloadType];
      if (choice.telephoneEventPt !== undefined) formats.push(choice.telephoneEventPt);
      const answer = section(
        "audio",
        o.audioPort,
        formats.map(String),
        audioAttributes(
          [{ pt: choice.payloadType, codec: choice.codec }],
          choice.telephoneEventPt === undefined ? [] : [{
            pt: choice.telephoneEventPt,
            clockRate: choice.telephoneEventClockRate ?? narrowbandClockRate,
          }],
          answerDirection(far.direction, ours),
        ),
      );
      answer.protocol = m.protocol;
      return answer;
    }
    if (m.type === "video" && !media.video && o.videoPort !== undefined) {
      const pt = chooseH264(m);
      if (pt === undefined) return rejected;
      const far = endpoint(offer, m);
      media.video = { codec: "H264", payloadType: pt, ...far };
      const answer = section(
        "video",
        o.videoPort,
        [String(pt)],
        videoAttributes(pt, answerDirection(far.direction, ours)),
      );
      answer.protocol = m.protocol;
      return answer;
    }
    return rejected;
  });
  if (!media.audio) {
    throw new BadRequestError("sdp", "no PCMU, PCMA, G.722 or Opus audio in common with the offer");
  }
  return { sdp: writeSdp(description(o, sections)), media };
}
