/**
 * Streaming MPEG-TS demuxer (ISO 13818-1): push byte chunks of any size, get MediaFrames and
 * Tracks for H.264, H.265, ADTS AAC, Opus and MPEG audio (MP3, one frame per MediaFrame). It resyncs on a lost sync byte, drops damaged
 * PES packets instead of failing the stream, and buffers a bounded amount.
 */

import { ParseError } from "../../../core/errors.ts";
import type { Codec, MediaFrame, Track } from "../../frame.ts";
import { aacSamplesPerFrame, adtsToAsc, parseAdtsHeader } from "../../codecs/aac.ts";
import { H264NalType, parseH264Sps } from "../../codecs/h264.ts";
import { H265NalType, parseH265Sps } from "../../codecs/h265.ts";
import { buildOpusHead, opusClockRate, opusPacketSamples } from "../../codecs/opus.ts";
import { joinLengthPrefixed, splitAnnexB } from "../../codecs/nalu.ts";
import { parseMpegAudioHeader } from "../../codecs/mp3.ts";
import { parsePesHeader, pesClockRate, timestampWrap } from "./pes.ts";
import { parsePat, parsePmt, patPid, type PmtStream, tsPacketBytes, tsSyncByte } from "./psi.ts";

/** Options of a TsDemuxer. */
export interface TsDemuxerOptions {
  /** Largest PES packet assembled; bigger ones are dropped. In bytes. */
  maxPesBytes?: number;
}

/** Default largest PES packet, in bytes (a 4K intra frame fits). */
export const defaultMaxPesBytes = 8 * 1024 * 1024;

interface PidState {
  stream: PmtStream;
  /** Track id: the stream's index among the program's supported streams. */
  trackId: number;
  track?: Track;
  pes: Uint8Array;
  pesBytes: number;
  /** False while skipping to the next unit start (after loss or overflow). */
  collecting: boolean;
  cc: number;
  /** Video parameter sets seen so far, by NAL type. */
  vps?: Uint8Array;
  sps?: Uint8Array;
  pps?: Uint8Array;
}

/**
 * Demuxes an MPEG-TS byte stream. Timestamps are those of the stream, unwrapped past 2^33 and
 * converted to each track's clock (90 kHz video, sample rate audio).
 */
export class TsDemuxer {
  /** Tracks whose codec configuration is known, in the order they became known. */
  readonly tracks: Track[] = [];
  #droppedPes = 0;
  #maxPesBytes: number;
  #carry = new Uint8Array(tsPacketBytes);
  #carryBytes = 0;
  #pmtPid: number | undefined;
  #pids = new Map<number, PidState>();
  #lastTs90k: number | undefined;
  #out: MediaFrame[] = [];

  constructor(options: TsDemuxerOptions = {}) {
    this.#maxPesBytes = options.maxPesBytes ?? defaultMaxPesBytes;
  }

  /** PES packets dropped as damaged or oversized, for diagnostics. */
  get droppedPes(): number {
    return this.#droppedPes;
  }

  /** Streams of the program whose codec the demuxer reads (known once the PMT arrived). */
  get expectedTrackCount(): number {
    return this.#pids.size;
  }

  /** Codecs of the program's streams the demuxer reads, in PMT order (empty before the PMT). */
  get programCodecs(): Codec[] {
    return [...this.#pids.values()].sort((a, b) => a.trackId - b.trackId)
      .map((state) => state.stream.codec!);
  }

  /** Feeds bytes; returns the frames completed by them. */
  push(chunk: Uint8Array): MediaFrame[] {
    let pos = 0;
    if (this.#carryBytes > 0) {
      const take = Math.min(tsPacketBytes - this.#carryBytes, chunk.length);
      this.#carry.set(chunk.subarray(0, take), this.#carryBytes);
      this.#carryBytes += take;
      pos = take;
      if (this.#carryBytes < tsPacketBytes) return this.#drain();
      this.#carryBytes = 0;
      this.#packet(this.#carry);
    }
    while (pos < chunk.length) {
      if (chunk[pos] !== tsSyncByte) {
        pos = this.#resync(chunk, pos);
        continue;
      }
      if (chunk.length - pos < tsPacketBytes) {
        this.#carry.set(chunk.subarray(pos), 0);
        this.#carryBytes = chunk.length - pos;
        break;
      }
      this.#packet(chunk.subarray(pos, pos + tsPacketBytes));
      pos += tsPacketBytes;
    }
    return this.#drain();
  }

  /** Ends the input: emits the PES packets still open (the last video frame). */
  flush(): MediaFrame[] {
    for (const [, state] of this.#pids) this.#finishPes(state);
    this.#carryBytes = 0;
    return this.#drain();
  }

  #drain(): MediaFrame[] {
    const frames = this.#out;
    this.#out = [];
    return frames;
  }

  /** Next offset that looks like a packet start: a sync byte followed by another 188 later. */
  #resync(chunk: Uint8Array, from: number): number {
    for (let i = from + 1; i < chunk.length; i++) {
      if (chunk[i] !== tsSyncByte) continue;
      if (i + tsPacketBytes >= chunk.length || chunk[i + tsPacketBytes] === tsSyncByte) return i;
    }
    return chunk.length;
  }

  #packet(p: Uint8Array): void {
    const pid = ((p[1] & 0x1f) << 8) | p[2];
    const unitStart = (p[1] & 0x40) !== 0;
    const afc = (p[3] >> 4) & 3;
    if (p[1] & 0x80 || !(afc & 1)) return; // transport error, or no payload
    let start = 4;
    if (afc === 3) start += 1 + p[4];
    if (start >= tsPacketBytes) return;
    const payload = p.subarray(start);
    if (pid === patPid) {
      if (unitStart) this.#pat(payload);
    } else if (pid === this.#pmtPid) {
      if (unitStart) this.#pmt(payload);
    } else {
      const state = this.#pids.get(pid);
      if (state) this.#pesPacket(state, payload, unitStart, p[3] & 15);
    }
  }

  #section(payload: Uint8Array): Uint8Array | undefined {
    const pointer = payload[0];
    return 1 + pointer < payload.length ? payload.subarray(1 + pointer) : undefined;
  }

  #pat(payload: Uint8Array): void {
    const section = this.#section(payload);
    if (!section) return;
    try {
      this.#pmtPid = parsePat(section) ?? this.#pmtPid;
    } catch (e) {
      if (!(e instanceof ParseError)) throw e;
    }
  }

  #pmt(payload: Uint8Array): void {
    const section = this.#section(payload);
    if (!section) return;
    let streams: PmtStream[];
    try {
      streams = parsePmt(section).streams;
    } catch (e) {
      if (!(e instanceof ParseError)) throw e;
      return;
    }
    let trackId = 0;
    for (const stream of streams) {
      if (!stream.codec) continue;
      const known = this.#pids.get(stream.pid);
      if (!known || known.stream.codec !== stream.codec) {
        const state: PidState = {
          stream,
          trackId,
          pes: new Uint8Array(0),
          pesBytes: 0,
          collecting: false,
          cc: -1,
        };
        this.#pids.set(stream.pid, state);
        if (stream.codec === "OPUS") {
          const channels = stream.opusChannels ?? 2;
          this.#addTrack(state, {
            id: trackId,
            kind: "audio",
            codec: "OPUS",
            clockRate: opusClockRate,
            sampleRate: opusClockRate,
            channels,
            config: {
              codec: "OPUS",
              head: channels <= 2
                ? buildOpusHead({
                  channels,
                  preSkip: 0,
                  inputSampleRate: opusClockRate,
                  outputGain: 0,
                  mappingFamily: 0,
                })
                : undefined,
            },
          });
        }
      }
      trackId++;
    }
  }

  #addTrack(state: PidState, track: Track): void {
    state.track = track;
    const at = this.tracks.findIndex((t) => t.id === track.id);
    if (at >= 0) this.tracks[at] = track;
    else this.tracks.push(track);
  }

  #pesPacket(state: PidState, payload: Uint8Array, unitStart: boolean, cc: number): void {
    const expected = (state.cc + 1) & 15;
    const duplicate = cc === state.cc;
    if (state.cc >= 0 && !duplicate && cc !== expected && state.collecting) {
      state.collecting = false; // lost packets: this PES is damaged
      state.pesBytes = 0;
      this.#droppedPes++;
    }
    state.cc = cc;
    if (duplicate && !unitStart) return;
    if (unitStart) {
      this.#finishPes(state);
      state.collecting = true;
      state.pesBytes = 0;
    }
    if (!state.collecting) return;
    const need = state.pesBytes + payload.length;
    if (need > this.#maxPesBytes) {
      state.collecting = false;
      state.pesBytes = 0;
      this.#droppedPes++;
      return;
    }
    if (need > state.pes.length) {
      const grown = new Uint8Array(
        Math.min(this.#maxPesBytes, Math.max(need, state.pes.length * 2, 4096)),
      );
      grown.set(state.pes.subarray(0, state.pesBytes));
      state.pes = grown;
    }
    state.pes.set(payload, state.pesBytes);
    state.pesBytes = need;
    // A bounded PES is complete once its declared length is in: emit without waiting.
    if (need >= 6) {
      const declared = (state.pes[4] << 8) | state.pes[5];
      if (declared > 0 && need >= 6 + declared) this.#finishPes(state);
    }
  }

  #finishPes(state: PidState): void {
    if (!state.collecting || state.pesBytes === 0) return;
    state.collecting = false;
    const pes = state.pes.subarray(0, state.pesBytes);
    state.pesBytes = 0;
    try {
      const header = parsePesHeader(pes);
      if (header.pts === undefined) throw new ParseError("PES without PTS");
      const end = header.packetLength > 0
        ? Math.min(pes.length, 6 + header.packetLength)
        : pes.length;
      if (header.payloadOffset > end) throw new ParseError("PES header beyond its length");
      // Frames keep views of the PES: give the next one a fresh buffer.
      const payload = pes.slice(header.payloadOffset, end);
      const pts = this.#unwrap(header.pts);
      const dts = this.#unwrap(header.dts!);
      switch (state.stream.codec) {
        case "H264":
        case "H265":
          this.#video(state, payload, pts, dts);
          break;
        case "AAC":
          this.#aac(state, payload, pts);
          break;
        case "OPUS":
          this.#opus(state, payload, pts);
          break;
        case "MP3":
          this.#mpegAudio(state, payload, pts);
          break;
      }
    } catch (e) {
      if (!(e instanceof ParseError)) throw e;
      this.#droppedPes++;
    }
  }

  /** Maps a 33-bit timestamp to the unwrapped value nearest the last one seen. */
  #unwrap(ts: number): number {
    const last = this.#lastTs90k;
    let value = ts;
    if (last !== undefined) {
      const base = last - (last % timestampWrap + timestampWrap) % timestampWrap;
      value = base + ts;
      if (value - last > timestampWrap / 2) value -= timestampWrap;
      else if (last - value > timestampWrap / 2) value += timestampWrap;
    }
    this.#lastTs90k = value;
    return value;
  }

  #video(state: PidState, payload: Uint8Array, pts: number, dts: number): void {
    const h264 = state.stream.codec === "H264";
    const nals = splitAnnexB(payload).filter((nal) => {
      const type = h264 ? nal[0] & 0x1f : (nal[0] >> 1) & 0x3f;
      return type !== (h264 ? H264NalType.aud : H265NalType.aud);
    });
    let keyframe = false;
    let changed = false;
    for (const nal of nals) {
      const type = h264 ? nal[0] & 0x1f : (nal[0] >> 1) & 0x3f;
      if (h264) {
        if (type === H264NalType.idr) keyframe = true;
        else if (type === H264NalType.sps) changed = setSet(state, "sps", nal) || changed;
        else if (type === H264NalType.pps) changed = setSet(state, "pps", nal) || changed;
      } else {
        if (type >= H265NalType.irapFirst && type <= H265NalType.irapLast) keyframe = true;
        else if (type === H265NalType.vps) changed = setSet(state, "vps", nal) || changed;
        else if (type === H265NalType.sps) changed = setSet(state, "sps", nal) || changed;
        else if (type === H265NalType.pps) changed = setSet(state, "pps", nal) || changed;
      }
    }
    if (changed && state.sps && state.pps && (h264 || state.vps)) {
      const info = h264 ? parseH264Sps(state.sps) : parseH265Sps(state.sps);
      this.#addTrack(state, {
        id: state.trackId,
        kind: "video",
        codec: h264 ? "H264" : "H265",
        clockRate: pesClockRate,
        width: info.width,
        height: info.height,
        config: h264
          ? { codec: "H264", sps: [state.sps], pps: [state.pps] }
          : { codec: "H265", vps: [state.vps!], sps: [state.sps], pps: [state.pps] },
      });
    }
    // Frames before the first parameter sets cannot be decoded by anyone downstream.
    if (!state.track || nals.length === 0) return;
    this.#out.push({
      trackId: state.trackId,
      codec: state.track.codec,
      pts,
      dts,
      keyframe,
      data: joinLengthPrefixed(nals),
    });
  }

  #aac(state: PidState, payload: Uint8Array, pts90k: number): void {
    let pos = 0;
    let samples = 0;
    while (pos < payload.length) {
      const header = parseAdtsHeader(payload, pos);
      if (pos + header.frameBytes > payload.length) throw new ParseError("ADTS frame cut");
      if (!state.track || state.track.sampleRate !== header.sampleRate) {
        const channels = header.channelConfig === 7 ? 8 : header.channelConfig;
        this.#addTrack(state, {
          id: state.trackId,
          kind: "audio",
          codec: "AAC",
          clockRate: header.sampleRate,
          sampleRate: header.sampleRate,
          channels,
          config: { codec: "AAC", asc: adtsToAsc(header) },
        });
      }
      const rate = header.sampleRate;
      const pts = Math.round(pts90k * rate / pesClockRate) + samples;
      this.#out.push({
        trackId: state.trackId,
        codec: "AAC",
        pts,
        dts: pts,
        keyframe: true,
        data: payload.subarray(pos + header.headerBytes, pos + header.frameBytes),
      });
      samples += header.rawBlocks * aacSamplesPerFrame;
      pos += header.frameBytes;
    }
  }

  #mpegAudio(state: PidState, payload: Uint8Array, pts90k: number): void {
    let pos = 0;
    let samples = 0;
    while (pos < payload.length) {
      const header = parseMpegAudioHeader(payload, pos);
      if (pos + header.frameBytes > payload.length) throw new ParseError("MPEG audio frame cut");
      if (!state.track || state.track.sampleRate !== header.sampleRate) {
        this.#addTrack(state, {
          id: state.trackId,
          kind: "audio",
          codec: "MP3",
          clockRate: header.sampleRate,
          sampleRate: header.sampleRate,
          channels: header.channels,
        });
      }
      const pts = Math.round(pts90k * header.sampleRate / pesClockRate) + samples;
      this.#out.push({
        trackId: state.trackId,
        codec: "MP3",
        pts,
        dts: pts,
        keyframe: true,
        data: payload.subarray(pos, pos + header.frameBytes),
      });
      samples += header.samples;
      pos += header.frameBytes;
    }
  }

  #opus(state: PidState, payload: Uint8Array, pts90k: number): void {
    let pos = 0;
    let samples = 0;
    while (pos < payload.length) {
      if (pos + 2 > payload.length) throw new ParseError("Opus control header cut");
      // 11-bit prefix 0x3ff, then start_trim, end_trim and control_extension flags.
      if (payload[pos] !== 0x7f || (payload[pos + 1] & 0xe0) !== 0xe0) {
        throw new ParseError("no Opus control header");
      }
      const flags = payload[pos + 1];
      pos += 2;
      let size = 0;
      for (;;) {
        if (pos >= payload.length) throw new ParseError("Opus au_size cut");
        const b = payload[pos++];
        size += b;
        if (b !== 0xff) break;
      }
      if (flags & 0x10) pos += 2;
      if (flags & 0x08) pos += 2;
      if (flags & 0x04) {
        if (pos >= payload.length) throw new ParseError("Opus control extension cut");
        pos += 1 + payload[pos];
      }
      if (pos + size > payload.length) throw new ParseError("Opus packet cut");
      const packet = payload.subarray(pos, pos + size);
      const pts = Math.round(pts90k * opusClockRate / pesClockRate) + samples;
      samples += opusPacketSamples(packet);
      this.#out.push({
        trackId: state.trackId,
        codec: "OPUS",
        pts,
        dts: pts,
        keyframe: true,
        data: packet,
      });
      pos += size;
    }
  }
}

/** Stores a parameter set; returns true when it differs from the one held. */
function setSet(state: PidState, key: "vps" | "sps" | "pps", nal: Uint8Array): boolean {
  const old = state[key];
  if (old && old.length === nal.length && old.every((b, i) => b === nal[i])) return false;
  state[key] = nal.slice();
  return true;
}
