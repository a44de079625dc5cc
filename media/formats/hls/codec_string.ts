/**
 * RFC 6381 `CODECS` strings (as HLS master playlists and MSE want them) from codec
 * configurations: `avc1.PPCCLL`, `hvc1.<profile>.<compat>.<tier><level>.<constraints>`
 * (ISO 14496-15 Annex E), `mp4a.40.<object type>`, `opus`.
 */

import type { CodecConfig } from "../../frame.ts";
import { parseAsc } from "../../codecs/aac.ts";
import { parseH265Sps } from "../../codecs/h265.ts";

function hex2(n: number): string {
  return n.toString(16).padStart(2, "0");
}

/** `avc1.PPCCLL` from an H.264 SPS NAL unit (profile, constraint flags, level bytes). */
export function avcCodecString(sps: Uint8Array): string {
  return `avc1.${hex2(sps[1])}${hex2(sps[2])}${hex2(sps[3])}`;
}

/** `hvc1.…` from an H.265 SPS NAL unit. */
export function hevcCodecString(sps: Uint8Array): string {
  const info = parseH265Sps(sps);
  const space = ["", "A", "B", "C"][info.profileSpace];
  // The compatibility flags are written in reverse bit order, in hex without leading zeros.
  let reversed = 0;
  for (let i = 0; i < 32; i++) reversed = (reversed << 1) | ((info.compatibilityFlags >>> i) & 1);
  const constraints = [...info.constraintFlags];
  while (constraints.length > 0 && constraints[constraints.length - 1] === 0) constraints.pop();
  return [
    `hvc1`,
    `${space}${info.profileIdc}`,
    (reversed >>> 0).toString(16),
    `${info.tierFlag ? "H" : "L"}${info.levelIdc}`,
    ...constraints.map((b) => b.toString(16).toUpperCase()),
  ].join(".");
}

/** The RFC 6381 codec of a track's configuration, or undefined when it does not say. */
export function codecString(config: CodecConfig | undefined): string | undefined {
  switch (config?.codec) {
    case "H264":
      return config.sps.length ? avcCodecString(config.sps[0]) : undefined;
    case "H265":
      return config.sps.length ? hevcCodecString(config.sps[0]) : undefined;
    case "AAC": {
      // HE-AAC (5) and HE-AACv2 (29) signalled explicitly name themselves, not their core.
      const signalled = config.asc[0] >> 3;
      if (signalled === 5 || signalled === 29) return `mp4a.40.${signalled}`;
      return `mp4a.40.${parseAsc(config.asc).objectType}`;
    }
    case "OPUS":
      return "opus";
    default:
      return undefined;
  }
}
