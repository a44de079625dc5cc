/**
 * SDP (RFC 4566): a session description with its media sections, parsed and written. Only
 * the structure is interpreted; attribute values stay text, with helpers for the ones RTP
 * needs (rtpmap, fmtp, control), so RTSP and WebRTC offers both fit.
 */
import { ParseError } from "../../../core/errors.ts";

/** Largest SDP accepted, in bytes of text. */
export const maxSdpBytes = 64 * 1024;
/** Most media sections accepted in one description. */
export const maxSdpMediaSections = 64;

/** An `a=` line: `name` alone (a flag) or `name:value`. */
export interface SdpAttribute {
  name: string;
  /** Undefined for a flag attribute such as `a=sendonly`. */
  value?: string;
}

/** An `m=` section with its lines. */
export interface SdpMedia {
  /** audio, video, application... */
  type: string;
  port: number;
  /** Number of ports (`m=video 5000/2 ...`), 1 when not given. */
  portCount: number;
  /** RTP/AVP, UDP/TLS/RTP/SAVPF... */
  protocol: string;
  /** Payload types (or other formats), as text. */
  formats: string[];
  /** The `c=` line value, if the section has one. */
  connection?: string;
  /** `b=` lines, e.g. "AS:256". */
  bandwidths: string[];
  attributes: SdpAttribute[];
}

/** A session description. */
export interface Sdp {
  version: number;
  /** The `o=` value. */
  origin: string;
  /** The `s=` value. */
  sessionName: string;
  /** The `c=` line value at session level, if any. */
  connection?: string;
  /** The `t=` values. */
  timing: string[];
  bandwidths: string[];
  /** Session-level lines this parser keeps as they are (i=, u=, e=, p=, r=, z=, k=). */
  other: { type: string; value: string }[];
  attributes: SdpAttribute[];
  media: SdpMedia[];
}

/** Parses SDP text (CRLF or LF line ends). Broken structure is a ParseError. */
export function parseSdp(text: string): Sdp {
  if (text.length > maxSdpBytes) throw new ParseError("SDP too large");
  const sdp: Sdp = {
    version: -1,
    origin: "",
    sessionName: "",
    timing: [],
    bandwidths: [],
    other: [],
    attributes: [],
    media: [],
  };
  let media: SdpMedia | undefined;
  for (const raw of text.split("\n")) {
    const line = raw.endsWith("\r") ? raw.slice(0, -1) : raw;
    if (line === "") continue;
    if (line.length < 2 || line[1] !== "=") {
      throw new ParseError(`malformed SDP line: ${line.slice(0, 64)}`);
    }
    const type = line[0];
    const value = line.slice(2);
    if (type === "m") {
      if (sdp.media.length >= maxSdpMediaSections) throw new ParseError("too many SDP media");
      media = parseMediaLine(value);
      sdp.media.push(media);
      continue;
    }
    if (type === "a") {
      (media ?? sdp).attributes.push(parseAttribute(value));
      continue;
    }
    if (type === "c") {
      if (media) media.connection = value;
      else sdp.connection = value;
      continue;
    }
    if (type === "b") {
      (media ?? sdp).bandwidths.push(value);
      continue;
    }
    if (media) continue; // i= and k= of a media section carry nothing we use
    if (type === "v") {
      if (!/^\d+$/.test(value)) throw new ParseError("bad SDP version");
      sdp.version = Number(value);
    } else if (type === "o") sdp.origin = value;
    else if (type === "s") sdp.sessionName = value;
    else if (type === "t") sdp.timing.push(value);
    else if (/^[a-z]$/.test(type)) sdp.other.push({ type, value });
    else throw new ParseError(`unknown SDP line type ${type}`);
  }
  if (sdp.version !== 0) throw new ParseError("SDP without v=0");
  return sdp;
}

function parseMediaLine(value: string): SdpMedia {
  const parts = value.split(" ").filter((p) => p !== "");
  if (parts.length < 3) throw new ParseError(`malformed SDP m= line: ${value.slice(0, 64)}`);
  const m = /^(\d{1,5})(?:\/(\d{1,5}))?$/.exec(parts[1]);
  if (!m) throw new ParseError(`bad port in SDP m= line: ${parts[1].slice(0, 16)}`);
  return {
    type: parts[0],
    port: Number(m[1]),
    portCount: m[2] !== undefined ? Number(m[2]) : 1,
    protocol: parts[2],
    formats: parts.slice(3),
    bandwidths: [],
    attributes: [],
  };
}

function parseAttribute(value: string): SdpAttribute {
  const colon = value.indexOf(":");
  if (colon === 0) throw new ParseError("SDP attribute without a name");
  return colon < 0
    ? { name: value }
    : { name: value.slice(0, colon), value: value.slice(colon + 1) };
}

/** The SDP text of a description (CRLF line ends). */
export function writeSdp(sdp: Sdp): string {
  const lines = [`v=${sdp.version}`, `o=${sdp.origin}`, `s=${sdp.sessionName}`];
  const early = sdp.other.filter((o) => "iuep".includes(o.type));
  for (const o of early) lines.push(`${o.type}=${o.value}`);
  if (sdp.connection !== undefined) lines.push(`c=${sdp.connection}`);
  for (const b of sdp.bandwidths) lines.push(`b=${b}`);
  for (const t of sdp.timing.length ? sdp.timing : ["0 0"]) lines.push(`t=${t}`);
  for (const o of sdp.other) if (!"iuep".includes(o.type)) lines.push(`${o.type}=${o.value}`);
  for (const a of sdp.attributes) lines.push(formatAttribute(a));
  for (const m of sdp.media) {
    const port = m.portCount > 1 ? `${m.port}/${m.portCount}` : `${m.port}`;
    lines.push(`m=${[m.type, port, m.protocol, ...m.formats].join(" ")}`);
    if (m.connection !== undefined) lines.push(`c=${m.connection}`);
    for (const b of m.bandwidths) lines.push(`b=${b}`);
    for (const a of m.attributes) lines.push(formatAttribute(a));
  }
  return lines.join("\r\n") + "\r\n";
}

function formatAttribute(a: SdpAttribute): string {
  return a.value === undefined ? `a=${a.name}` : `a=${a.name}:${a.value}`;
}

/** The value of the first attribute `name` of a section (or session), if any. */
export function attribute(owner: { attributes: SdpAttribute[] }, name: string): string | undefined {
  return owner.attributes.find((a) => a.name === name)?.value;
}

/** What an `a=rtpmap` line says about a payload type. */
export interface RtpMap {
  payloadType: number;
  /** Encoding name as written (compare case-insensitively). */
  encoding: string;
  clockRate: number;
  /** Encoding parameters: the channel count for audio. */
  channels?: number;
}

/** The rtpmap of payload type `pt` in a section, if it has one. */
export function rtpmap(media: SdpMedia, pt: number): RtpMap | undefined {
  for (const a of media.attributes) {
    if (a.name !== "rtpmap" || a.value === undefined) continue;
    const m = /^(\d{1,3})\s+([^/\s]+)\/(\d{1,9})(?:\/(\d{1,3}))?/.exec(a.value);
    if (!m || Number(m[1]) !== pt) continue;
    return {
      payloadType: pt,
      encoding: m[2],
      clockRate: Number(m[3]),
      channels: m[4] !== undefined ? Number(m[4]) : undefined,
    };
  }
  return undefined;
}

/** The fmtp parameters of payload type `pt` (names lower-case), empty when none. */
export function fmtp(media: SdpMedia, pt: number): Map<string, string> {
  const params = new Map<string, string>();
  for (const a of media.attributes) {
    if (a.name !== "fmtp" || a.value === undefined) continue;
    const space = a.value.indexOf(" ");
    if (space < 0 || Number(a.value.slice(0, space)) !== pt) continue;
    for (const part of a.value.slice(space + 1).split(";")) {
      const eq = part.indexOf("=");
      if (eq < 0) continue;
      params.set(part.slice(0, eq).trim().toLowerCase(), part.slice(eq + 1).trim());
    }
  }
  return params;
}
