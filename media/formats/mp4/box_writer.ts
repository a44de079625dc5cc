/** Growable big-endian byte buffer with nested box sizes patched on close (ISO 14496-12). */

/** Builds boxes into one buffer that grows as needed and can be reused after `reset()`. */
export class BoxWriter {
  #buf: Uint8Array;
  #view: DataView;
  #pos = 0;
  #open: number[] = [];

  constructor(initialBytes = 4096) {
    this.#buf = new Uint8Array(initialBytes);
    this.#view = new DataView(this.#buf.buffer);
  }

  /** Bytes written so far. */
  get length(): number {
    return this.#pos;
  }

  /** Makes room for `bytes` more bytes; read #buf/#view only after calling it. */
  #reserve(bytes: number): number {
    const need = this.#pos + bytes;
    if (need > this.#buf.length) {
      const grown = new Uint8Array(Math.max(need, this.#buf.length * 2));
      grown.set(this.#buf.subarray(0, this.#pos));
      this.#buf = grown;
      this.#view = new DataView(grown.buffer);
    }
    const at = this.#pos;
    this.#pos = need;
    return at;
  }

  u8(v: number): this {
    const at = this.#reserve(1);
    this.#buf[at] = v;
    return this;
  }
  u16(v: number): this {
    const at = this.#reserve(2);
    this.#view.setUint16(at, v);
    return this;
  }
  i16(v: number): this {
    const at = this.#reserve(2);
    this.#view.setInt16(at, v);
    return this;
  }
  u32(v: number): this {
    const at = this.#reserve(4);
    this.#view.setUint32(at, v >>> 0);
    return this;
  }
  i32(v: number): this {
    const at = this.#reserve(4);
    this.#view.setInt32(at, v);
    return this;
  }
  u64(v: number): this {
    const at = this.#reserve(8);
    this.#view.setUint32(at, Math.floor(v / 2 ** 32));
    this.#view.setUint32(at + 4, v >>> 0);
    return this;
  }
  bytes(data: Uint8Array): this {
    const at = this.#reserve(data.length);
    this.#buf.set(data, at);
    return this;
  }
  zeros(count: number): this {
    const at = this.#reserve(count);
    this.#buf.fill(0, at, this.#pos);
    return this;
  }
  /** A four-character code. */
  fourCC(code: string): this {
    const at = this.#reserve(4);
    for (let i = 0; i < 4; i++) this.#buf[at + i] = code.charCodeAt(i);
    return this;
  }

  /** Opens a box; its size is written by the matching `end()`. */
  box(type: string): this {
    this.#open.push(this.#pos);
    return this.u32(0).fourCC(type);
  }
  /** Opens a full box with its version and 24-bit flags. */
  fullBox(type: string, version: number, flags: number): this {
    return this.box(type).u32((version << 24) | flags);
  }
  /** Closes the innermost open box. */
  end(): this {
    const start = this.#open.pop()!;
    this.#view.setUint32(start, this.#pos - start);
    return this;
  }

  /** Overwrites a 32-bit value at an absolute offset (e.g. a data offset known late). */
  patchU32(offset: number, v: number): void {
    this.#view.setUint32(offset, v >>> 0);
  }

  /** A copy of the bytes written. */
  toBytes(): Uint8Array {
    return this.#buf.slice(0, this.#pos);
  }

  /** Forgets the content, keeping the buffer for reuse. */
  reset(): void {
    this.#pos = 0;
    this.#open.length = 0;
  }
}
