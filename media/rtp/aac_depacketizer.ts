/**
 * MPEG-4 audio over RTP (RFC 3640, mpeg4-generic), as cameras send AAC: AU headers with
 * sizes (AAC-hbr, AAC-lbr or explicit lengths from fmtp), several AUs per packet, or one AU
 * fragmented over packets up to the marker bit.
 */
import { ParseError, TruncatedError } from "../../core/errors.ts";
import type { MediaFrame } from "../frame.ts";
import { aacSamplesPerFrame } from "../codecs/aac.ts";
import { type Depacketizer, maxAccessUnitBytes } from "./depacketizer.ts";
import type { RtpPacket } from "./packet.ts";

/** Most AUs accepted in one packet. */
export const maxAusPerPacket = 128;

/** The AU header layout of an RFC 3640 stream (from its fmtp), in bits. */
export interface AuHeaderLayout {
  sizeLength: number;
  indexLength: number;
  indexDeltaLength: number;
}

/** The AU header layout of fmtp parameters; a stream without AU sizes is a ParseError. */
export function auHeaderLayout(params: Map<string, string>): AuHeaderLayout {
  const num = (name: string, fallback: number) => {
    const v = params.get(name);
    if (v === undefined) return fallback;
    if (!/^\d{1,2}$/.test(v)) throw new ParseError(`bad mpeg4-generic ${name}`);
    return Number(v);
  };
  const mode = params.get("mode")?.toLowerCase();
  const hbr = mode === "aac-hbr";
  const lbr = mode === "aac-lbr";
  const layout = {
    sizeLength: num("sizelength", hbr ? 13 : lbr ? 6 : 0),
    indexLength: num("indexlength", hbr ? 3 : lbr ? 2 : 0),
    indexDeltaLength: num("indexdeltalength", hbr ? 3 : lbr ? 2 : 0),
  };
  if (
    layout.sizeLength === 0 || layout.sizeLength > 16 || layout.indexLength > 16 ||
    layout.indexDeltaLength > 16
  ) {
    throw new ParseError("mpeg4-generic stream without usable AU sizes");
  }
  return layout;
}

function readBits(data: Uint8Array, bitPos: number, count: number): number {
  let value = 0;
  for (let i = 0; i < count; i++) {
    const bit = bitPos + i;
    value = (value << 1) | ((data[bit >> 3] >> (7 - (bit & 7))) & 1);
  }
  return value;
}

/** Builds raw AAC access units from RFC 3640 packets. */
export class AacDepacketizer implements Depacketizer {
  #trackId: number;
  #layout: AuHeaderLayout;
  #fragments: Uint8Array[] = [];
  #fragmentBytes = 0;
  #fragmentSize = 0;

  /** `trackId`: the track the frames belong to; `layout` from the fmtp. */
  constructor(trackId: number, layout: AuHeaderLayout) {
    this.#trackId = trackId;
    this.#layout = layout;
  }

  push(packet: RtpPacket, emit: (frame: MediaFrame) => void): void {
    const p = packet.payload;
    if (p.length < 2) throw new TruncatedError("mpeg4-generic payload without AU headers");
    const headerBits = (p[0] << 8) | p[1];
    const headerBytes = (headerBits + 7) >> 3;
    if (2 + headerBytes > p.length) throw new TruncatedError("AU headers longer than the packet");
    const { sizeLength, indexLength, indexDeltaLength } = this.#layout;
    const headers = p.subarray(2, 2 + headerBytes);
    let data = 2 + headerBytes;
    let bit = 0;
    let index = 0;
    if (this.#fragments.length > 0) {
      this.#continueFragment(packet, headers, data, emit);
      return;
    }
    while (bit < headerBits) {
      const indexBits = index === 0 ? indexLength : indexDeltaLength;
      if (bit + sizeLength + indexBits > headerBits) throw new ParseError("AU header cut");
      const size = readBits(headers, bit, sizeLength);
      bit += sizeLength + indexBits;
      if (index >= maxAusPerPacket) throw new ParseError("too many AUs in one packet");
      if (size === 0) throw new ParseError("AU of size 0");
      if (data + size > p.length) {
        // One AU larger than the packet: its fragments follow up to the marker bit.
        if (index !== 0 || bit < headerBits || packet.marker) {
          throw new TruncatedError("AU longer than its packet");
        }
        if (size > maxAccessUnitBytes) throw new ParseError("AU too large");
        this.#fragmentSize = size;
        this.#fragments.push(p.subarray(data));
        this.#fragmentBytes = p.length - data;
        return;
      }
      const ts = (packet.timestamp + index * aacSamplesPerFrame) >>> 0;
      emit({
        trackId: this.#trackId,
        codec: "AAC",
        pts: ts,
        dts: ts,
        keyframe: true,
        data: p.subarray(data, data + size),
      });
      data += size;
      index++;
    }
  }

  reset(): void {
    this.#fragments.length = 0;
    this.#fragmentBytes = 0;
  }

  #continueFragment(
    packet: RtpPacket,
    headers: Uint8Array,
    data: number,
    emit: (frame: MediaFrame) => void,
  ): void {
    const size = readBits(headers, 0, this.#layout.sizeLength);
    if (size !== this.#fragmentSize) {
      this.reset();
      throw new ParseError("AU fragment of another size than its start");
    }
    const chunk = packet.payload.subarray(data);
    this.#fragmentBytes += chunk.length;
    if (this.#fragmentBytes > size) {
      this.reset();
      throw new ParseError("AU fragments longer than the AU");
    }
    this.#fragments.push(chunk);
    if (!packet.marker) return;
    if (this.#fragmentBytes !== size) {
      this.reset();
      throw new TruncatedError("AU fragments shorter than the AU");
    }
    const out = new Uint8Array(size);
    let pos = 0;
    for (const f of this.#fragments) {
      out.set(f, pos);
      pos += f.length;
    }
    this.reset();
    emit({
      trackId: this.#trackId,
      codec: "AAC",
      pts: packet.timestamp,
      dts: packet.timestamp,
      keyframe: true,
      data: out,
    });
  }
}
