/**
 * AMF0 (Adobe Action Message Format 0), the encoding of RTMP commands and metadata: numbers,
 * booleans, strings, objects, ECMA and strict arrays, null/undefined and dates. Decoding is
 * bounded: nesting depth and element counts are checked against the bytes present.
 */
import { ParseError, TruncatedError } from "../../../core/errors.ts";

/** An AMF0 value as JavaScript sees it (objects and ECMA arrays both decode to objects). */
export type AmfValue =
  | number
  | boolean
  | string
  | null
  | undefined
  | Date
  | AmfValue[]
  | AmfObject;
/** An AMF0 object or ECMA array. */
export interface AmfObject {
  [key: string]: AmfValue;
}

/** Deepest nesting of objects and arrays accepted. */
export const maxAmfDepth = 32;

const Marker = {
  number: 0,
  boolean: 1,
  string: 2,
  object: 3,
  null: 5,
  undefined: 6,
  ecmaArray: 8,
  objectEnd: 9,
  strictArray: 10,
  date: 11,
  longString: 12,
  unsupported: 13,
  xmlDocument: 15,
  typedObject: 16,
} as const;

const utf8 = new TextDecoder("utf-8", { fatal: false });
const utf8Encoder = new TextEncoder();

class Amf0Decoder {
  #view: DataView;
  pos: number;
  constructor(readonly data: Uint8Array, pos: number) {
    this.#view = new DataView(data.buffer, data.byteOffset, data.length);
    this.pos = pos;
  }

  #need(bytes: number): void {
    if (this.pos + bytes > this.data.length) throw new TruncatedError("AMF0 value cut");
  }

  #u16(): number {
    this.#need(2);
    const v = this.#view.getUint16(this.pos);
    this.pos += 2;
    return v;
  }

  #u32(): number {
    this.#need(4);
    const v = this.#view.getUint32(this.pos);
    this.pos += 4;
    return v;
  }

  #utf8(length: number): string {
    this.#need(length);
    const s = utf8.decode(this.data.subarray(this.pos, this.pos + length));
    this.pos += length;
    return s;
  }

  #properties(depth: number): AmfObject {
    const out: AmfObject = {};
    for (;;) {
      const key = this.#utf8(this.#u16());
      this.#need(1);
      if (key === "" && this.data[this.pos] === Marker.objectEnd) {
        this.pos++;
        return out;
      }
      // defineProperty: a key named __proto__ must stay data, not change the prototype.
      Object.defineProperty(out, key, {
        value: this.value(depth + 1),
        enumerable: true,
        writable: true,
        configurable: true,
      });
    }
  }

  value(depth = 0): AmfValue {
    if (depth > maxAmfDepth) throw new ParseError("AMF0 nesting too deep");
    this.#need(1);
    const marker = this.data[this.pos++];
    switch (marker) {
      case Marker.number: {
        this.#need(8);
        const v = this.#view.getFloat64(this.pos);
        this.pos += 8;
        return v;
      }
      case Marker.boolean:
        this.#need(1);
        return this.data[this.pos++] !== 0;
      case Marker.string:
        return this.#utf8(this.#u16());
      case Marker.longString:
      case Marker.xmlDocument:
        return this.#utf8(this.#u32());
      case Marker.object:
        return this.#properties(depth);
      case Marker.typedObject:
        this.#utf8(this.#u16()); // class name
        return this.#properties(depth);
      case Marker.ecmaArray:
        this.#u32(); // count hint; the end marker is authoritative
        return this.#properties(depth);
      case Marker.null:
        return null;
      case Marker.undefined:
      case Marker.unsupported:
        return undefined;
      case Marker.strictArray: {
        const count = this.#u32();
        // Each element takes at least one byte: a count beyond the bytes left is a lie.
        if (count > this.data.length - this.pos) throw new TruncatedError("AMF0 array cut");
        const out: AmfValue[] = [];
        for (let i = 0; i < count; i++) out.push(this.value(depth + 1));
        return out;
      }
      case Marker.date: {
        this.#need(10);
        const ms = this.#view.getFloat64(this.pos);
        this.pos += 10; // the 2-byte time zone is reserved and ignored
        return new Date(ms);
      }
      default:
        throw new ParseError(`AMF0 marker ${marker} not supported`);
    }
  }
}

/** Decodes the AMF0 value at `offset`; returns it and the offset after it. */
export function decodeAmf0(data: Uint8Array, offset = 0): { value: AmfValue; offset: number } {
  const decoder = new Amf0Decoder(data, offset);
  const value = decoder.value();
  return { value, offset: decoder.pos };
}

/** Decodes every AMF0 value of `data` (a command or data message payload). */
export function decodeAmf0All(data: Uint8Array): AmfValue[] {
  const decoder = new Amf0Decoder(data, 0);
  const out: AmfValue[] = [];
  while (decoder.pos < data.length) out.push(decoder.value());
  return out;
}

class Amf0Encoder {
  #chunks: number[] = [];

  #bytes(b: Uint8Array): void {
    for (const x of b) this.#chunks.push(x);
  }

  #u16(v: number): void {
    this.#chunks.push((v >> 8) & 0xff, v & 0xff);
  }

  #u32(v: number): void {
    this.#chunks.push((v >>> 24) & 0xff, (v >> 16) & 0xff, (v >> 8) & 0xff, v & 0xff);
  }

  #key(key: string): void {
    const b = utf8Encoder.encode(key);
    if (b.length > 0xffff) throw new ParseError("AMF0 key too long");
    this.#u16(b.length);
    this.#bytes(b);
  }

  value(v: AmfValue, depth = 0): void {
    if (depth > maxAmfDepth) throw new ParseError("AMF0 nesting too deep");
    if (typeof v === "number") {
      const b = new Uint8Array(8);
      new DataView(b.buffer).setFloat64(0, v);
      this.#chunks.push(Marker.number);
      this.#bytes(b);
    } else if (typeof v === "boolean") {
      this.#chunks.push(Marker.boolean, v ? 1 : 0);
    } else if (typeof v === "string") {
      const b = utf8Encoder.encode(v);
      if (b.length > 0xffff) {
        this.#chunks.push(Marker.longString);
        this.#u32(b.length);
      } else {
        this.#chunks.push(Marker.string);
        this.#u16(b.length);
      }
      this.#bytes(b);
    } else if (v === null) {
      this.#chunks.push(Marker.null);
    } else if (v === undefined) {
      this.#chunks.push(Marker.undefined);
    } else if (v instanceof Date) {
      const b = new Uint8Array(10);
      new DataView(b.buffer).setFloat64(0, v.getTime());
      this.#chunks.push(Marker.date);
      this.#bytes(b);
    } else if (Array.isArray(v)) {
      this.#chunks.push(Marker.strictArray);
      this.#u32(v.length);
      for (const item of v) this.value(item, depth + 1);
    } else {
      this.#chunks.push(Marker.object);
      for (const [key, item] of Object.entries(v)) {
        this.#key(key);
        this.value(item, depth + 1);
      }
      this.#chunks.push(0, 0, Marker.objectEnd);
    }
  }

  finish(): Uint8Array {
    return Uint8Array.from(this.#chunks);
  }
}

/** Encodes values one after another (a command or data message payload). */
export function encodeAmf0(...values: AmfValue[]): Uint8Array {
  const encoder = new Amf0Encoder();
  for (const v of values) encoder.value(v);
  return encoder.finish();
}
