/**
 * H.264 over RTP (RFC 6184), non-interleaved mode: single NAL unit packets, STAP-A and FU-A.
 * An access unit ends at the marker bit, or when the timestamp changes without one.
 */
import { ParseError, TruncatedError } from "../../core/errors.ts";
import type { MediaFrame } from "../frame.ts";
import { H264NalType } from "../codecs/h264.ts";
import type { Depacketizer } from "./depacketizer.ts";
import { NalAssembler } from "./nal_assembler.ts";
import type { RtpPacket } from "./packet.ts";

const stapA = 24;
const fuA = 28;

/** Builds H.264 access units from RTP packets. */
export class H264Depacketizer implements Depacketizer {
  #trackId: number;
  #au = new NalAssembler();
  #timestamp = -1;
  #keyframe = false;

  /** `trackId`: the track the frames belong to. */
  constructor(trackId: number) {
    this.#trackId = trackId;
  }

  push(packet: RtpPacket, emit: (frame: MediaFrame) => void): void {
    if (!this.#au.empty && packet.timestamp !== this.#timestamp) this.#flush(emit);
    this.#timestamp = packet.timestamp;
    const p = packet.payload;
    if (p.length === 0) throw new TruncatedError("empty H.264 RTP payload");
    if (p[0] & 0x80) throw new ParseError("H.264 NAL header with the forbidden bit set");
    const type = p[0] & 0x1f;
    try {
      if (type >= 1 && type <= 23) {
        this.#add(p);
      } else if (type === stapA) {
        let pos = 1;
        while (pos < p.length) {
          if (pos + 2 > p.length) throw new TruncatedError("STAP-A size cut");
          const size = (p[pos] << 8) | p[pos + 1];
          pos += 2;
          if (size === 0 || pos + size > p.length) throw new TruncatedError("STAP-A unit cut");
          this.#add(p.subarray(pos, pos + size));
          pos += size;
        }
      } else if (type === fuA) {
        if (p.length < 3) throw new TruncatedError("FU-A too short");
        const fuHeader = p[1];
        const nalType = fuHeader & 0x1f;
        if (fuHeader & 0x80) {
          this.#au.startFragment(Uint8Array.of((p[0] & 0xe0) | nalType));
          if (nalType === H264NalType.idr) this.#keyframe = true;
        } else if (!this.#au.fragmentOpen) {
          // Its start was lost: nothing to append to until the next start.
          return;
        }
        this.#au.appendFragment(p.subarray(2));
        if (fuHeader & 0x40) this.#au.endFragment();
      } else {
        throw new ParseError(`H.264 RTP packet type ${type} is not supported`);
      }
    } catch (err) {
      this.reset();
      throw err;
    }
    if (packet.marker) this.#flush(emit);
  }

  reset(): void {
    this.#au.reset();
    this.#keyframe = false;
  }

  #add(nal: Uint8Array): void {
    if ((nal[0] & 0x1f) === H264NalType.idr) this.#keyframe = true;
    this.#au.addNal(nal);
  }

  #flush(emit: (frame: MediaFrame) => void): void {
    const keyframe = this.#keyframe;
    this.#keyframe = false;
    if (this.#au.empty) return;
    const data = this.#au.take();
    if (data.length === 0) return;
    emit({
      trackId: this.#trackId,
      codec: "H264",
      pts: this.#timestamp,
      dts: this.#timestamp,
      keyframe,
      data,
    });
  }
}
