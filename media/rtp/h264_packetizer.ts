/**
 * H.264 into RTP (RFC 6184), packetization-mode 1: a NAL unit that fits is sent as a single
 * NAL unit packet, a bigger one as FU-A fragments. Keyframes that lack SPS and PPS get the
 * track's parameter sets first, so a player can start at any keyframe. The marker bit ends
 * the access unit.
 */
import { ParseError } from "../../core/errors.ts";
import { H264NalType } from "../codecs/h264.ts";
import type { MediaFrame } from "../frame.ts";
import { type Packetizer, type PacketSink, rtpMaxPayloadBytes } from "./packetizer.ts";

const fuA = 28;
/** FU indicator plus FU header, in bytes. */
const fuHeaderBytes = 2;

/** Packetizes length-prefixed H.264 access units. */
export class H264Packetizer implements Packetizer {
  #parameterSets: () => readonly Uint8Array[];
  #maxPayloadBytes: number;

  /**
   * `parameterSets`: the track's current SPS and PPS (read at each keyframe, since a source
   * may change them); `maxPayloadBytes`: largest payload, in bytes.
   */
  constructor(
    parameterSets: () => readonly Uint8Array[],
    maxPayloadBytes: number = rtpMaxPayloadBytes,
  ) {
    if (maxPayloadBytes <= fuHeaderBytes) throw new RangeError("payload limit too small for FU-A");
    this.#parameterSets = parameterSets;
    this.#maxPayloadBytes = maxPayloadBytes;
  }

  packetize(frame: MediaFrame, emit: PacketSink): void {
    const data = frame.data;
    // One pass to validate and to find the last NAL (it carries the marker) before sending.
    let last = -1;
    let hasSps = false;
    for (let pos = 0; pos < data.length;) {
      if (pos + 4 > data.length) throw new ParseError("NAL length prefix cut");
      const length = readLength(data, pos);
      if (length === 0 || pos + 4 + length > data.length) {
        throw new ParseError("NAL unit longer than its access unit");
      }
      const type = data[pos + 4] & 0x1f;
      if (type === H264NalType.sps) hasSps = true;
      if (type !== H264NalType.aud) last = pos;
      pos += 4 + length;
    }
    if (last < 0) return;
    if (frame.keyframe && !hasSps) {
      for (const nal of this.#parameterSets()) this.#nal(nal, false, emit);
    }
    for (let pos = 0; pos <= last;) {
      const length = readLength(data, pos);
      const nal = data.subarray(pos + 4, pos + 4 + length);
      // Access unit delimiters mean nothing to a WebRTC receiver.
      if ((nal[0] & 0x1f) !== H264NalType.aud) this.#nal(nal, pos === last, emit);
      pos += 4 + length;
    }
  }

  #nal(nal: Uint8Array, marker: boolean, emit: PacketSink): void {
    const max = this.#maxPayloadBytes;
    if (nal.length <= max) {
      emit(nal, marker, 0);
      return;
    }
    const indicator = (nal[0] & 0xe0) | fuA;
    const type = nal[0] & 0x1f;
    const chunk = max - fuHeaderBytes;
    // The NAL header byte is carried by the FU indicator and header, not the fragments.
    for (let pos = 1; pos < nal.length; pos += chunk) {
      const end = Math.min(pos + chunk, nal.length);
      const payload = new Uint8Array(fuHeaderBytes + end - pos);
      payload[0] = indicator;
      payload[1] = (pos === 1 ? 0x80 : 0) | (end === nal.length ? 0x40 : 0) | type;
      payload.set(nal.subarray(pos, end), fuHeaderBytes);
      emit(payload, marker && end === nal.length, 0);
    }
  }
}

function readLength(data: Uint8Array, pos: number): number {
  return ((data[pos] << 24) | (data[pos + 1] << 16) | (data[pos + 2] << 8) | data[pos + 3]) >>> 0;
}
