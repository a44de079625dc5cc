/**
 * H.265 over RTP (RFC 7798) without DONL (sprop-max-don-diff 0): single NAL unit packets,
 * aggregation packets (AP) and fragmentation units (FU). PACI packets are refused.
 */
import { ParseError, TruncatedError } from "../../core/errors.ts";
import type { MediaFrame } from "../frame.ts";
import { H265NalType } from "../codecs/h265.ts";
import type { Depacketizer } from "./depacketizer.ts";
import { NalAssembler } from "./nal_assembler.ts";
import type { RtpPacket } from "./packet.ts";

const aggregationPacket = 48;
const fragmentationUnit = 49;

function isIrap(type: number): boolean {
  return type >= H265NalType.irapFirst && type <= H265NalType.irapLast;
}

/** Builds H.265 access units from RTP packets. */
export class H265Depacketizer implements Depacketizer {
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
    if (p.length < 3) throw new TruncatedError("H.265 RTP payload too short");
    if (p[0] & 0x80) throw new ParseError("H.265 NAL header with the forbidden bit set");
    const type = (p[0] >> 1) & 0x3f;
    try {
      if (type < aggregationPacket) {
        this.#add(p);
      } else if (type === aggregationPacket) {
        let pos = 2;
        while (pos < p.length) {
          if (pos + 2 > p.length) throw new TruncatedError("AP size cut");
          const size = (p[pos] << 8) | p[pos + 1];
          pos += 2;
          if (size < 2 || pos + size > p.length) throw new TruncatedError("AP unit cut");
          this.#add(p.subarray(pos, pos + size));
          pos += size;
        }
      } else if (type === fragmentationUnit) {
        if (p.length < 4) throw new TruncatedError("H.265 FU too short");
        const fuHeader = p[2];
        const nalType = fuHeader & 0x3f;
        if (fuHeader & 0x80) {
          this.#au.startFragment(Uint8Array.of((p[0] & 0x81) | (nalType << 1), p[1]));
          if (isIrap(nalType)) this.#keyframe = true;
        } else if (!this.#au.fragmentOpen) {
          return;
        }
        this.#au.appendFragment(p.subarray(3));
        if (fuHeader & 0x40) this.#au.endFragment();
      } else {
        throw new ParseError(`H.265 RTP packet type ${type} is not supported`);
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
    if (isIrap((nal[0] >> 1) & 0x3f)) this.#keyframe = true;
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
      codec: "H265",
      pts: this.#timestamp,
      dts: this.#timestamp,
      keyframe,
      data,
    });
  }
}
