/**
 * From an SDP media section to a Track and the depacketizer of its payload format: codec,
 * clock, and the decoder configuration the SDP carries (sprop-parameter-sets, config).
 */
import { ParseError } from "../../core/errors.ts";
import type { CodecConfig, Track } from "../frame.ts";
import { parseAsc } from "../codecs/aac.ts";
import { parseH264Sps } from "../codecs/h264.ts";
import { parseH265Sps } from "../codecs/h265.ts";
import { opusClockRate } from "../codecs/opus.ts";
import { fmtp, rtpmap, type SdpMedia } from "../formats/sdp/sdp.ts";
import { AacDepacketizer, auHeaderLayout } from "./aac_depacketizer.ts";
import type { Depacketizer } from "./depacketizer.ts";
import { FrameDepacketizer } from "./frame_depacketizer.ts";
import { H264Depacketizer } from "./h264_depacketizer.ts";
import { H265Depacketizer } from "./h265_depacketizer.ts";

/** Clock of G.711 (RFC 3551 static payload types 0 and 8), in Hz. */
const g711ClockRate = 8000;

/** A media section the server can receive. */
export interface SdpTrack {
  track: Track;
  payloadType: number;
  depacketizer: Depacketizer;
}

function base64Nals(list: string | undefined): Uint8Array[] {
  if (!list) return [];
  const nals: Uint8Array[] = [];
  for (const item of list.split(",")) {
    if (item === "") continue;
    let bin: string;
    try {
      bin = atob(item.trim());
    } catch {
      throw new ParseError("bad base64 in sprop parameter sets");
    }
    if (bin.length > 0) nals.push(Uint8Array.from(bin, (c) => c.charCodeAt(0)));
  }
  return nals;
}

function hexBytes(hex: string): Uint8Array {
  if (!/^([0-9a-fA-F]{2})+$/.test(hex)) throw new ParseError("bad hex config in fmtp");
  const out = new Uint8Array(hex.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = parseInt(hex.slice(2 * i, 2 * i + 2), 16);
  return out;
}

/** Fills width and height from the first SPS; a broken SPS leaves them for in-band ones. */
function sizeFromSps(track: Track, sps: Uint8Array | undefined, h265: boolean): void {
  if (!sps) return;
  try {
    const info = h265 ? parseH265Sps(sps) : parseH264Sps(sps);
    track.width = info.width;
    track.height = info.height;
  } catch (err) {
    if (!(err instanceof ParseError)) throw err;
  }
}

/**
 * The track of the first payload type of a section whose codec the server carries
 * (H.264, H.265, AAC, Opus, PCMU, PCMA), or undefined when it carries none of them.
 */
export function sdpTrack(media: SdpMedia, id: number): SdpTrack | undefined {
  for (const format of media.formats) {
    if (!/^\d{1,3}$/.test(format)) continue;
    const pt = Number(format);
    const map = rtpmap(media, pt);
    const encoding = map?.encoding.toUpperCase() ??
      (pt === 0 ? "PCMU" : pt === 8 ? "PCMA" : "");
    const params = fmtp(media, pt);
    if (encoding === "H264") {
      const sets = base64Nals(params.get("sprop-parameter-sets"));
      const sps = sets.filter((n) => (n[0] & 0x1f) === 7);
      const pps = sets.filter((n) => (n[0] & 0x1f) === 8);
      const track: Track = { id, kind: "video", codec: "H264", clockRate: map?.clockRate ?? 90000 };
      if (sps.length > 0 && pps.length > 0) track.config = { codec: "H264", sps, pps };
      sizeFromSps(track, sps[0], false);
      return { track, payloadType: pt, depacketizer: new H264Depacketizer(id) };
    }
    if (encoding === "H265") {
      const vps = base64Nals(params.get("sprop-vps"));
      const sps = base64Nals(params.get("sprop-sps"));
      const pps = base64Nals(params.get("sprop-pps"));
      const track: Track = { id, kind: "video", codec: "H265", clockRate: map?.clockRate ?? 90000 };
      if (vps.length && sps.length && pps.length) track.config = { codec: "H265", vps, sps, pps };
      sizeFromSps(track, sps[0], true);
      return { track, payloadType: pt, depacketizer: new H265Depacketizer(id) };
    }
    if (encoding === "MPEG4-GENERIC") {
      const config = params.get("config");
      if (!config) continue;
      const asc = hexBytes(config);
      const info = parseAsc(asc);
      const aacConfig: CodecConfig = { codec: "AAC", asc };
      const track: Track = {
        id,
        kind: "audio",
        codec: "AAC",
        clockRate: map?.clockRate ?? info.sampleRate,
        sampleRate: info.sampleRate,
        channels: info.channels || map?.channels || 2,
        config: aacConfig,
      };
      return {
        track,
        payloadType: pt,
        depacketizer: new AacDepacketizer(id, auHeaderLayout(params)),
      };
    }
    if (encoding === "OPUS") {
      const track: Track = {
        id,
        kind: "audio",
        codec: "OPUS",
        clockRate: opusClockRate,
        sampleRate: opusClockRate,
        channels: params.get("stereo") === "0" ? 1 : 2,
        config: { codec: "OPUS" },
      };
      return { track, payloadType: pt, depacketizer: new FrameDepacketizer(id, "OPUS") };
    }
    if (encoding === "PCMU" || encoding === "PCMA") {
      const clockRate = map?.clockRate ?? g711ClockRate;
      const track: Track = {
        id,
        kind: "audio",
        codec: encoding,
        clockRate,
        sampleRate: clockRate,
        channels: map?.channels ?? 1,
      };
      return { track, payloadType: pt, depacketizer: new FrameDepacketizer(id, encoding) };
    }
  }
  return undefined;
}
