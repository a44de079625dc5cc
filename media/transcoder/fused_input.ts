/**
 * The fused ffmpeg's H.264/H.265 input: a fragmented MP4 (ISO 14496-12 §8.8) with one
 * fragment per source frame, written as the frame comes. ffmpeg's MP4 demuxer gives a sample
 * to the decoder as soon as its fragment is in, with the frame's own pts and dts; MPEG-TS
 * went through ffmpeg's H.264 parser, which ends an access unit only where the next one
 * starts (a frame of delay), and a delimiter moved to the end of each unit to save that
 * frame gave each picture the pts of the frame before.
 *
 * The file's timeline is the source's in 90 kHz, less an origin: the whole second at or
 * before the first frame's decode time. Decode times then start at or after 0, as MP4 wants,
 * and every integer frame rate's ticks fall on the same instants as on the source's timeline,
 * so the `fps` filter of two processes started at different keyframes picks the same ticks.
 */
import type { MediaFrame, Track } from "../frame.ts";
import { BoxWriter } from "../formats/mp4/box_writer.ts";
import { writeSampleEntry } from "../formats/mp4/sample_entry.ts";
import { findH264ParameterSets } from "../codecs/h264.ts";
import { findH265ParameterSets } from "../codecs/h265.ts";
import type { PictureSize } from "./video_decoder_input.ts";

/** The file's clock, ticks per second (the pipeline's video clock). */
const clockHz = 90000;
/** The origin is a multiple of this, in ticks: one second. */
const originStepTicks = clockHz;
/** Duration given to the first fragment's sample (ffmpeg goes by the decode times), in ticks. */
const firstDurationTicks = 3000;
/** Sample flags (§8.8.3.1): a sync sample depends on nothing. */
const syncSampleFlags = 0x02000000;
/** Sample flags: depends on others, and is_non_sync_sample. */
const nonSyncSampleFlags = 0x01010000;
/** tfhd flag: data offsets are from the moof's start. */
const defaultBaseIsMoof = 0x020000;
/** trun flags: data offset, and per sample its duration, size, flags and composition offset. */
const trunFlags = 0x000f01;

/** Writes the source's frames, in decode order, as fragments of one MP4 stream. */
export class FragmentedInput {
  /** ffmpeg's input options for what `encode` writes. */
  readonly args = ["-f", "mp4"];
  #track: Track;
  #size: PictureSize;
  #box = new BoxWriter(1 << 16);
  #sequence = 0;
  #lastDts = -Infinity;
  #origin: number;

  /** `track` in any clock; `size`, the pictures' (from the first keyframe). */
  constructor(track: Track, size: PictureSize, firstDts: number) {
    this.#track = track;
    this.#size = size;
    this.#origin = Math.floor(this.#to90k(firstDts) / originStepTicks) * originStepTicks;
  }

  /**
   * What each pts of the file is off the source's, in 90 kHz ticks (the origin taken
   * off, as a negative number); 0 until the first frame.
   */
  get offset90k(): number {
    return -this.#origin;
  }

  /**
   * The bytes of one frame: its fragment, after the file's header the first time. The first
   * frame is a keyframe: its parameter sets (or the track's) go in the header; without any,
   * this throws and nothing is written.
   */
  encode(frame: MediaFrame): Uint8Array {
    const pts = this.#to90k(frame.pts);
    // Decode times must increase: MP4 has no step back.
    const dts = Math.max(this.#to90k(frame.dts), this.#lastDts + 1, this.#origin);
    const w = this.#box;
    w.reset();
    if (this.#sequence === 0) this.#writeHeader(w, frame);
    const duration = this.#lastDts === -Infinity ? firstDurationTicks : dts - this.#lastDts;
    this.#lastDts = dts;
    const moofStart = w.length;
    w.box("moof").fullBox("mfhd", 0, 0).u32(++this.#sequence).end();
    w.box("traf");
    w.fullBox("tfhd", 0, defaultBaseIsMoof).u32(1).end();
    w.fullBox("tfdt", 1, 0).u64(dts - this.#origin).end();
    w.fullBox("trun", 1, trunFlags).u32(1);
    const dataOffsetAt = w.length;
    w.u32(0).u32(duration).u32(frame.data.length);
    w.u32(frame.keyframe ? syncSampleFlags : nonSyncSampleFlags).i32(pts - dts);
    w.end().end().end(); // trun, traf, moof
    w.patchU32(dataOffsetAt, w.length - moofStart + 8);
    w.u32(8 + frame.data.length).fourCC("mdat").bytes(frame.data);
    return w.toBytes();
  }

  #to90k(ticks: number): number {
    const clock = this.#track.clockRate;
    return clock === clockHz ? ticks : Math.round(ticks * clockHz / clock);
  }

  /** ftyp and moov: one video track of 90 kHz whose samples all come in fragments. */
  #writeHeader(w: BoxWriter, keyframe: MediaFrame): void {
    const track: Track = {
      ...withConfig(this.#track, keyframe),
      id: 0,
      clockRate: clockHz,
      width: this.#size.width,
      height: this.#size.height,
    };
    const { width, height } = this.#size;
    w.box("ftyp").fourCC("iso6").u32(0).fourCC("iso6").fourCC("isom").fourCC("mp41").end();
    w.box("moov");
    w.fullBox("mvhd", 0, 0).u32(0).u32(0).u32(1000).u32(0); // times, timescale, duration
    w.u32(0x00010000).u16(0x0100).zeros(10); // rate 1.0, volume 1.0, reserved
    writeMatrix(w);
    w.zeros(24).u32(2).end(); // pre_defined, next_track_ID
    w.box("trak");
    w.fullBox("tkhd", 0, 3).u32(0).u32(0).u32(1).u32(0).u32(0); // enabled, in movie
    w.zeros(8).u16(0).u16(0).u16(0).u16(0); // layer, group, volume, reserved
    writeMatrix(w);
    w.u32(width * 65536).u32(height * 65536).end();
    w.box("mdia");
    w.fullBox("mdhd", 0, 0).u32(0).u32(0).u32(clockHz).u32(0).u16(0x55c4).u16(0).end();
    w.fullBox("hdlr", 0, 0).u32(0).fourCC("vide").zeros(12);
    w.bytes(new TextEncoder().encode("VideoHandler\0")).end();
    w.box("minf").fullBox("vmhd", 0, 1).zeros(8).end();
    w.box("dinf").fullBox("dref", 0, 0).u32(1).fullBox("url ", 0, 1).end().end().end();
    w.box("stbl").fullBox("stsd", 0, 0).u32(1);
    writeSampleEntry(w, track);
    w.end();
    w.fullBox("stts", 0, 0).u32(0).end();
    w.fullBox("stsc", 0, 0).u32(0).end();
    w.fullBox("stsz", 0, 0).u32(0).u32(0).end();
    w.fullBox("stco", 0, 0).u32(0).end();
    w.end().end().end().end(); // stbl, minf, mdia, trak
    w.box("mvex").fullBox("trex", 0, 0).u32(1).u32(1).u32(0).u32(0).u32(0).end().end();
    w.end(); // moov
  }
}

function writeMatrix(w: BoxWriter): void {
  w.u32(0x00010000).u32(0).u32(0).u32(0).u32(0x00010000).u32(0).u32(0).u32(0).u32(0x40000000);
}

/**
 * The track with its parameter sets: its own, else those in front of `keyframe`; throws
 * when neither has them (the frame is then lost, and the next keyframe tried).
 */
function withConfig(track: Track, keyframe: MediaFrame): Track {
  if (track.config?.codec === track.codec) return track;
  if (track.codec === "H264") {
    const sets = findH264ParameterSets(keyframe.data);
    if (sets.sps.length > 0 && sets.pps.length > 0) {
      return { ...track, config: { codec: "H264", ...sets } };
    }
  } else if (track.codec === "H265") {
    const sets = findH265ParameterSets(keyframe.data);
    if (sets.vps.length > 0 && sets.sps.length > 0 && sets.pps.length > 0) {
      return { ...track, config: { codec: "H265", ...sets } };
    }
  }
  throw new Error(`no ${track.codec} parameter sets in the track or its first keyframe`);
}
