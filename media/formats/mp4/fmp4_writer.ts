/**
 * Fragmented MP4 writer (ISO 14496-12 §8.8): ftyp + moov (with mvex), then one moof + mdat
 * per fragment. A file cut anywhere stays playable up to its last complete fragment, which
 * is what lets a recording survive kill -9.
 */

import { ParseError } from "../../../core/errors.ts";
import type { MediaFrame, Track } from "../../frame.ts";
import { findH264ParameterSets, parseH264Sps } from "../../codecs/h264.ts";
import { findH265ParameterSets, parseH265Sps } from "../../codecs/h265.ts";
import { vp8KeyframeInfo } from "../../codecs/vp8.ts";
import { BoxWriter } from "./box_writer.ts";
import { writeSampleEntry } from "./sample_entry.ts";

/** Options of an Fmp4Writer. */
export interface Fmp4WriterOptions {
  /**
   * The tracks of the file, one per input track. Frames select their track by `trackId`,
   * so several streams go in one file by giving their tracks distinct ids. All tracks share
   * one timeline: rebase each stream's timestamps to a common origin before pushing.
   */
  tracks: Track[];
  /** Longest span of media a fragment holds before it is emitted, in milliseconds. */
  fragmentDurationMs?: number;
  /**
   * Emit each fragment's moof typed "free" until the caller commits it (see `commitOffset`).
   * A file cut while a fragment is being written (kill -9, power loss) then ends in a box
   * every reader skips, instead of a moof that points past the end of the file, which
   * ffmpeg reports as errors or, when the moof itself is cut, refuses the whole file for.
   */
  crashSafe?: boolean;
}

/** The box type that commits a crash-safe fragment, written at `commitOffset`. */
export const moofBoxType: Uint8Array = new Uint8Array([0x6d, 0x6f, 0x6f, 0x66]);

/** Default fragment span, in milliseconds. */
export const defaultFragmentDurationMs = 1000;

/** Codecs with a sample entry in sample_entry.ts. */
const writableCodecs = new Set(["H264", "H265", "VP8", "AAC", "OPUS"]);
/** Sample flags (§8.8.3.1): a sync sample depends on nothing. */
const syncSampleFlags = 0x02000000;
/** Sample flags: depends on others, and is_non_sync_sample. */
const nonSyncSampleFlags = 0x01010000;

interface Sample {
  dts: number;
  pts: number;
  duration: number;
  keyframe: boolean;
  data: Uint8Array;
}

interface TrackState {
  track: Track;
  /** Samples whose duration is known, waiting for the next fragment. */
  ready: Sample[];
  /** The latest sample: its duration is known when the next one arrives. */
  last?: Sample;
  /** Track ticks subtracted from every timestamp so decode times start at or after 0. */
  originTicks: number;
  lastDuration: number;
}

/**
 * Turns MediaFrames into fragmented MP4 bytes. `push`, `flush` and `finish` return the bytes
 * to append to the file (the first output starts with ftyp + moov), or undefined.
 */
export class Fmp4Writer {
  #tracks = new Map<number, TrackState>();
  #fragmentDurationSec: number;
  #sequence = 0;
  #fragmentStartSec: number | undefined;
  /** Timeline origin in seconds, fixed when the first fragment is written. */
  #originSec: number | undefined;
  #box = new BoxWriter(1 << 16);
  #crashSafe: boolean;
  /**
   * With `crashSafe`: offset, within the chunk last returned, of the 4 bytes to overwrite
   * with `moofBoxType` once the whole chunk is durably written; undefined otherwise.
   */
  commitOffset: number | undefined;

  constructor(options: Fmp4WriterOptions) {
    if (options.tracks.length === 0) throw new ParseError("an MP4 file needs a track");
    for (const track of options.tracks) {
      if (this.#tracks.has(track.id)) throw new ParseError(`duplicate track id ${track.id}`);
      if (!writableCodecs.has(track.codec)) {
        throw new ParseError(`codec ${track.codec} is not written to MP4 here`);
      }
      this.#tracks.set(track.id, {
        track: { ...track },
        ready: [],
        originTicks: 0,
        lastDuration: 0,
      });
    }
    this.#fragmentDurationSec = (options.fragmentDurationMs ?? defaultFragmentDurationMs) / 1000;
    this.#crashSafe = options.crashSafe ?? false;
  }

  /** Adds a frame; returns a fragment (preceded by the init segment the first time) when due. */
  push(frame: MediaFrame): Uint8Array | undefined {
    const state = this.#tracks.get(frame.trackId);
    if (!state) throw new ParseError(`frame for unknown track ${frame.trackId}`);
    const clock = state.track.clockRate;
    let dts = frame.dts;
    if (state.last) {
      // Decode times must increase; a source that repeats or rewinds gets nudged forward.
      if (dts <= state.last.dts) dts = state.last.dts + 1;
      state.last.duration = dts - state.last.dts;
      state.lastDuration = state.last.duration;
      this.#ready(state, state.last);
    }
    state.last = {
      dts,
      pts: frame.pts,
      duration: 0,
      keyframe: frame.keyframe,
      data: frame.data,
    };
    const nowSec = dts / clock;
    if (
      this.#fragmentStartSec !== undefined &&
      nowSec - this.#fragmentStartSec >= this.#fragmentDurationSec
    ) {
      return this.flush();
    }
    return undefined;
  }

  #ready(state: TrackState, sample: Sample): void {
    if (this.#originSec !== undefined && sample.dts < state.originTicks) return;
    state.ready.push(sample);
    const sec = sample.dts / state.track.clockRate;
    if (this.#fragmentStartSec === undefined || sec < this.#fragmentStartSec) {
      this.#fragmentStartSec = sec;
    }
  }

  /** Emits every sample whose duration is known; the latest frame of each track waits. */
  flush(): Uint8Array | undefined {
    const states = [...this.#tracks.values()];
    if (!states.some((s) => s.ready.length > 0)) return undefined;
    const w = this.#box;
    w.reset();
    if (this.#originSec === undefined) {
      this.#originSec = Math.min(
        ...states.filter((s) => s.ready.length > 0).map((s) => s.ready[0].dts / s.track.clockRate),
      );
      for (const s of states) {
        s.originTicks = Math.round(this.#originSec * s.track.clockRate);
        s.ready = s.ready.filter((sample) => sample.dts >= s.originTicks);
      }
      this.#writeInit(w, states);
    }
    this.#writeFragment(w, states.filter((s) => s.ready.length > 0));
    for (const s of states) s.ready = [];
    this.#fragmentStartSec = undefined;
    return w.toBytes();
  }

  /** Emits everything, giving each track's last frame the duration of the one before it. */
  finish(): Uint8Array | undefined {
    for (const state of this.#tracks.values()) {
      if (!state.last) continue;
      // Without a second frame, guess a typical frame length: 1/25 s video, 1/50 s audio.
      state.last.duration = state.lastDuration ||
        Math.round(state.track.clockRate / (state.track.kind === "video" ? 25 : 50));
      this.#ready(state, state.last);
      state.last = undefined;
    }
    return this.flush();
  }

  #writeInit(w: BoxWriter, states: TrackState[]): void {
    w.box("ftyp").fourCC("iso6").u32(0).fourCC("iso6").fourCC("isom").fourCC("mp41").end();
    w.box("moov");
    w.fullBox("mvhd", 0, 0).u32(0).u32(0).u32(1000).u32(0); // times, timescale ms, duration
    w.u32(0x00010000).u16(0x0100).zeros(10); // rate 1.0, volume 1.0, reserved
    writeMatrix(w);
    w.zeros(24).u32(Math.max(...states.map((s) => s.track.id)) + 2).end();
    for (const s of states) this.#writeTrak(w, s);
    w.box("mvex");
    for (const s of states) {
      w.fullBox("trex", 0, 0).u32(s.track.id + 1).u32(1).u32(0).u32(0).u32(0).end();
    }
    w.end().end();
  }

  #writeTrak(w: BoxWriter, state: TrackState): void {
    const track = completeTrack(state);
    const video = track.kind === "video";
    w.box("trak");
    w.fullBox("tkhd", 0, 3).u32(0).u32(0).u32(track.id + 1).u32(0).u32(0); // enabled, in movie
    w.zeros(8).u16(0).u16(video ? 0 : 1).u16(video ? 0 : 0x0100).u16(0);
    writeMatrix(w);
    w.u32((track.width ?? 0) * 65536).u32((track.height ?? 0) * 65536).end();
    w.box("mdia");
    w.fullBox("mdhd", 0, 0).u32(0).u32(0).u32(track.clockRate).u32(0);
    w.u16(0x55c4).u16(0).end(); // language "und"
    w.fullBox("hdlr", 0, 0).u32(0).fourCC(video ? "vide" : "soun").zeros(12);
    w.bytes(new TextEncoder().encode(video ? "VideoHandler\0" : "SoundHandler\0")).end();
    w.box("minf");
    if (video) w.fullBox("vmhd", 0, 1).zeros(8).end();
    else w.fullBox("smhd", 0, 0).zeros(4).end();
    w.box("dinf").fullBox("dref", 0, 0).u32(1).fullBox("url ", 0, 1).end().end().end();
    w.box("stbl");
    w.fullBox("stsd", 0, 0).u32(1);
    writeSampleEntry(w, track);
    w.end();
    w.fullBox("stts", 0, 0).u32(0).end();
    w.fullBox("stsc", 0, 0).u32(0).end();
    w.fullBox("stsz", 0, 0).u32(0).u32(0).end();
    w.fullBox("stco", 0, 0).u32(0).end();
    w.end().end().end().end();
  }

  #writeFragment(w: BoxWriter, states: TrackState[]): void {
    this.#sequence++;
    const moofStart = w.length;
    w.box(this.#crashSafe ? "free" : "moof").fullBox("mfhd", 0, 0).u32(this.#sequence).end();
    this.commitOffset = this.#crashSafe ? moofStart + 4 : undefined;
    const dataOffsetFields: number[] = [];
    for (const s of states) {
      w.box("traf");
      w.fullBox("tfhd", 0, 0x020000).u32(s.track.id + 1).end(); // default-base-is-moof
      w.fullBox("tfdt", 1, 0).u64(s.ready[0].dts - s.originTicks).end();
      w.fullBox("trun", 1, 0x000f01).u32(s.ready.length);
      dataOffsetFields.push(w.length);
      w.u32(0);
      const video = s.track.kind === "video";
      for (const sample of s.ready) {
        w.u32(sample.duration).u32(sample.data.length);
        w.u32(!video || sample.keyframe ? syncSampleFlags : nonSyncSampleFlags);
        w.i32(sample.pts - sample.dts);
      }
      w.end().end(); // trun, traf
    }
    w.end(); // moof
    let dataOffset = w.length - moofStart + 8;
    let mdatBytes = 8;
    for (const s of states) for (const sample of s.ready) mdatBytes += sample.data.length;
    for (let i = 0; i < states.length; i++) {
      w.patchU32(dataOffsetFields[i], dataOffset);
      for (const sample of states[i].ready) dataOffset += sample.data.length;
    }
    w.u32(mdatBytes).fourCC("mdat");
    for (const s of states) for (const sample of s.ready) w.bytes(sample.data);
  }
}

function writeMatrix(w: BoxWriter): void {
  w.u32(0x00010000).u32(0).u32(0).u32(0).u32(0x00010000).u32(0).u32(0).u32(0).u32(0x40000000);
}

/**
 * The track with its config and size filled from in-band parameter sets when missing; a VP8
 * track takes its size from its first keyframe, which is what decoders go by.
 */
function completeTrack(state: TrackState): Track {
  const track = state.track;
  if (track.codec === "VP8") {
    const keyframe = state.ready.find((sample) => sample.keyframe);
    const info = keyframe && vp8KeyframeInfo(keyframe.data);
    if (info) Object.assign(track, { width: info.width, height: info.height });
    return track;
  }
  if (track.codec !== "H264" && track.codec !== "H265") return track;
  if (!track.config) {
    for (const sample of state.ready) {
      if (!sample.keyframe) continue;
      if (track.codec === "H264") {
        const sets = findH264ParameterSets(sample.data);
        if (sets.sps.length && sets.pps.length) track.config = { codec: "H264", ...sets };
      } else {
        const sets = findH265ParameterSets(sample.data);
        if (sets.sps.length && sets.pps.length) track.config = { codec: "H265", ...sets };
      }
      if (track.config) break;
    }
  }
  const config = track.config;
  if (track.width === undefined && config?.codec === "H264" && config.sps.length) {
    const info = parseH264Sps(config.sps[0]);
    track.width = info.width;
    track.height = info.height;
  } else if (track.width === undefined && config?.codec === "H265" && config.sps.length) {
    const info = parseH265Sps(config.sps[0]);
    track.width = info.width;
    track.height = info.height;
  }
  return track;
}
