/**
 * What the server reads from a Web SDK offer before handing it to werift: the media
 * sections and the codecs each one offers, so an offer without a usable codec is refused
 * with a clear status rather than answered with an empty m-line.
 */
import { ParseError } from "../../../core/errors.ts";

/** One codec of an m-line (`a=rtpmap` plus its `a=fmtp`). */
export interface SdpCodec {
  payloadType: number;
  /** Encoding name as written, e.g. "H264", "VP8", "opus". */
  name: string;
  clockRate: number;
  channels?: number;
  /** The `a=fmtp` parameters, "" when absent. */
  fmtp: string;
}

/** One audio or video m-line. */
export interface SdpMedia {
  kind: "audio" | "video";
  /** `sendonly`, `recvonly`, `sendrecv` or `inactive` (sendrecv when absent). */
  direction: string;
  codecs: SdpCodec[];
  /**
   * The section's bandwidth limit (`b=AS`, kbit/s, or `b=TIAS`, bit/s, the lower of the two),
   * in kbit/s; absent without one.
   */
  bandwidthKbps?: number;
}

const directions = new Set(["sendonly", "recvonly", "sendrecv", "inactive"]);

/** The audio and video m-lines of an offer; anything that is not a usable SDP is a ParseError. */
export function parseOfferMedia(sdp: unknown): SdpMedia[] {
  if (typeof sdp !== "string" || !sdp.startsWith("v=0")) {
    throw new ParseError("the offer is not an SDP (no v=0 line)");
  }
  const media: SdpMedia[] = [];
  let current: SdpMedia | undefined;
  let formats: number[] = [];
  const fmtp = new Map<number, string>();
  const finish = () => {
    if (!current) return;
    for (const codec of current.codecs) codec.fmtp = fmtp.get(codec.payloadType) ?? "";
    current.codecs = current.codecs.filter((c) => formats.includes(c.payloadType));
    media.push(current);
    fmtp.clear();
  };
  for (const raw of sdp.split(/\r?\n/)) {
    const line = raw.trim();
    if (line.startsWith("m=")) {
      finish();
      const [kind, port, proto, ...fmts] = line.slice(2).split(" ");
      if (port === undefined || proto === undefined) throw new ParseError(`bad m-line: ${line}`);
      current = kind === "audio" || kind === "video"
        ? { kind, direction: "sendrecv", codecs: [] }
        : undefined;
      formats = fmts.map(Number);
    } else if (current && line.startsWith("a=rtpmap:")) {
      const match = /^a=rtpmap:(\d+) ([^/\s]+)\/(\d+)(?:\/(\d+))?/.exec(line);
      if (!match) throw new ParseError(`bad rtpmap: ${line}`);
      current.codecs.push({
        payloadType: Number(match[1]),
        name: match[2],
        clockRate: Number(match[3]),
        channels: match[4] === undefined ? undefined : Number(match[4]),
        fmtp: "",
      });
    } else if (current && line.startsWith("a=fmtp:")) {
      const space = line.indexOf(" ");
      const pt = Number(line.slice(7, space));
      // The SDK appends a second fmtp line for Opus options; both apply.
      const previous = fmtp.get(pt);
      const value = line.slice(space + 1);
      fmtp.set(pt, previous ? `${previous};${value}` : value);
    } else if (current && line.startsWith("b=")) {
      const match = /^b=(AS|TIAS):(\d+)$/.exec(line);
      const kbps = match && (match[1] === "AS" ? Number(match[2]) : Number(match[2]) / 1000);
      if (kbps) current.bandwidthKbps = Math.min(current.bandwidthKbps ?? Infinity, kbps);
    } else if (current && directions.has(line.slice(2))) {
      current.direction = line.slice(2);
    }
  }
  finish();
  if (media.length === 0) throw new ParseError("the offer has no audio or video m-line");
  return media;
}

/** The value of one fmtp parameter, or undefined. */
export function fmtpParameter(fmtp: string, name: string): string | undefined {
  for (const part of fmtp.split(";")) {
    const [key, value] = part.split("=");
    if (key.trim() === name) return value?.trim();
  }
  return undefined;
}
