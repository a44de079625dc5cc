/**
 * H.264 bitstream helpers (ISO 14496-10): NAL unit types, SPS fields needed by containers,
 * keyframe detection and the avcC decoder configuration record (ISO 14496-15 §5.3.3).
 */

import { ParseError, TruncatedError } from "../../core/errors.ts";
import { BitReader } from "./bitreader.ts";
import { removeEmulationPrevention, splitLengthPrefixed } from "./nalu.ts";

/** H.264 NAL unit types used by the media plane. */
export const H264NalType = {
  slice: 1,
  idr: 5,
  sei: 6,
  sps: 7,
  pps: 8,
  aud: 9,
} as const;

/** Type of an H.264 NAL unit (its first byte's low 5 bits). */
export function h264NalType(nal: Uint8Array): number {
  return nal[0] & 0x1f;
}

/** What containers need from an H.264 sequence parameter set. */
export interface H264Sps {
  profileIdc: number;
  /** The constraint_set flags byte. */
  constraintFlags: number;
  levelIdc: number;
  /** 0 monochrome, 1 4:2:0, 2 4:2:2, 3 4:4:4. */
  chromaFormatIdc: number;
  bitDepthLuma: number;
  bitDepthChroma: number;
  /** Displayed width in pixels, after cropping. */
  width: number;
  /** Displayed height in pixels, after cropping. */
  height: number;
  /** pic_order_cnt_type: 2 means pictures are output in decode order. */
  pocType: number;
  /** Pictures decoded ahead of output at most, from the VUI's bitstream_restriction. */
  maxNumReorderFrames?: number;
  /** Frames per second from the VUI timing info, when given. */
  frameRate?: number;
  /** Macroblocks of one frame (PicWidthInMbs × FrameHeightInMbs), for DPB sizes. */
  frameMbs: number;
}

/** Profiles whose SPS carries chroma format, bit depth and scaling matrices. */
const highProfiles = new Set([100, 110, 122, 244, 44, 83, 86, 118, 128, 138, 139, 134, 135]);

/** Parses an SPS NAL unit (with its header byte, emulation prevention still in). */
export function parseH264Sps(nal: Uint8Array): H264Sps {
  if (nal.length < 4) throw new TruncatedError("H.264 SPS too short");
  if (h264NalType(nal) !== H264NalType.sps) throw new ParseError("not an H.264 SPS");
  const r = new BitReader(removeEmulationPrevention(nal), 1);
  const profileIdc = r.readBits(8);
  const constraintFlags = r.readBits(8);
  const levelIdc = r.readBits(8);
  r.readUE(); // seq_parameter_set_id
  let chromaFormatIdc = 1;
  let separateColourPlane = 0;
  let bitDepthLuma = 8;
  let bitDepthChroma = 8;
  if (highProfiles.has(profileIdc)) {
    chromaFormatIdc = r.readUE();
    if (chromaFormatIdc > 3) throw new ParseError("bad H.264 chroma_format_idc");
    if (chromaFormatIdc === 3) separateColourPlane = r.readBit();
    bitDepthLuma = 8 + r.readUE();
    bitDepthChroma = 8 + r.readUE();
    if (bitDepthLuma > 14 || bitDepthChroma > 14) throw new ParseError("bad H.264 bit depth");
    r.readBit(); // qpprime_y_zero_transform_bypass_flag
    if (r.readBit()) {
      const lists = chromaFormatIdc === 3 ? 12 : 8;
      for (let i = 0; i < lists; i++) {
        if (r.readBit()) skipScalingList(r, i < 6 ? 16 : 64);
      }
    }
  }
  r.readUE(); // log2_max_frame_num_minus4
  const pocType = r.readUE();
  if (pocType === 0) {
    r.readUE(); // log2_max_pic_order_cnt_lsb_minus4
  } else if (pocType === 1) {
    r.readBit(); // delta_pic_order_always_zero_flag
    r.readSE(); // offset_for_non_ref_pic
    r.readSE(); // offset_for_top_to_bottom_field
    const cycle = r.readUE();
    if (cycle > 255) throw new ParseError("bad H.264 num_ref_frames_in_pic_order_cnt_cycle");
    for (let i = 0; i < cycle; i++) r.readSE();
  } else if (pocType !== 2) {
    throw new ParseError("bad H.264 pic_order_cnt_type");
  }
  r.readUE(); // max_num_ref_frames
  r.readBit(); // gaps_in_frame_num_value_allowed_flag
  const widthMbs = r.readUE() + 1;
  const heightMapUnits = r.readUE() + 1;
  const frameMbsOnly = r.readBit();
  if (!frameMbsOnly) r.readBit(); // mb_adaptive_frame_field_flag
  r.readBit(); // direct_8x8_inference_flag
  let cropLeft = 0, cropRight = 0, cropTop = 0, cropBottom = 0;
  if (r.readBit()) {
    cropLeft = r.readUE();
    cropRight = r.readUE();
    cropTop = r.readUE();
    cropBottom = r.readUE();
  }
  const chromaArrayType = separateColourPlane ? 0 : chromaFormatIdc;
  const subWidthC = chromaArrayType === 3 ? 1 : 2;
  const subHeightC = chromaArrayType === 1 ? 2 : 1;
  const cropUnitX = chromaArrayType === 0 ? 1 : subWidthC;
  const cropUnitY = (chromaArrayType === 0 ? 1 : subHeightC) * (2 - frameMbsOnly);
  const width = widthMbs * 16 - cropUnitX * (cropLeft + cropRight);
  const height = (2 - frameMbsOnly) * heightMapUnits * 16 - cropUnitY * (cropTop + cropBottom);
  if (width <= 0 || height <= 0 || width > 16384 || height > 16384) {
    throw new ParseError("H.264 SPS picture size out of range");
  }
  let vui: H264Vui = {};
  // Some cameras cut their VUI short or garble it: the fields above are still good.
  try {
    if (r.readBit()) vui = readVui(r);
  } catch (err) {
    if (!(err instanceof ParseError)) throw err;
  }
  return {
    profileIdc,
    constraintFlags,
    levelIdc,
    chromaFormatIdc,
    bitDepthLuma,
    bitDepthChroma,
    width,
    height,
    pocType,
    ...vui,
    frameMbs: widthMbs * (2 - frameMbsOnly) * heightMapUnits,
  };
}

/** The VUI fields the media plane uses. */
type H264Vui = Pick<H264Sps, "maxNumReorderFrames" | "frameRate">;

/** Reads vui_parameters() (ISO 14496-10 §E.1.1) up to bitstream_restriction. */
function readVui(r: BitReader): H264Vui {
  const vui: H264Vui = {};
  if (r.readBit()) { // aspect_ratio_info_present_flag
    if (r.readBits(8) === extendedSar) r.skipBits(32);
  }
  if (r.readBit()) r.readBit(); // overscan_info_present_flag, overscan_appropriate_flag
  if (r.readBit()) { // video_signal_type_present_flag
    r.skipBits(4); // video_format, video_full_range_flag
    if (r.readBit()) r.skipBits(24); // colour_description_present_flag
  }
  if (r.readBit()) { // chroma_loc_info_present_flag
    r.readUE();
    r.readUE();
  }
  if (r.readBit()) { // timing_info_present_flag
    const unitsInTick = r.readBits(32);
    const timeScale = r.readBits(32);
    r.readBit(); // fixed_frame_rate_flag
    // A frame is two ticks (fields) of the clock.
    if (unitsInTick > 0 && timeScale > 0) vui.frameRate = timeScale / (2 * unitsInTick);
  }
  const nalHrd = r.readBit();
  if (nalHrd) skipHrd(r);
  const vclHrd = r.readBit();
  if (vclHrd) skipHrd(r);
  if (nalHrd || vclHrd) r.readBit(); // low_delay_hrd_flag
  r.readBit(); // pic_struct_present_flag
  if (r.readBit()) { // bitstream_restriction_flag
    r.readBit(); // motion_vectors_over_pic_boundaries_flag
    for (let i = 0; i < 4; i++) r.readUE(); // bytes/bits limits, mv lengths
    vui.maxNumReorderFrames = r.readUE();
    r.readUE(); // max_dec_frame_buffering
  }
  return vui;
}

/** aspect_ratio_idc of a SAR given as width and height. */
const extendedSar = 255;

function skipHrd(r: BitReader): void {
  const cpbCount = r.readUE() + 1;
  if (cpbCount > 32) throw new ParseError("bad H.264 cpb_cnt_minus1");
  r.skipBits(8); // bit_rate_scale, cpb_size_scale
  for (let i = 0; i < cpbCount; i++) {
    r.readUE(); // bit_rate_value_minus1
    r.readUE(); // cpb_size_value_minus1
    r.readBit(); // cbr_flag
  }
  r.skipBits(20); // four delay/offset lengths, 5 bits each
}

/** Most frames the DPB holds, by level_idc (ISO 14496-10 Table A-1, MaxDpbMbs). */
const maxDpbMbsByLevel: Record<number, number> = {
  9: 396,
  10: 396,
  11: 900,
  12: 2376,
  13: 2376,
  20: 2376,
  21: 4752,
  22: 8100,
  30: 8100,
  31: 18000,
  32: 20480,
  40: 32768,
  41: 32768,
  42: 34816,
  50: 110400,
  51: 184320,
  52: 184320,
  60: 696320,
  61: 696320,
  62: 696320,
};

/** Largest picture reorder depth H.264 allows (the DPB's 16 frames). */
export const h264MaxReorderFrames = 16;

/** Profiles whose bitstreams never reorder: baseline (no B slices). */
const baselineProfileIdc = 66;
/** Intra-only profiles (with constraint_set3_flag): every picture stands alone. */
const intraCapableProfiles = new Set([44, 100, 110, 122, 244]);

/**
 * How many pictures may precede a picture in decode order and follow it in output order:
 * max_num_reorder_frames when the VUI gives it; 0 for baseline, intra-only and
 * pic_order_cnt_type 2 streams; else its inferred value, the DPB size of the level
 * (§E.2.1), an upper bound that is safe for any conforming stream.
 */
export function h264ReorderDepth(sps: H264Sps): number {
  if (sps.maxNumReorderFrames !== undefined) {
    return Math.min(sps.maxNumReorderFrames, h264MaxReorderFrames);
  }
  const constraintSet3 = (sps.constraintFlags & 0x10) !== 0;
  if (
    sps.pocType === 2 || sps.profileIdc === baselineProfileIdc ||
    (constraintSet3 && intraCapableProfiles.has(sps.profileIdc))
  ) return 0;
  const maxDpbMbs = maxDpbMbsByLevel[sps.levelIdc];
  if (maxDpbMbs === undefined) return h264MaxReorderFrames;
  return Math.min(Math.floor(maxDpbMbs / sps.frameMbs), h264MaxReorderFrames);
}

function skipScalingList(r: BitReader, size: number): void {
  let last = 8;
  let next = 8;
  for (let j = 0; j < size; j++) {
    if (next !== 0) next = (last + r.readSE() + 256) % 256;
    if (next !== 0) last = next;
  }
}

/** True when a 4-byte length-prefixed access unit holds an IDR slice. */
export function isH264Keyframe(accessUnit: Uint8Array): boolean {
  let pos = 0;
  while (pos + 4 < accessUnit.length) {
    const len = ((accessUnit[pos] << 24) | (accessUnit[pos + 1] << 16) |
      (accessUnit[pos + 2] << 8) | accessUnit[pos + 3]) >>> 0;
    if ((accessUnit[pos + 4] & 0x1f) === H264NalType.idr) return true;
    pos += 4 + len;
  }
  return false;
}

/** Contents of an avcC record. */
export interface AvcC {
  profileIdc: number;
  constraintFlags: number;
  levelIdc: number;
  /** Bytes of each NAL length prefix in samples (1, 2 or 4). */
  nalLengthSize: number;
  sps: Uint8Array[];
  pps: Uint8Array[];
}

/** Builds an avcC record (4-byte NAL lengths) from SPS and PPS NAL units. */
export function buildAvcC(sps: readonly Uint8Array[], pps: readonly Uint8Array[]): Uint8Array {
  if (sps.length === 0 || sps.length > 31 || pps.length > 255) {
    throw new ParseError("avcC needs 1-31 SPS and at most 255 PPS");
  }
  const info = parseH264Sps(sps[0]);
  const ext = info.profileIdc === 100 || info.profileIdc === 110 || info.profileIdc === 122 ||
    info.profileIdc === 144;
  let size = 7 + (ext ? 4 : 0);
  for (const nal of [...sps, ...pps]) size += 2 + nal.length;
  const out = new Uint8Array(size);
  const view = new DataView(out.buffer);
  out[0] = 1;
  out[1] = info.profileIdc;
  out[2] = info.constraintFlags;
  out[3] = info.levelIdc;
  out[4] = 0xfc | 3;
  out[5] = 0xe0 | sps.length;
  let pos = 6;
  for (const nal of sps) {
    view.setUint16(pos, nal.length);
    out.set(nal, pos + 2);
    pos += 2 + nal.length;
  }
  out[pos++] = pps.length;
  for (const nal of pps) {
    view.setUint16(pos, nal.length);
    out.set(nal, pos + 2);
    pos += 2 + nal.length;
  }
  if (ext) {
    out[pos++] = 0xfc | info.chromaFormatIdc;
    out[pos++] = 0xf8 | (info.bitDepthLuma - 8);
    out[pos++] = 0xf8 | (info.bitDepthChroma - 8);
    out[pos++] = 0;
  }
  return out;
}

/** Parses an avcC record; parameter sets are returned as views into `data`. */
export function parseAvcC(data: Uint8Array): AvcC {
  if (data.length < 7) throw new TruncatedError("avcC too short");
  if (data[0] !== 1) throw new ParseError("unknown avcC version");
  let pos = 5;
  const readSets = (count: number): Uint8Array[] => {
    const sets: Uint8Array[] = [];
    for (let i = 0; i < count; i++) {
      if (pos + 2 > data.length) throw new TruncatedError("avcC cut in a parameter set");
      const len = (data[pos] << 8) | data[pos + 1];
      if (pos + 2 + len > data.length) throw new TruncatedError("avcC cut in a parameter set");
      sets.push(data.subarray(pos + 2, pos + 2 + len));
      pos += 2 + len;
    }
    return sets;
  };
  const sps = readSets(data[pos++] & 0x1f);
  if (pos >= data.length) throw new TruncatedError("avcC cut before its PPS count");
  const pps = readSets(data[pos++]);
  const nalLengthSize = (data[4] & 3) + 1;
  if (nalLengthSize === 3) throw new ParseError("avcC NAL length size 3 is not allowed");
  return {
    profileIdc: data[1],
    constraintFlags: data[2],
    levelIdc: data[3],
    nalLengthSize,
    sps,
    pps,
  };
}

/** SPS and PPS NAL units found in a length-prefixed access unit (in-band parameter sets). */
export function findH264ParameterSets(
  accessUnit: Uint8Array,
): { sps: Uint8Array[]; pps: Uint8Array[] } {
  const sps: Uint8Array[] = [];
  const pps: Uint8Array[] = [];
  for (const nal of splitLengthPrefixed(accessUnit)) {
    const type = h264NalType(nal);
    if (type === H264NalType.sps) sps.push(nal);
    else if (type === H264NalType.pps) pps.push(nal);
  }
  return { sps, pps };
}
