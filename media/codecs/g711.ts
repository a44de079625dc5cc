/**
 * G.711 (ITU-T G.711): μ-law (PCMU) and A-law (PCMA), 16-bit linear PCM to 8-bit codes and
 * back. Decoding follows the segment layout of the recommendation (sign, 3 bits of
 * segment, 4 of mantissa; μ-law biased by 33, A-law with a linear first segment pair) scaled
 * to 16 bits; encoding picks the nearest level. Both give the values of ffmpeg's pcm_mulaw
 * and pcm_alaw (tested on every sample) and are tables built once at load.
 */

/** The two G.711 laws, by their RTP names. */
export type G711Codec = "PCMU" | "PCMA";

/** μ-law bias, on the 14-bit magnitude: 33 (132 on the 16-bit scale). */
const muBias = 33;

/** 16-bit sample of a μ-law code. */
function muDecode(code: number): number {
  const inverted = ~code & 0xff;
  const magnitude = ((((inverted & 0x0f) << 3) + (muBias << 2)) << ((inverted >> 4) & 0x07)) -
    (muBias << 2);
  return inverted & 0x80 ? -magnitude : magnitude;
}

/** 16-bit sample of an A-law code. */
function aDecode(code: number): number {
  const value = code ^ 0x55;
  const segment = (value >> 4) & 0x07;
  let magnitude = (value & 0x0f) << 4;
  if (segment === 0) magnitude += 8;
  else magnitude = (magnitude + 0x108) << (segment - 1);
  return value & 0x80 ? magnitude : -magnitude;
}

/**
 * Codes by sample + 32768: the code whose level is nearest, with G.711's decision levels
 * midway between two levels, rounded on the 14-bit grid. `zeroCode` is the code of the
 * smallest positive level; codes of growing magnitude follow it by XOR with 1, 2, ... 127,
 * and the negative ones differ by the sign bit.
 */
function encodeTable(decode: (code: number) => number, zeroCode: number): Uint8Array {
  const levels = Array.from({ length: 128 }, (_, i) => decode(i ^ zeroCode));
  const by14Bit = new Uint8Array(16384);
  let i = 0;
  for (let j = 0; j < 8192; j++) {
    while (i < 127 && j >= ((levels[i] + levels[i + 1] + 4) >> 3)) i++;
    by14Bit[8192 + j] = i ^ zeroCode;
    if (j > 0) by14Bit[8192 - j] = i ^ zeroCode ^ 0x80;
  }
  by14Bit[0] = by14Bit[1];
  const table = new Uint8Array(65536);
  for (let s = 0; s < 65536; s++) table[s] = by14Bit[s >> 2];
  return table;
}

function decodeTable(decode: (code: number) => number): Int16Array {
  const table = new Int16Array(256);
  for (let i = 0; i < 256; i++) table[i] = decode(i);
  return table;
}

/** Codes by sample + 32768. */
const muEncodeTable = encodeTable(muDecode, 0xff);
const aEncodeTable = encodeTable(aDecode, 0xd5);
/** Samples by code. */
const muDecodeTable = decodeTable(muDecode);
const aDecodeTable = decodeTable(aDecode);

/** The code of the silence sample (0) in a law, for padding. */
export function g711Silence(codec: G711Codec): number {
  return codec === "PCMU" ? 0xff : 0xd5;
}

/** Encodes 16-bit samples (values outside -32768..32767 are clipped) to G.711 codes. */
export function g711Encode(codec: G711Codec, samples: ArrayLike<number>): Uint8Array {
  const table = codec === "PCMU" ? muEncodeTable : aEncodeTable;
  const out = new Uint8Array(samples.length);
  for (let i = 0; i < samples.length; i++) {
    const s = Math.round(samples[i]);
    out[i] = table[(s < -32768 ? -32768 : s > 32767 ? 32767 : s) + 32768];
  }
  return out;
}

/** Decodes G.711 codes to 16-bit samples. */
export function g711Decode(codec: G711Codec, codes: Uint8Array): Int16Array {
  const table = codec === "PCMU" ? muDecodeTable : aDecodeTable;
  const out = new Int16Array(codes.length);
  for (let i = 0; i < codes.length; i++) out[i] = table[codes[i]];
  return out;
}
