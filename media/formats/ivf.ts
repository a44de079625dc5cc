/**
 * IVF, the plain VP8 container of libvpx: a 32-byte file header, then each frame behind a
 * 12-byte header (size, 64-bit timestamp). The codec engine reads VP8 from it, since
 * MPEG-TS has no VP8 mapping.
 */
import { ParseError, TruncatedError } from "../../core/errors.ts";

/** Bytes of the file header. */
const fileHeaderBytes = 32;
/** Bytes of each frame header. */
const frameHeaderBytes = 12;

/** An IVF file of VP8 `frames` (whole frames, in decode order) of the given picture size. */
export function ivfOf(frames: readonly Uint8Array[], width: number, height: number): Uint8Array {
  const size = fileHeaderBytes + frames.reduce((n, f) => n + frameHeaderBytes + f.length, 0);
  const out = new Uint8Array(size);
  const view = new DataView(out.buffer);
  // Time base 1/30 s: timestamps count frames here.
  writeFileHeader(view, width, height, 30, frames.length);
  let at = fileHeaderBytes;
  frames.forEach((frame, i) => {
    view.setUint32(at, frame.length, true);
    view.setBigUint64(at + 4, BigInt(i), true);
    out.set(frame, at + frameHeaderBytes);
    at += frameHeaderBytes + frame.length;
  });
  return out;
}

/**
 * Incremental IVF writer of a VP8 stream of one picture size (a pipe to ffmpeg): the first
 * frame comes with the file header, whose frame count is 0 (unknown).
 */
export class IvfWriter {
  #header: Uint8Array | undefined;

  /** Timestamps are in 1/`clockRate` s (90000: the media plane's video pts as they are). */
  constructor(width: number, height: number, clockRate: number) {
    this.#header = new Uint8Array(fileHeaderBytes);
    writeFileHeader(new DataView(this.#header.buffer), width, height, clockRate, 0);
  }

  /** The bytes of one frame (its header and data, after the file header the first time). */
  frame(data: Uint8Array, timestamp: number): Uint8Array {
    const before = this.#header?.length ?? 0;
    const out = new Uint8Array(before + frameHeaderBytes + data.length);
    if (this.#header) out.set(this.#header);
    this.#header = undefined;
    const view = new DataView(out.buffer, before);
    view.setUint32(0, data.length, true);
    view.setBigInt64(4, BigInt(timestamp), true);
    out.set(data, before + frameHeaderBytes);
    return out;
  }
}

/** Writes a VP8 file header of timestamps in 1/`timeBaseDen` s at the start of `view`. */
function writeFileHeader(
  view: DataView,
  width: number,
  height: number,
  timeBaseDen: number,
  frameCount: number,
): void {
  [0x44, 0x4b, 0x49, 0x46].forEach((b, i) => view.setUint8(i, b)); // "DKIF"
  view.setUint16(4, 0, true); // version
  view.setUint16(6, fileHeaderBytes, true);
  [0x56, 0x50, 0x38, 0x30].forEach((b, i) => view.setUint8(8 + i, b)); // "VP80"
  view.setUint16(12, width, true);
  view.setUint16(14, height, true);
  view.setUint32(16, timeBaseDen, true);
  view.setUint32(20, 1, true);
  view.setUint32(24, frameCount, true);
}

/** What an IVF file header says. */
export interface IvfHeader {
  /** The codec's four-character code, e.g. "VP80". */
  fourcc: string;
  width: number;
  height: number;
  /** Time base of the frame timestamps: `timeBaseNum / timeBaseDen` seconds per tick. */
  timeBaseNum: number;
  timeBaseDen: number;
}

/** One frame of an IVF stream. */
export interface IvfFrame {
  /** Presentation time in the header's time base. */
  timestamp: number;
  data: Uint8Array;
}

/** Default largest frame an IvfReader accepts, in bytes (a 4K VP8 keyframe fits). */
export const defaultMaxIvfFrameBytes = 8 * 1024 * 1024;
/** Largest file header accepted, in bytes: the format defines 32, writers never add much. */
const maxFileHeaderBytes = 1024;

/** Options of an IvfReader. */
export interface IvfReaderOptions {
  /** Largest frame accepted; a bigger size field is a ParseError. In bytes. */
  maxFrameBytes?: number;
}

/**
 * Incremental IVF reader: push byte chunks of any size (a pipe from ffmpeg), get whole frames.
 * It buffers at most one frame and its header; bad input is a ParseError, after which the
 * reader must not be used again (IVF has no sync marker to resume at).
 */
export class IvfReader {
  #maxFrameBytes: number;
  #header: IvfHeader | undefined;
  #buffer = new Uint8Array(0);
  #start = 0;
  #end = 0;

  constructor(options: IvfReaderOptions = {}) {
    this.#maxFrameBytes = options.maxFrameBytes ?? defaultMaxIvfFrameBytes;
  }

  /** The file header, once its bytes have been pushed. */
  get header(): IvfHeader | undefined {
    return this.#header;
  }

  /** Bytes held waiting for the rest of a header or frame. */
  get bufferedBytes(): number {
    return this.#end - this.#start;
  }

  /** Feeds bytes; returns the frames they complete (copies, owned by the caller). */
  push(chunk: Uint8Array): IvfFrame[] {
    const frames: IvfFrame[] = [];
    let input = chunk;
    while (input.length > 0) {
      // Only as many bytes as the unit being read needs are buffered, which bounds memory.
      const take = Math.min(input.length, Math.max(0, this.#needed() - this.bufferedBytes));
      this.#append(input.subarray(0, take));
      input = input.subarray(take);
      this.#parse(frames);
    }
    return frames;
  }

  /** Ends the input: a TruncatedError when it stopped inside the header or a frame. */
  end(): void {
    if (!this.#header) throw new TruncatedError("IVF file header cut");
    if (this.bufferedBytes > 0) throw new TruncatedError("IVF frame cut");
  }

  /** Bytes the unit at the read position needs, as far as its known fields tell. */
  #needed(): number {
    const view = this.#view();
    if (!this.#header) {
      return view.length < 8 ? 8 : view[6] | (view[7] << 8);
    }
    if (view.length < frameHeaderBytes) return frameHeaderBytes;
    return frameHeaderBytes + readUint32LE(view, 0);
  }

  #parse(frames: IvfFrame[]): void {
    for (;;) {
      const view = this.#view();
      if (!this.#header) {
        if (view.length < 8) return;
        if (view[0] !== 0x44 || view[1] !== 0x4b || view[2] !== 0x49 || view[3] !== 0x46) {
          throw new ParseError("not an IVF stream (no DKIF signature)");
        }
        const headerBytes = view[6] | (view[7] << 8);
        if (headerBytes < fileHeaderBytes || headerBytes > maxFileHeaderBytes) {
          throw new ParseError(`IVF header length ${headerBytes} out of range`);
        }
        if (view.length < headerBytes) return;
        const header = parseFileHeader(view);
        this.#start += headerBytes;
        this.#header = header;
        continue;
      }
      if (view.length < frameHeaderBytes) return;
      const size = readUint32LE(view, 0);
      if (size > this.#maxFrameBytes) {
        throw new ParseError(`IVF frame of ${size} bytes exceeds ${this.#maxFrameBytes}`);
      }
      if (view.length < frameHeaderBytes + size) return;
      const timestamp = Number(
        new DataView(view.buffer, view.byteOffset + 4, 8).getBigInt64(0, true),
      );
      if (!Number.isSafeInteger(timestamp)) {
        throw new ParseError("IVF frame timestamp out of range");
      }
      frames.push({
        timestamp,
        data: view.slice(frameHeaderBytes, frameHeaderBytes + size),
      });
      this.#start += frameHeaderBytes + size;
    }
  }

  #view(): Uint8Array {
    return this.#buffer.subarray(this.#start, this.#end);
  }

  #append(bytes: Uint8Array): void {
    if (bytes.length === 0) return;
    const held = this.#end - this.#start;
    if (this.#start > 0) {
      this.#buffer.copyWithin(0, this.#start, this.#end);
      this.#start = 0;
      this.#end = held;
    }
    if (held + bytes.length > this.#buffer.length) {
      const grown = new Uint8Array(Math.max(held + bytes.length, this.#buffer.length * 2, 4096));
      grown.set(this.#buffer.subarray(0, held));
      this.#buffer = grown;
    }
    this.#buffer.set(bytes, this.#end);
    this.#end += bytes.length;
  }
}

/** The fields of a whole file header (signature and length already checked). */
function parseFileHeader(bytes: Uint8Array): IvfHeader {
  const view = new DataView(bytes.buffer, bytes.byteOffset, fileHeaderBytes);
  const timeBaseDen = view.getUint32(16, true);
  const timeBaseNum = view.getUint32(20, true);
  if (timeBaseDen === 0 || timeBaseNum === 0) throw new ParseError("IVF time base is zero");
  return {
    fourcc: String.fromCharCode(...bytes.subarray(8, 12)),
    width: view.getUint16(12, true),
    height: view.getUint16(14, true),
    timeBaseNum,
    timeBaseDen,
  };
}

function readUint32LE(bytes: Uint8Array, at: number): number {
  return (bytes[at] | (bytes[at + 1] << 8) | (bytes[at + 2] << 16) | (bytes[at + 3] << 24)) >>>
    0;
}
