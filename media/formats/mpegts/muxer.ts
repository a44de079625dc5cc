/**
 * MPEG-TS muxer (ISO 13818-1): H.264, H.265, AAC (as ADTS) and Opus (with the control
 * header and 'Opus' registration descriptor ffmpeg reads) into 188-byte packets, with
 * PAT/PMT repeated at keyframes and PCR on the first video track.
 */

import { ParseError } from "../../../core/errors.ts";
import type { MediaFrame, Track } from "../../frame.ts";
import { adtsHeaderBytes, parseAsc, writeAdtsHeader } from "../../codecs/aac.ts";
import type { AudioSpecificConfig } from "../../codecs/aac.ts";
import { H264NalType } from "../../codecs/h264.ts";
import { H265NalType } from "../../codecs/h265.ts";
import { parseOpusHead } from "../../codecs/opus.ts";
import { pesClockRate, PesStreamId, writePesHeader } from "./pes.ts";
import {
  patPid,
  type Pmt,
  StreamType,
  tsPacketBytes,
  tsSyncByte,
  writePat,
  writePmt,
} from "./psi.ts";

/** Options of a TsMuxer. */
export interface TsMuxerOptions {
  /** The tracks to mux; frames select theirs by `trackId`. */
  tracks: Track[];
  /** Added to every timestamp, in 90 kHz ticks, so early DTS and the PCR stay positive. */
  timestampOffset90k?: number;
  /** Longest gap between PAT/PMT repetitions, in milliseconds. */
  psiIntervalMs?: number;
}

/** Default timestamp offset, in 90 kHz ticks (1.4 s, what ffmpeg starts at). */
export const defaultTimestampOffset90k = 126000;
/** How far the PCR runs behind the DTS it is sent with, in 90 kHz ticks (decoder buffer). */
const pcrDelay90k = 63000;
/** Default PAT/PMT repetition interval, in milliseconds. */
export const defaultPsiIntervalMs = 500;
/** PID of the PMT. */
export const pmtPid = 0x1000;
/** PID of the first elementary stream; the others follow. */
export const firstStreamPid = 0x100;

/** PES header with PTS and DTS, in bytes. */
const maxPesHeaderBytes = 19;
const startCode = new Uint8Array([0, 0, 0, 1]);
const h264Aud = new Uint8Array([0x09, 0xf0]);
const h265Aud = new Uint8Array([0x46, 0x01, 0x50]);

interface StreamState {
  track: Track;
  pid: number;
  streamId: number;
  cc: number;
  asc?: AudioSpecificConfig;
}

/** Turns MediaFrames into MPEG-TS packets. */
export class TsMuxer {
  #streams = new Map<number, StreamState>();
  #pcrPid: number;
  #offset90k: number;
  #psiIntervalSec: number;
  #lastPsiSec = -Infinity;
  #patCc = 0;
  #pmtCc = 0;
  /** Scratch for one PES, reused across frames. */
  #pes = new Uint8Array(64 * 1024);
  /** Payloads (pointer field, section, stuffing) of the PAT and PMT packets, built once. */
  #patPayload = new Uint8Array(184).fill(0xff);
  #pmtPayload = new Uint8Array(184).fill(0xff);

  constructor(options: TsMuxerOptions) {
    this.#offset90k = options.timestampOffset90k ?? defaultTimestampOffset90k;
    this.#psiIntervalSec = (options.psiIntervalMs ?? defaultPsiIntervalMs) / 1000;
    const pmtStreams: Pmt["streams"] = [];
    options.tracks.forEach((track, i) => {
      const pid = firstStreamPid + i;
      const state: StreamState = {
        track,
        pid,
        cc: 0,
        streamId: track.kind === "video" ? PesStreamId.video : PesStreamId.audio,
      };
      const config = track.config;
      let streamType: number;
      let opusChannels: number | undefined;
      switch (track.codec) {
        case "H264":
          streamType = StreamType.h264;
          break;
        case "H265":
          streamType = StreamType.h265;
          break;
        case "AAC":
          streamType = StreamType.aacAdts;
          if (config?.codec !== "AAC") {
            throw new ParseError("AAC track without AudioSpecificConfig");
          }
          state.asc = parseAsc(config.asc);
          break;
        case "OPUS":
          streamType = StreamType.privateData;
          state.streamId = PesStreamId.privateStream1;
          opusChannels = config?.codec === "OPUS" && config.head
            ? parseOpusHead(config.head).channels
            : track.channels ?? 2;
          break;
        default:
          throw new ParseError(`codec ${track.codec} is not muxed into MPEG-TS here`);
      }
      this.#streams.set(track.id, state);
      pmtStreams.push({ pid, streamType, codec: track.codec, opusChannels });
    });
    if (pmtStreams.length === 0) throw new ParseError("an MPEG-TS program needs a stream");
    const pcrTrack = options.tracks.find((t) => t.kind === "video") ?? options.tracks[0];
    this.#pcrPid = this.#streams.get(pcrTrack.id)!.pid;
    this.#patPayload[0] = 0; // pointer_field
    writePat(this.#patPayload, 1, pmtPid);
    this.#pmtPayload[0] = 0;
    writePmt(this.#pmtPayload, 1, { pcrPid: this.#pcrPid, streams: pmtStreams });
  }

  /** Precedes the next frame with PAT and PMT (where a reader may start, e.g. a segment). */
  requestPsi(): void {
    this.#lastPsiSec = -Infinity;
  }

  /** The TS packets of one frame (preceded by PAT and PMT when due), as a new array. */
  mux(frame: MediaFrame): Uint8Array {
    const s = this.#streams.get(frame.trackId);
    if (!s) throw new ParseError(`frame for unknown track ${frame.trackId}`);
    const clock = s.track.clockRate;
    const to90k = (t: number) =>
      (clock === pesClockRate ? t : Math.round(t * pesClockRate / clock)) + this.#offset90k;
    const pts = to90k(frame.pts);
    const dts = to90k(frame.dts);
    const nowSec = dts / pesClockRate;
    const video = s.track.kind === "video";
    // abs(): a source that jumps back in time gets its tables again too.
    const psi = (video && frame.keyframe) ||
      Math.abs(nowSec - this.#lastPsiSec) >= this.#psiIntervalSec;
    if (psi) this.#lastPsiSec = nowSec;

    // The payload goes after room for the longest PES header, which is then written before it.
    const payloadBytes = this.#writePayload(s, frame, maxPesHeaderBytes);
    const pesStart = maxPesHeaderBytes - (pts !== dts ? maxPesHeaderBytes : 14);
    const pesBytes =
      writePesHeader(this.#pes, pesStart, s.streamId, pts, dts, payloadBytes, video) +
      payloadBytes;
    const withPcr = s.pid === this.#pcrPid;
    const firstAf = withPcr ? 8 : frame.keyframe && video ? 2 : 0;
    const packets = 1 + Math.max(0, Math.ceil((pesBytes - (184 - firstAf)) / 184));
    const out = new Uint8Array((packets + (psi ? 2 : 0)) * tsPacketBytes);
    let o = 0;
    if (psi) {
      o = writePsiPacket(out, 0, patPid, this.#patCc, this.#patPayload);
      o = writePsiPacket(out, o, pmtPid, this.#pmtCc, this.#pmtPayload);
      this.#patCc = (this.#patCc + 1) & 15;
      this.#pmtCc = (this.#pmtCc + 1) & 15;
    }
    let pos = pesStart;
    const end = pesStart + pesBytes;
    let first = true;
    while (pos < end) {
      const remaining = end - pos;
      let af = first ? firstAf : 0;
      if (remaining < 184 - af) af = 184 - remaining;
      out[o] = tsSyncByte;
      out[o + 1] = (first ? 0x40 : 0) | (s.pid >> 8);
      out[o + 2] = s.pid & 0xff;
      out[o + 3] = (af > 0 ? 0x30 : 0x10) | s.cc;
      s.cc = (s.cc + 1) & 15;
      if (af > 0) {
        out[o + 4] = af - 1;
        if (af > 1) {
          let flags = 0;
          let p = o + 6;
          if (first && frame.keyframe && video) flags |= 0x40; // random_access_indicator
          if (first && withPcr) {
            flags |= 0x10;
            writePcr(out, p, dts - pcrDelay90k);
            p += 6;
          }
          out[o + 5] = flags;
          out.fill(0xff, p, o + 4 + af);
        }
      }
      const take = 184 - af;
      out.set(this.#pes.subarray(pos, pos + take), o + 4 + af);
      pos += take;
      o += tsPacketBytes;
      first = false;
    }
    return out;
  }

  /** Writes the elementary stream bytes of `frame` into the PES scratch at `at`. */
  #writePayload(s: StreamState, frame: MediaFrame, at: number): number {
    const data = frame.data;
    switch (s.track.codec) {
      case "H264":
      case "H265":
        return this.#writeAnnexB(s, frame, at);
      case "AAC":
        this.#ensure(at + adtsHeaderBytes + data.length);
        writeAdtsHeader(this.#pes, at, s.asc!, data.length);
        this.#pes.set(data, at + adtsHeaderBytes);
        return adtsHeaderBytes + data.length;
      default: {
        // Opus control header: 11-bit prefix 0x3ff, no trim, then au_size in 255-steps.
        const sizeBytes = Math.floor(data.length / 255) + 1;
        this.#ensure(at + 2 + sizeBytes + data.length);
        const b = this.#pes;
        b[at] = 0x7f;
        b[at + 1] = 0xe0;
        b.fill(0xff, at + 2, at + 1 + sizeBytes);
        b[at + 1 + sizeBytes] = data.length % 255;
        b.set(data, at + 2 + sizeBytes);
        return 2 + sizeBytes + data.length;
      }
    }
  }

  #writeAnnexB(s: StreamState, frame: MediaFrame, at: number): number {
    const h264 = s.track.codec === "H264";
    const data = frame.data;
    let hasParameterSets = false;
    let hasAud = false;
    let nals = 0;
    for (let p = 0; p + 4 < data.length;) {
      const len = ((data[p] << 24) | (data[p + 1] << 16) | (data[p + 2] << 8) | data[p + 3]) >>> 0;
      const type = h264 ? data[p + 4] & 0x1f : (data[p + 4] >> 1) & 0x3f;
      if (type === (h264 ? H264NalType.sps : H265NalType.sps)) hasParameterSets = true;
      if (type === (h264 ? H264NalType.aud : H265NalType.aud)) hasAud = true;
      p += 4 + len;
      nals++;
    }
    const aud = h264 ? h264Aud : h265Aud;
    const sets = frame.keyframe && !hasParameterSets ? currentParameterSets(s) : [];
    let total = hasAud ? 0 : 4 + aud.length;
    for (const set of sets) total += 4 + set.length;
    // Start codes take the place of the 4-byte lengths, so the NAL part keeps its size.
    total += data.length;
    this.#ensure(at + total);
    const b = this.#pes;
    let o = at;
    const put = (nal: Uint8Array) => {
      b.set(startCode, o);
      b.set(nal, o + 4);
      o += 4 + nal.length;
    };
    if (!hasAud) put(aud);
    for (const set of sets) put(set);
    for (let p = 0, i = 0; i < nals; i++) {
      const len = ((data[p] << 24) | (data[p + 1] << 16) | (data[p + 2] << 8) | data[p + 3]) >>> 0;
      const end = Math.min(p + 4 + len, data.length);
      b.set(startCode, o);
      b.set(data.subarray(p + 4, end), o + 4);
      o += end - p;
      p = end;
    }
    return o - at;
  }

  #ensure(bytes: number): void {
    if (bytes <= this.#pes.length) return;
    const grown = new Uint8Array(Math.max(bytes, this.#pes.length * 2));
    grown.set(this.#pes);
    this.#pes = grown;
  }
}

/** Writes one TS packet carrying a PSI payload at `o`; returns the offset after it. */
function writePsiPacket(
  out: Uint8Array,
  o: number,
  pid: number,
  cc: number,
  payload: Uint8Array,
): number {
  out[o] = tsSyncByte;
  out[o + 1] = 0x40 | (pid >> 8);
  out[o + 2] = pid & 0xff;
  out[o + 3] = 0x10 | cc;
  out.set(payload, o + 4);
  return o + tsPacketBytes;
}

/** Writes a 6-byte PCR (base in 90 kHz, extension 0) at `offset`. */
function writePcr(out: Uint8Array, offset: number, pcr90k: number): void {
  const base = ((pcr90k % 2 ** 33) + 2 ** 33) % 2 ** 33;
  const high = Math.floor(base / 2); // top 32 bits of the 33-bit base
  out[offset] = high >>> 24;
  out[offset + 1] = (high >>> 16) & 0xff;
  out[offset + 2] = (high >>> 8) & 0xff;
  out[offset + 3] = high & 0xff;
  out[offset + 4] = ((base & 1) << 7) | 0x7e;
  out[offset + 5] = 0;
}

/**
 * The parameter sets a keyframe without its own needs: the track's configuration as it is
 * now, since a provider may learn or change it after the muxer was made.
 */
function currentParameterSets(state: { track: Track }): Uint8Array[] {
  const config = state.track.config;
  if (config?.codec === "H264") return [...config.sps, ...config.pps];
  if (config?.codec === "H265") return [...config.vps, ...config.sps, ...config.pps];
  return [];
}
