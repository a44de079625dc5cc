/**
 * H.265 bitstream helpers (ISO 23008-2): NAL unit types, SPS fields needed by containers,
 * keyframe detection and the hvcC decoder configuration record (ISO 14496-15 §8.3.3).
 */

import { ParseError, TruncatedError } from "../../core/errors.ts";
import { BitReader } from "./bitreader.ts";
import { removeEmulationPrevention, splitLengthPrefixed } from "./nalu.ts";

/** H.265 NAL unit types used by the media plane. */
export const H265NalType = {
  /** First IRAP type (BLA_W_LP); IRAP pictures are types 16..23. */
  irapFirst: 16,
  idrWRadl: 19,
  idrNLp: 20,
  cra: 21,
  irapLast: 23,
  vps: 32,
  sps: 33,
  pps: 34,
  aud: 35,
  prefixSei: 39,
} as const;

/** Type of an H.265 NAL unit (bits 1..6 of its first header byte). */
export function h265NalType(nal: Uint8Array): number {
  return (nal[0] >> 1) & 0x3f;
}

/** The general profile/tier/level of an SPS, as hvcC repeats it. */
export interface H265ProfileTierLevel {
  profileSpace: number;
  tierFlag: number;
  profileIdc: number;
  /** general_profile_compatibility_flags, 32 bits. */
  compatibilityFlags: number;
  /** The 48 general constraint indicator bits, as 6 bytes. */
  constraintFlags: Uint8Array;
  levelIdc: number;
}

/** What containers need from an H.265 sequence parameter set. */
export interface H265Sps extends H265ProfileTierLevel {
  maxSubLayers: number;
  temporalIdNesting: number;
  chromaFormatIdc: number;
  bitDepthLuma: number;
  bitDepthChroma: number;
  /** Displayed width in pixels, after the conformance window. */
  width: number;
  /** Displayed height in pixels, after the conformance window. */
  height: number;
  /** sps_max_num_reorder_pics of the highest sub-layer: the picture reorder depth. */
  maxNumReorderPics: number;
}

/** Largest picture reorder depth H.265 allows (MaxDpbSize - 1). */
export const h265MaxReorderPics = 15;

/** Parses an SPS NAL unit (with its 2-byte header, emulation prevention still in). */
export function parseH265Sps(nal: Uint8Array): H265Sps {
  if (nal.length < 16) throw new TruncatedError("H.265 SPS too short");
  if (h265NalType(nal) !== H265NalType.sps) throw new ParseError("not an H.265 SPS");
  const rbsp = removeEmulationPrevention(nal);
  const r = new BitReader(rbsp, 2);
  r.readBits(4); // sps_video_parameter_set_id
  const maxSubLayersMinus1 = r.readBits(3);
  if (maxSubLayersMinus1 > 6) throw new ParseError("bad H.265 sps_max_sub_layers_minus1");
  const temporalIdNesting = r.readBit();
  const profileSpace = r.readBits(2);
  const tierFlag = r.readBit();
  const profileIdc = r.readBits(5);
  const compatibilityFlags = r.readBits(32);
  const constraintStart = r.bitPosition / 8;
  const constraintFlags = rbsp.slice(constraintStart, constraintStart + 6);
  r.skipBits(48);
  const levelIdc = r.readBits(8);
  const subProfilePresent: number[] = [];
  const subLevelPresent: number[] = [];
  for (let i = 0; i < maxSubLayersMinus1; i++) {
    subProfilePresent.push(r.readBit());
    subLevelPresent.push(r.readBit());
  }
  if (maxSubLayersMinus1 > 0) r.skipBits(2 * (8 - maxSubLayersMinus1));
  for (let i = 0; i < maxSubLayersMinus1; i++) {
    if (subProfilePresent[i]) r.skipBits(88);
    if (subLevelPresent[i]) r.skipBits(8);
  }
  r.readUE(); // sps_seq_parameter_set_id
  const chromaFormatIdc = r.readUE();
  if (chromaFormatIdc > 3) throw new ParseError("bad H.265 chroma_format_idc");
  let separateColourPlane = 0;
  if (chromaFormatIdc === 3) separateColourPlane = r.readBit();
  const lumaWidth = r.readUE();
  const lumaHeight = r.readUE();
  let width = lumaWidth;
  let height = lumaHeight;
  if (r.readBit()) {
    const chromaArrayType = separateColourPlane ? 0 : chromaFormatIdc;
    const subWidthC = chromaArrayType === 1 || chromaArrayType === 2 ? 2 : 1;
    const subHeightC = chromaArrayType === 1 ? 2 : 1;
    const left = r.readUE(), right = r.readUE(), top = r.readUE(), bottom = r.readUE();
    width -= subWidthC * (left + right);
    height -= subHeightC * (top + bottom);
  }
  const bitDepthLuma = 8 + r.readUE();
  const bitDepthChroma = 8 + r.readUE();
  if (width <= 0 || height <= 0 || width > 16888 || height > 16888) {
    throw new ParseError("H.265 SPS picture size out of range");
  }
  if (bitDepthLuma > 16 || bitDepthChroma > 16) throw new ParseError("bad H.265 bit depth");
  r.readUE(); // log2_max_pic_order_cnt_lsb_minus4
  const orderingPerSubLayer = r.readBit(); // sps_sub_layer_ordering_info_present_flag
  let maxNumReorderPics = 0;
  // Without per-layer info only the highest layer's values are coded.
  for (let i = orderingPerSubLayer ? 0 : maxSubLayersMinus1; i <= maxSubLayersMinus1; i++) {
    r.readUE(); // sps_max_dec_pic_buffering_minus1
    maxNumReorderPics = r.readUE();
    r.readUE(); // sps_max_latency_increase_plus1
  }
  if (maxNumReorderPics > h265MaxReorderPics) {
    throw new ParseError("bad H.265 sps_max_num_reorder_pics");
  }
  return {
    profileSpace,
    tierFlag,
    profileIdc,
    compatibilityFlags,
    constraintFlags,
    levelIdc,
    maxSubLayers: maxSubLayersMinus1 + 1,
    temporalIdNesting,
    chromaFormatIdc,
    bitDepthLuma,
    bitDepthChroma,
    width,
    height,
    maxNumReorderPics,
  };
}

/** True when a 4-byte length-prefixed access unit holds an IRAP picture (IDR, CRA, BLA). */
export function isH265Keyframe(accessUnit: Uint8Array): boolean {
  let pos = 0;
  while (pos + 4 < accessUnit.length) {
    const len = ((accessUnit[pos] << 24) | (accessUnit[pos + 1] << 16) |
      (accessUnit[pos + 2] << 8) | accessUnit[pos + 3]) >>> 0;
    const type = (accessUnit[pos + 4] >> 1) & 0x3f;
    if (type >= H265NalType.irapFirst && type <= H265NalType.irapLast) return true;
    pos += 4 + len;
  }
  return false;
}

/** Contents of an hvcC record. */
export interface HvcC {
  profileIdc: number;
  levelIdc: number;
  /** Bytes of each NAL length prefix in samples (1, 2 or 4). */
  nalLengthSize: number;
  vps: Uint8Array[];
  sps: Uint8Array[];
  pps: Uint8Array[];
}

/** Builds an hvcC record (4-byte NAL lengths) from VPS, SPS and PPS NAL units. */
export function buildHvcC(
  vps: readonly Uint8Array[],
  sps: readonly Uint8Array[],
  pps: readonly Uint8Array[],
): Uint8Array {
  if (sps.length === 0) throw new ParseError("hvcC needs an SPS");
  const info = parseH265Sps(sps[0]);
  const arrays = [
    { type: H265NalType.vps, nals: vps },
    { type: H265NalType.sps, nals: sps },
    { type: H265NalType.pps, nals: pps },
  ].filter((a) => a.nals.length > 0);
  let size = 23;
  for (const a of arrays) {
    size += 3;
    for (const nal of a.nals) size += 2 + nal.length;
  }
  const out = new Uint8Array(size);
  const view = new DataView(out.buffer);
  out[0] = 1;
  out[1] = (info.profileSpace << 6) | (info.tierFlag << 5) | info.profileIdc;
  view.setUint32(2, info.compatibilityFlags);
  out.set(info.constraintFlags, 6);
  out[12] = info.levelIdc;
  view.setUint16(13, 0xf000); // min_spatial_segmentation_idc unknown
  out[15] = 0xfc; // parallelismType unknown
  out[16] = 0xfc | info.chromaFormatIdc;
  out[17] = 0xf8 | (info.bitDepthLuma - 8);
  out[18] = 0xf8 | (info.bitDepthChroma - 8);
  view.setUint16(19, 0); // avgFrameRate unknown
  out[21] = (info.maxSubLayers << 3) | (info.temporalIdNesting << 2) | 3;
  out[22] = arrays.length;
  let pos = 23;
  for (const a of arrays) {
    out[pos] = 0x80 | a.type; // array_completeness: all sets of this type are here
    view.setUint16(pos + 1, a.nals.length);
    pos += 3;
    for (const nal of a.nals) {
      view.setUint16(pos, nal.length);
      out.set(nal, pos + 2);
      pos += 2 + nal.length;
    }
  }
  return out;
}

/** Parses an hvcC record; parameter sets are returned as views into `data`. */
export function parseHvcC(data: Uint8Array): HvcC {
  if (data.length < 23) throw new TruncatedError("hvcC too short");
  if (data[0] !== 1) throw new ParseError("unknown hvcC version");
  const result: HvcC = {
    profileIdc: data[1] & 0x1f,
    levelIdc: data[12],
    nalLengthSize: (data[21] & 3) + 1,
    vps: [],
    sps: [],
    pps: [],
  };
  if (result.nalLengthSize === 3) throw new ParseError("hvcC NAL length size 3 is not allowed");
  let pos = 23;
  for (let a = 0; a < data[22]; a++) {
    if (pos + 3 > data.length) throw new TruncatedError("hvcC cut in its arrays");
    const type = data[pos] & 0x3f;
    const count = (data[pos + 1] << 8) | data[pos + 2];
    pos += 3;
    for (let i = 0; i < count; i++) {
      if (pos + 2 > data.length) throw new TruncatedError("hvcC cut in a parameter set");
      const len = (data[pos] << 8) | data[pos + 1];
      if (pos + 2 + len > data.length) throw new TruncatedError("hvcC cut in a parameter set");
      const nal = data.subarray(pos + 2, pos + 2 + len);
      pos += 2 + len;
      if (type === H265NalType.vps) result.vps.push(nal);
      else if (type === H265NalType.sps) result.sps.push(nal);
      else if (type === H265NalType.pps) result.pps.push(nal);
    }
  }
  return result;
}

/** VPS, SPS and PPS NAL units found in a length-prefixed access unit. */
export function findH265ParameterSets(
  accessUnit: Uint8Array,
): { vps: Uint8Array[]; sps: Uint8Array[]; pps: Uint8Array[] } {
  const sets = { vps: [] as Uint8Array[], sps: [] as Uint8Array[], pps: [] as Uint8Array[] };
  for (const nal of splitLengthPrefixed(accessUnit)) {
    const type = h265NalType(nal);
    if (type === H265NalType.vps) sets.vps.push(nal);
    else if (type === H265NalType.sps) sets.sps.push(nal);
    else if (type === H265NalType.pps) sets.pps.push(nal);
  }
  return sets;
}
