/**
 * H.265 into RTP (RFC 7798) without DONL: a NAL unit that fits is a single NAL unit packet,
 * a bigger one goes as fragmentation units (type 49). Keyframes that lack a VPS get the
 * track's parameter sets first, so a player can start at any keyframe. The marker bit ends
 * the access unit; access unit delimiters are left out.
 */
import { ParseError } from "../../core/errors.ts";
import { H265NalType } from "../codecs/h265.ts";
import type { MediaFrame } from "../frame.ts";
import { type Packetizer, type PacketSink, rtpMaxPayloadBytes } from "./packetizer.ts";

const fuType = 49;
/** Payload header (2 bytes) plus FU header, in bytes. */
const fuHeaderBytes = 3;
/** Bytes of an H.265 NAL unit header. */
const nalHeaderBytes = 2;

/** Packetizes length-prefixed H.265 access units. */
export class H265Packetizer implements Packetizer {
  #parameterSets: () => readonly Uint8Array[];
  #maxPayloadBytes: number;

  /**
   * `parameterSets`: the track's current VPS, SPS and PPS (read at each keyframe);
   * `maxPayloadBytes`: largest payload, in bytes.
   */
  constructor(
    parameterSets: () => readonly Uint8Array[],
    maxPayloadBytes: number = rtpMaxPayloadBytes,
  ) {
    if (maxPayloadBytes <= fuHeaderBytes) throw new RangeError("payload limit too small for FU");
    this.#parameterSets = parameterSets;
    this.#maxPayloadBytes = maxPayloadBytes;
  }

  packetize(frame: MediaFrame, emit: PacketSink): void {
    const data = frame.data;
    let last = -1;
    let hasVps = false;
    for (let pos = 0; pos < data.length;) {
      if (pos + 4 > data.length) throw new ParseError("NAL length prefix cut");
      const length = readLength(data, pos);
      if (length < nalHeaderBytes || pos + 4 + length > data.length) {
        throw new ParseError("NAL unit longer than its access unit");
      }
      const type = (data[pos + 4] >> 1) & 0x3f;
      if (type === H265NalType.vps) hasVps = true;
      if (type !== H265NalType.aud) last = pos;
      pos += 4 + length;
    }
    if (last < 0) return;
    if (frame.keyframe && !hasVps) {
      for (const nal of this.#parameterSets()) this.#nal(nal, false, emit);
    }
    for (let pos = 0; pos <= last;) {
      const length = readLength(data, pos);
      const nal = data.subarray(pos + 4, pos + 4 + length);
      if (((nal[0] >> 1) & 0x3f) !== H265NalType.aud) this.#nal(nal, pos === last, emit);
      pos += 4 + length;
    }
  }

  #nal(nal: Uint8Array, marker: boolean, emit: PacketSink): void {
    const max = this.#maxPayloadBytes;
    if (nal.length <= max) {
      emit(nal, marker, 0);
      return;
    }
    const type = (nal[0] >> 1) & 0x3f;
    // The payload header is the NAL header with the type replaced (F and layer id kept).
    const header0 = (nal[0] & 0x81) | (fuType << 1);
    const header1 = nal[1];
    const chunk = max - fuHeaderBytes;
    for (let pos = nalHeaderBytes; pos < nal.length; pos += chunk) {
      const end = Math.min(pos + chunk, nal.length);
      const payload = new Uint8Array(fuHeaderBytes + end - pos);
      payload[0] = header0;
      payload[1] = header1;
      payload[2] = (pos === nalHeaderBytes ? 0x80 : 0) | (end === nal.length ? 0x40 : 0) | type;
      payload.set(nal.subarray(pos, end), fuHeaderBytes);
      emit(payload, marker && end === nal.length, 0);
    }
  }
}

function readLength(data: Uint8Array, pos: number): number {
  return ((data[pos] << 24) | (data[pos + 1] << 16) | (data[pos + 2] << 8) | data[pos + 3]) >>> 0;
}
