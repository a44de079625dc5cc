/**
 * From a stream's tracks to the SDP media sections a receiver needs (the reverse of
 * sdp_track.ts): payload type, rtpmap, and the fmtp that carries the decoder configuration
 * (sprop-parameter-sets for H.264, sprop-vps/sps/pps for H.265, the AudioSpecificConfig of
 * AAC-hbr), with a control attribute per track.
 */
import { opusClockRate } from "../codecs/opus.ts";
import type { Track } from "../frame.ts";
import type { SdpAttribute, SdpMedia } from "../formats/sdp/sdp.ts";
import { aacHbrFmtp } from "./aac_packetizer.ts";

/** First dynamic payload type (RFC 3551 §6); track N gets `firstDynamicPayloadType + N`. */
export const firstDynamicPayloadType = 96;

/** The RTP payload type of a track. */
export function trackPayloadType(track: Track): number {
  if (track.codec === "PCMU") return 0;
  if (track.codec === "PCMA") return 8;
  return firstDynamicPayloadType + track.id;
}

/** The RTP clock of a track's payload format, in Hz (Opus is always 48 kHz, RFC 7587). */
export function trackRtpClock(track: Track): number {
  return track.codec === "OPUS" ? opusClockRate : track.clockRate;
}

function base64(bytes: Uint8Array): string {
  return btoa(String.fromCharCode(...bytes));
}

function hex(bytes: Uint8Array): string {
  return [...bytes].map((b) => b.toString(16).padStart(2, "0")).join("");
}

/**
 * The media section of a track, or undefined for a codec RTP does not carry here (MP3).
 * `control` is the value of its `a=control`.
 */
export function trackMedia(track: Track, control: string): SdpMedia | undefined {
  const pt = trackPayloadType(track);
  const attributes: SdpAttribute[] = [];
  const rtpmap = (encoding: string) =>
    attributes.push({ name: "rtpmap", value: `${pt} ${encoding}` });
  const fmtp = (params: string[]) =>
    attributes.push({ name: "fmtp", value: `${pt} ${params.join(";")}` });
  const config = track.config;
  switch (track.codec) {
    case "H264": {
      rtpmap("H264/90000");
      const params = ["packetization-mode=1"];
      if (config?.codec === "H264" && config.sps.length > 0) {
        params.push(`profile-level-id=${hex(config.sps[0].subarray(1, 4))}`);
        params.push(
          `sprop-parameter-sets=${[...config.sps, ...config.pps].map(base64).join(",")}`,
        );
      }
      fmtp(params);
      break;
    }
    case "H265":
      rtpmap("H265/90000");
      if (config?.codec === "H265") {
        fmtp([
          `sprop-vps=${config.vps.map(base64).join(",")}`,
          `sprop-sps=${config.sps.map(base64).join(",")}`,
          `sprop-pps=${config.pps.map(base64).join(",")}`,
        ]);
      }
      break;
    case "VP8":
      rtpmap("VP8/90000");
      break;
    case "AAC": {
      if (config?.codec !== "AAC") return undefined;
      rtpmap(`MPEG4-GENERIC/${track.clockRate}/${track.channels ?? 2}`);
      fmtp([aacHbrFmtp, `config=${hex(config.asc)}`]);
      break;
    }
    case "OPUS":
      rtpmap(`opus/${opusClockRate}/2`);
      if ((track.channels ?? 2) > 1) fmtp(["sprop-stereo=1"]);
      break;
    case "PCMU":
    case "PCMA":
      rtpmap(`${track.codec}/${track.clockRate}`);
      break;
    default:
      return undefined;
  }
  attributes.push({ name: "control", value: control });
  return {
    type: track.kind,
    port: 0,
    portCount: 1,
    protocol: "RTP/AVP",
    formats: [String(pt)],
    bandwidths: [],
    attributes,
  };
}
