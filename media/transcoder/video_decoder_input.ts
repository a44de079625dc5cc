/**
 * What both video decoders (streaming and chunked) need to feed ffmpeg: the picture size a
 * keyframe starts, the container the compressed frames travel in (MPEG-TS for H.264 and
 * H.265, IVF for VP8, which MPEG-TS cannot carry), the arguments that make ffmpeg write raw
 * I420 pictures, one per input frame, and which frames a decoder may skip.
 */
import { findH264ParameterSets, H264NalType, h264NalType, parseH264Sps } from "../codecs/h264.ts";
import { findH265ParameterSets, H265NalType, h265NalType, parseH265Sps } from "../codecs/h265.ts";
import { vp8KeyframeInfo } from "../codecs/vp8.ts";
import { IvfWriter } from "../formats/ivf.ts";
import { firstStreamPid, TsMuxer } from "../formats/mpegts/muxer.ts";
import { tsPacketBytes } from "../formats/mpegts/psi.ts";
import { joinLengthPrefixed, splitLengthPrefixed } from "../codecs/nalu.ts";
import type { MediaFrame, Track } from "../frame.ts";

/** A picture size in pixels. */
export interface PictureSize {
  width: number;
  height: number;
}

/** Bytes of one tightly packed I420 picture (chroma planes ceil(w/2) x ceil(h/2)). */
export function i420Bytes({ width, height }: PictureSize): number {
  return width * height + 2 * Math.ceil(width / 2) * Math.ceil(height / 2);
}

/**
 * The size of the pictures a keyframe starts: from its in-band SPS (H.264/H.265) or frame
 * header (VP8), else the track's SPS, else the track's size; undefined when none says.
 */
export function keyframeSize(track: Track, frame: MediaFrame): PictureSize | undefined {
  try {
    switch (track.codec) {
      case "H264": {
        const sps = findH264ParameterSets(frame.data).sps[0] ??
          (track.config?.codec === "H264" ? track.config.sps[0] : undefined);
        if (sps) return sizeOf(parseH264Sps(sps));
        break;
      }
      case "H265": {
        const sps = findH265ParameterSets(frame.data).sps[0] ??
          (track.config?.codec === "H265" ? track.config.sps[0] : undefined);
        if (sps) return sizeOf(parseH265Sps(sps));
        break;
      }
      case "VP8": {
        const info = vp8KeyframeInfo(frame.data);
        if (info) return sizeOf(info);
        break;
      }
    }
  } catch {
    // A damaged parameter set: the track's size is the best guess left.
  }
  return track.width && track.height ? { width: track.width, height: track.height } : undefined;
}

function sizeOf({ width, height }: PictureSize): PictureSize | undefined {
  return width > 0 && height > 0 ? { width, height } : undefined;
}

/** The compressed frames of one ffmpeg run, in the container ffmpeg reads them from. */
export interface DecoderInput {
  /** ffmpeg's input arguments naming the container. */
  readonly args: string[];
  /** The bytes of one frame (container headers included where due). */
  encode(frame: MediaFrame): Uint8Array;
}

/** A new input for one ffmpeg run decoding `track` at `size` (each run starts afresh). */
export function decoderInput(track: Track, size: PictureSize): DecoderInput {
  if (track.codec === "VP8") {
    // IVF timestamps in the track's clock: ffmpeg reads them as they are.
    const writer = new IvfWriter(size.width, size.height, track.clockRate);
    return { args: ["-f", "ivf"], encode: (f) => writer.frame(f.data, f.pts) };
  }
  // The muxer repeats the track's SPS/PPS before keyframes that lack them in-band.
  const muxer = new TsMuxer({ tracks: [{ ...track, id: 0 }] });
  const h264 = track.codec === "H264";
  return {
    args: ["-f", "mpegts"],
    encode: (f) => {
      const ts = muxer.mux({ ...f, trackId: 0, data: withTrailingAud(f.data, h264) });
      boundPesLength(ts);
      return ts;
    },
  };
}

/** Access unit delimiters (primary_pic_type: any): H.264 and H.265. */
const h264Aud = new Uint8Array([0x09, 0xf0]);
const h265Aud = new Uint8Array([0x46, 0x01, 0x50]);

/**
 * The access unit with its delimiter moved to its end. ffmpeg's H.264/H.265 parser ends an
 * access unit where the next one starts, so a delimiter in front held each frame until the
 * next arrived (a frame of delay); at the end it starts the next unit, and the frame goes
 * to the decoder at once.
 */
function withTrailingAud(data: Uint8Array, h264: boolean): Uint8Array {
  const audType = h264 ? H264NalType.aud : H265NalType.aud;
  const nalType = h264 ? h264NalType : h265NalType;
  const nals = splitLengthPrefixed(data).filter((nal) => nalType(nal) !== audType);
  return joinLengthPrefixed([...nals, h264 ? h264Aud : h265Aud]);
}

/**
 * Writes the PES_packet_length of the one video PES in `ts` (the muxer leaves video PES
 * unbounded), when it fits: ffmpeg's demuxer then passes the frame on as soon as its last
 * packet arrives instead of at the next frame's first (a frame of delay).
 */
export function boundPesLength(ts: Uint8Array): void {
  let lengthAt = -1;
  let pesBytes = 0;
  for (let o = 0; o + tsPacketBytes <= ts.length; o += tsPacketBytes) {
    if ((((ts[o + 1] & 0x1f) << 8) | ts[o + 2]) !== firstStreamPid) continue;
    const payload = o + 4 + ((ts[o + 3] & 0x20) !== 0 ? 1 + ts[o + 4] : 0);
    if ((ts[o + 1] & 0x40) !== 0) lengthAt = payload + 4;
    pesBytes += o + tsPacketBytes - payload;
  }
  // The 6 bytes of start code, stream id and the length field itself are not counted.
  const length = pesBytes - 6;
  if (lengthAt < 0 || length > 0xffff) return;
  ts[lengthAt] = length >> 8;
  ts[lengthAt + 1] = length & 0xff;
}

/**
 * The size of the pictures a decoder scaling into `box` gives for source pictures of
 * `source`'s size: as large as fits in the box, aspect kept, never larger than the source,
 * sides rounded to even (at least 2); the source's size without a box. The same arithmetic
 * as the expressions of `decoderScaleArgs`, which ffmpeg evaluates in doubles too, so both
 * sides agree on every picture's byte count.
 */
export function scaledSize(source: PictureSize, box: PictureSize | undefined): PictureSize {
  if (!box) return source;
  const factor = Math.min(1, Math.min(box.width / source.width, box.height / source.height));
  const side = (length: number) => Math.max(2, 2 * Math.trunc(length * factor / 2 + 0.5));
  return { width: side(source.width), height: side(source.height) };
}

/**
 * ffmpeg's output options that scale each decoded picture into `box` (see `scaledSize`),
 * none without a box. Expressions of the input size rather than a fixed size keep a source
 * that changes resolution mid-stream in its aspect. Area averaging, as the kernels scale
 * down (and as the benchmarks' ffmpeg peers are told to).
 */
export function decoderScaleArgs(box: PictureSize | undefined): string[] {
  if (!box) return [];
  // Commas escaped: the filter graph parser would split the filter at them.
  const factor = `min(1\\,min(${box.width}/iw\\,${box.height}/ih))`;
  const side = (input: string) => `max(2\\,2*trunc(${input}*${factor}/2+0.5))`;
  return ["-vf", `scale=w=${side("iw")}:h=${side("ih")}:flags=area`];
}

/**
 * ffmpeg's input options for a decoder: no probing beyond the first packets, so a live run
 * decodes at once (`-fflags nobuffer`, which live audio uses, made ffmpeg 5.1 lose every
 * other H.264 picture of an MPEG-TS pipe, so it is left out).
 */
export const decoderProbeArgs = ["-probesize", "32", "-analyzeduration", "0"];

/**
 * ffmpeg's output options for a decoder: raw I420, one picture per decoded frame (no frame
 * rate conversion drops or repeats any), audio ignored. The rawvideo encoder runs on one
 * thread: with frame threads (ffmpeg's default) it held each picture until the next.
 */
export const decoderOutputArgs = [
  ...["-an", "-fps_mode", "passthrough", "-threads", "1"],
  ...["-f", "rawvideo", "-pix_fmt", "yuv420p"],
];

/** H.265 NAL types of RASL pictures (RASL_N, RASL_R). */
const h265RaslN = 8;
const h265RaslR = 9;
/** H.265 NAL types of BLA pictures, after which RASL pictures are never output. */
const h265BlaLast = 18;

/** Type of the first VCL NAL unit of a length-prefixed H.265 access unit (-1 if none). */
function h265PictureType(data: Uint8Array): number {
  for (let p = 0; p + 4 < data.length;) {
    const len = ((data[p] << 24) | (data[p + 1] << 16) | (data[p + 2] << 8) | data[p + 3]) >>> 0;
    const type = h265NalType(data.subarray(p + 4));
    if (type < 32) return type;
    p += 4 + len;
  }
  return -1;
}

/**
 * True when the RASL pictures that follow `keyframe` will not be output: it is an H.265 BLA,
 * or a CRA decoded first (`decodedFirst`: a new run, a chunk's start, or after lost frames).
 * RASL pictures refer to pictures before the keyframe, so a decoder starting there skips
 * them (or, after a gap it does not know of, would output garbage), and they must not be
 * counted as pictures to come.
 */
export function skipsLeadingPictures(
  codec: Track["codec"],
  keyframe: Uint8Array,
  decodedFirst: boolean,
): boolean {
  if (codec !== "H265") return false;
  const type = h265PictureType(keyframe);
  return (type === H265NalType.cra && decodedFirst) ||
    (type >= H265NalType.irapFirst && type <= h265BlaLast);
}

/** True for an H.265 RASL picture (see `skipsLeadingPictures`). */
export function isLeadingPicture(codec: Track["codec"], frame: Uint8Array): boolean {
  if (codec !== "H265") return false;
  const type = h265PictureType(frame);
  return type === h265RaslN || type === h265RaslR;
}

/**
 * True when no later frame refers to this one (an H.264 access unit whose slices all have
 * nal_ref_idc 0), so losing it spoils nothing else. Other codecs: false.
 */
export function isDisposable(codec: Track["codec"], frame: Uint8Array): boolean {
  if (codec !== "H264") return false;
  let slices = 0;
  for (let p = 0; p + 4 < frame.length;) {
    const len = ((frame[p] << 24) | (frame[p + 1] << 16) | (frame[p + 2] << 8) | frame[p + 3]) >>>
      0;
    const header = frame[p + 4];
    const type = header & 0x1f;
    if (type >= H264NalType.slice && type <= H264NalType.idr) {
      if ((header & 0x60) !== 0) return false;
      slices++;
    }
    p += 4 + len;
  }
  return slices > 0;
}

/** Inserts `pts` into the ascending array `sorted` (short: a linear scan from the end). */
export function insertSorted(sorted: number[], pts: number): void {
  let i = sorted.length;
  while (i > 0 && sorted[i - 1] > pts) i--;
  sorted.splice(i, 0, pts);
}
