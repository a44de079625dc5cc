/**
 * ISO BMFF box parsing over bytes in memory (ISO 14496-12 §4.2), with a bounds-checked
 * cursor for box payloads. Reading the file itself is the demuxer's job.
 */

import { ParseError, TruncatedError } from "../../../core/errors.ts";

/** A box located in a byte array. */
export interface Box {
  /** Four-character type, e.g. "moov". */
  type: string;
  /** Offset of the box's first byte in the array it was read from. */
  start: number;
  /** Header length (8, 16 with a 64-bit size, +16 for "uuid"), in bytes. */
  headerBytes: number;
  /** Whole box length, header included, in bytes. */
  size: number;
  /** The payload, as a view. */
  payload: Uint8Array;
}

/** Header of a box: its type, header length and total length in bytes. */
export interface BoxHeader {
  type: string;
  headerBytes: number;
  /** Whole box length in bytes; `undefined` when the box extends to the end of the file. */
  size: number | undefined;
}

/** Longest box header (64-bit size + uuid), in bytes: what a reader must fetch to parse one. */
export const maxBoxHeaderBytes = 32;

function fourCC(data: Uint8Array, offset: number): string {
  return String.fromCharCode(data[offset], data[offset + 1], data[offset + 2], data[offset + 3]);
}

/** Parses the box header at `offset` of `data` (which may hold only the header). */
export function readBoxHeader(data: Uint8Array, offset: number): BoxHeader {
  if (data.length - offset < 8) throw new TruncatedError("box header cut");
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  let size: number | undefined = view.getUint32(offset);
  const type = fourCC(data, offset + 4);
  let headerBytes = 8;
  if (size === 1) {
    if (data.length - offset < 16) throw new TruncatedError("box header cut");
    const high = view.getUint32(offset + 8);
    if (high >= 0x200000) throw new ParseError(`box ${type} larger than 2^53 bytes`);
    size = high * 2 ** 32 + view.getUint32(offset + 12);
    headerBytes = 16;
  } else if (size === 0) {
    size = undefined;
  }
  if (type === "uuid") headerBytes += 16;
  if (size !== undefined && size < headerBytes) throw new ParseError(`box ${type} too small`);
  return { type, headerBytes, size };
}

/** The boxes laid end to end in `data[start, end)`; a box running past `end` is a ParseError. */
export function* iterateBoxes(data: Uint8Array, start = 0, end = data.length): Generator<Box> {
  let offset = start;
  while (offset < end) {
    const header = readBoxHeader(data.subarray(0, end), offset);
    const size = header.size ?? end - offset;
    if (size < header.headerBytes || offset + size > end) {
      throw new ParseError(`box ${header.type} runs past its parent`);
    }
    yield {
      type: header.type,
      start: offset,
      headerBytes: header.headerBytes,
      size,
      payload: data.subarray(offset + header.headerBytes, offset + size),
    };
    offset += size;
  }
}

/** The first child box of `type` in `data`, if any. */
export function findBox(data: Uint8Array, type: string): Box | undefined {
  for (const box of iterateBoxes(data)) if (box.type === type) return box;
  return undefined;
}

/** Big-endian cursor over a box payload; reads past the end throw TruncatedError. */
export class ByteReader {
  readonly data: Uint8Array;
  #view: DataView;
  /** Offset of the next byte to read. */
  pos: number;

  constructor(data: Uint8Array, pos = 0) {
    this.data = data;
    this.#view = new DataView(data.buffer, data.byteOffset, data.byteLength);
    this.pos = pos;
  }

  /** Bytes not read yet. */
  get left(): number {
    return this.data.length - this.pos;
  }

  #need(bytes: number): number {
    if (this.pos + bytes > this.data.length) throw new TruncatedError("box payload cut");
    const at = this.pos;
    this.pos += bytes;
    return at;
  }

  u8(): number {
    return this.data[this.#need(1)];
  }
  u16(): number {
    return this.#view.getUint16(this.#need(2));
  }
  i16(): number {
    return this.#view.getInt16(this.#need(2));
  }
  u24(): number {
    const at = this.#need(3);
    return (this.data[at] << 16) | (this.data[at + 1] << 8) | this.data[at + 2];
  }
  u32(): number {
    return this.#view.getUint32(this.#need(4));
  }
  i32(): number {
    return this.#view.getInt32(this.#need(4));
  }
  /** An unsigned 64-bit integer; values above 2^53 are a ParseError. */
  u64(): number {
    const high = this.u32();
    const low = this.u32();
    if (high >= 0x200000) throw new ParseError("64-bit value above 2^53");
    return high * 2 ** 32 + low;
  }
  /** A signed 64-bit integer within ±2^53. */
  i64(): number {
    const high = this.i32();
    const low = this.u32();
    if (high >= 0x200000 || high < -0x200000) throw new ParseError("64-bit value beyond 2^53");
    return high * 2 ** 32 + low;
  }
  /** A view of the next `length` bytes. */
  bytes(length: number): Uint8Array {
    const at = this.#need(length);
    return this.data.subarray(at, at + length);
  }
  skip(length: number): void {
    this.#need(length);
  }
  /** Version and flags of a full box, as [version, flags]. */
  fullBox(): [number, number] {
    const v = this.u32();
    return [v >>> 24, v & 0xffffff];
  }
}
