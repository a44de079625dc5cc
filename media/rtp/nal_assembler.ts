/**
 * Collects the NAL units of one H.264/H.265 access unit, whole or in fragments, and writes
 * them out with 4-byte length prefixes. Shared by the two video depacketizers.
 */
import { ParseError } from "../../core/errors.ts";
import { maxAccessUnitBytes } from "./depacketizer.ts";

/** Most NAL units accepted in one access unit. */
export const maxNalsPerAccessUnit = 1024;

/** One access unit under construction. */
export class NalAssembler {
  #pieces: Uint8Array[] = [];
  #nalLengths: number[] = [];
  #openLength = -1;
  #bytes = 0;

  /** True when nothing is collected. */
  get empty(): boolean {
    return this.#nalLengths.length === 0 && this.#openLength < 0;
  }

  /** True while a fragmented NAL unit is open. */
  get fragmentOpen(): boolean {
    return this.#openLength >= 0;
  }

  /** Adds a whole NAL unit (a view; it is copied when the unit is taken). */
  addNal(nal: Uint8Array): void {
    if (nal.length === 0) throw new ParseError("empty NAL unit");
    this.#discardFragment();
    this.#grow(nal.length);
    this.#pieces.push(nal);
    this.#nalLengths.push(nal.length);
  }

  /** Starts a fragmented NAL unit with its reconstructed header bytes. */
  startFragment(header: Uint8Array): void {
    this.#discardFragment();
    this.#grow(header.length);
    this.#pieces.push(header);
    this.#openLength = header.length;
  }

  /** Appends to the open fragmented NAL unit. */
  appendFragment(chunk: Uint8Array): void {
    if (this.#openLength < 0) throw new ParseError("fragment without its start");
    this.#grow(chunk.length);
    this.#pieces.push(chunk);
    this.#openLength += chunk.length;
  }

  /** Ends the open fragmented NAL unit. */
  endFragment(): void {
    this.#closeFragment();
  }

  /** The collected NAL units as one length-prefixed access unit; the assembler is emptied. */
  take(): Uint8Array {
    // A fragmented NAL unit still open at the end of its unit lost its last fragment.
    this.#discardFragment();
    const out = new Uint8Array(this.#bytes + 4 * this.#nalLengths.length);
    let pos = 0;
    let piece = 0;
    for (const length of this.#nalLengths) {
      out[pos] = length >>> 24;
      out[pos + 1] = (length >>> 16) & 0xff;
      out[pos + 2] = (length >>> 8) & 0xff;
      out[pos + 3] = length & 0xff;
      pos += 4;
      let left = length;
      while (left > 0) {
        const p = this.#pieces[piece++];
        out.set(p, pos);
        pos += p.length;
        left -= p.length;
      }
    }
    this.reset();
    return out;
  }

  /** Drops everything collected. */
  reset(): void {
    this.#pieces.length = 0;
    this.#nalLengths.length = 0;
    this.#openLength = -1;
    this.#bytes = 0;
  }

  #closeFragment(): void {
    if (this.#openLength < 0) return;
    this.#nalLengths.push(this.#openLength);
    this.#openLength = -1;
  }

  /** Drops the open fragmented NAL unit: its end never came, so it cannot be decoded. */
  #discardFragment(): void {
    if (this.#openLength < 0) return;
    this.#bytes -= this.#openLength;
    let left = this.#openLength;
    while (left > 0) left -= this.#pieces.pop()!.length;
    this.#openLength = -1;
  }

  #grow(bytes: number): void {
    this.#bytes += bytes;
    if (this.#bytes > maxAccessUnitBytes || this.#nalLengths.length >= maxNalsPerAccessUnit) {
      this.reset();
      throw new ParseError("access unit too large; dropped");
    }
  }
}
