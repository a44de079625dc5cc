/**
 * MSB-first bit reader over RBSP bytes (emulation prevention already removed), with the
 * exp-Golomb codes of H.264/H.265 (ue(v), se(v)).
 */

import { TruncatedError } from "../../core/errors.ts";

/** Longest exp-Golomb prefix accepted: ue(v) values above 2^32-2 do not occur in valid streams. */
const maxExpGolombLeadingZeros = 31;

/** Reads bits MSB first; every read past the end throws TruncatedError. */
export class BitReader {
  #data: Uint8Array;
  #bitPos = 0;

  constructor(data: Uint8Array, byteOffset = 0) {
    this.#data = data;
    this.#bitPos = byteOffset * 8;
  }

  /** Bits not read yet. */
  get bitsLeft(): number {
    return this.#data.length * 8 - this.#bitPos;
  }

  /** Position of the next bit, in bits from the start of the data. */
  get bitPosition(): number {
    return this.#bitPos;
  }

  /** One bit, as 0 or 1. */
  readBit(): number {
    if (this.#bitPos >= this.#data.length * 8) throw new TruncatedError("bitstream ended");
    const bit = (this.#data[this.#bitPos >> 3] >> (7 - (this.#bitPos & 7))) & 1;
    this.#bitPos++;
    return bit;
  }

  /** An unsigned integer of `count` bits (0..32). */
  readBits(count: number): number {
    if (count > this.bitsLeft) throw new TruncatedError("bitstream ended");
    let value = 0;
    for (let i = 0; i < count; i++) {
      value = value * 2 + ((this.#data[this.#bitPos >> 3] >> (7 - (this.#bitPos & 7))) & 1);
      this.#bitPos++;
    }
    return value;
  }

  /** Skips `count` bits. */
  skipBits(count: number): void {
    if (count > this.bitsLeft) throw new TruncatedError("bitstream ended");
    this.#bitPos += count;
  }

  /** Unsigned exp-Golomb code, ue(v). */
  readUE(): number {
    let zeros = 0;
    while (this.readBit() === 0) {
      if (++zeros > maxExpGolombLeadingZeros) throw new TruncatedError("exp-Golomb code too long");
    }
    return 2 ** zeros - 1 + this.readBits(zeros);
  }

  /** Signed exp-Golomb code, se(v). */
  readSE(): number {
    const code = this.readUE();
    return code % 2 === 1 ? (code + 1) / 2 : -(code / 2);
  }
}
