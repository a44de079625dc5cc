/**
 * PNG decoder (ISO/IEC 15948, the W3C PNG specification) for watermark images: every colour
 * type and bit depth, the five scanline filters and Adam7 interlacing, decoded to 8-bit RGBA
 * (straight alpha, rows top to bottom). Ancillary chunks are ignored. Hostile files are
 * bounded: picture size, IDAT bytes and inflated bytes each have a limit, and inflating stops
 * as soon as the data outgrows the size the header announces.
 */

import { ParseError } from "../../core/errors.ts";

/** Widest and tallest picture decoded, in pixels (the largest frame the video kernels take). */
export const maxPngSidePx = 4096;
/** Most bytes of all IDAT chunks together (the compressed picture). */
export const maxPngIdatBytes = 32 * 1024 * 1024;
/**
 * Most bytes the picture may inflate to (filtered scanlines, before expansion to RGBA):
 * room for a 4096x4096 8-bit RGBA picture.
 */
export const maxPngInflatedBytes = 80 * 1024 * 1024;
/** Most bytes fed to the inflater at once, which bounds what one write may inflate to. */
const inflateInputSliceBytes = 8 * 1024;

/** A decoded PNG: `width` x `height` pixels of 4 bytes (R, G, B, A), row after row. */
export interface DecodedPng {
  width: number;
  height: number;
  rgba: Uint8Array;
}

const signature = [137, 80, 78, 71, 13, 10, 26, 10];
/** Bytes of a chunk around its data: length, type, CRC. */
const chunkOverheadBytes = 12;
/** Largest chunk length the specification allows (2^31 - 1). */
const maxChunkBytes = 0x7fffffff;

/** Allowed bit depths per colour type (0 gray, 2 RGB, 3 palette, 4 gray+alpha, 6 RGBA). */
const bitDepths: Record<number, readonly number[]> = {
  0: [1, 2, 4, 8, 16],
  2: [8, 16],
  3: [1, 2, 4, 8],
  4: [8, 16],
  6: [8, 16],
};
/** Samples per pixel per colour type. */
const channels: Record<number, number> = { 0: 1, 2: 3, 3: 1, 4: 2, 6: 4 };

/** The seven Adam7 passes: first column and row, column and row steps. */
const adam7 = [
  [0, 0, 8, 8],
  [4, 0, 8, 8],
  [0, 4, 4, 8],
  [2, 0, 4, 4],
  [0, 2, 2, 4],
  [1, 0, 2, 2],
  [0, 1, 1, 2],
] as const;

interface Header {
  width: number;
  height: number;
  bitDepth: number;
  colorType: number;
  interlaced: boolean;
}

/** A sub-image of the picture: every `stepX`th pixel from `x0` of every `stepY`th row from `y0`. */
interface Pass {
  x0: number;
  y0: number;
  stepX: number;
  stepY: number;
  /** Pixels per row and rows of the pass. */
  columns: number;
  rows: number;
}

/** Colours of an indexed picture (PLTE) and alpha of each (tRNS, 255 when absent). */
interface Palette {
  rgba: Uint8Array;
  entries: number;
}

/** The transparent colour of a gray or RGB picture (tRNS), in samples of the bit depth. */
type ColourKey = readonly number[];

const crcTable = (() => {
  const table = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    table[n] = c >>> 0;
  }
  return table;
})();

/** CRC-32 of `bytes` as PNG chunks use it (ISO 3309 polynomial, reflected, inverted). */
export function pngCrc32(bytes: Uint8Array): number {
  let c = 0xffffffff;
  for (let i = 0; i < bytes.length; i++) c = crcTable[(c ^ bytes[i]) & 0xff] ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

/**
 * Decodes a whole PNG file. Throws a ParseError naming the problem for anything that is not
 * a valid PNG within the limits above (`maxPngSidePx`, `maxPngIdatBytes`,
 * `maxPngInflatedBytes`).
 */
export async function decodePng(bytes: Uint8Array): Promise<DecodedPng> {
  const { header, palette, key, idat } = readChunks(bytes);
  const passes = passesOf(header);
  const bitsPerPixel = header.bitDepth * channels[header.colorType];
  let inflatedBytes = 0;
  for (const pass of passes) {
    inflatedBytes += pass.rows * (1 + Math.ceil(pass.columns * bitsPerPixel / 8));
  }
  if (inflatedBytes > maxPngInflatedBytes) {
    throw new ParseError(
      `PNG ${header.width}x${header.height} at ${bitsPerPixel} bits per pixel needs ` +
        `${inflatedBytes} bytes of image data, over the ${maxPngInflatedBytes} byte limit`,
    );
  }
  const scanlines = await inflateExactly(idat, inflatedBytes);
  const rgba = new Uint8Array(header.width * header.height * 4);
  let at = 0;
  for (const pass of passes) {
    at = decodePass(scanlines, at, header, pass, palette, key, rgba);
  }
  return { width: header.width, height: header.height, rgba };
}

/** Walks the chunks: checks order, lengths and CRCs; returns what decoding needs. */
function readChunks(bytes: Uint8Array): {
  header: Header;
  palette?: Palette;
  key?: ColourKey;
  idat: Uint8Array<ArrayBuffer>;
} {
  if (bytes.length < signature.length || signature.some((b, i) => bytes[i] !== b)) {
    throw new ParseError("not a PNG file: the 8-byte signature is missing");
  }
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let header: Header | undefined;
  let palette: Palette | undefined;
  let key: ColourKey | undefined;
  let seenTransparency = false;
  const idatParts: Uint8Array[] = [];
  let idatBytes = 0;
  /** "none" before the first IDAT, "reading" while IDATs follow each other, "done" after. */
  let idatState: "none" | "reading" | "done" = "none";
  let at = signature.length;
  for (;;) {
    if (at + chunkOverheadBytes > bytes.length) {
      throw new ParseError(`PNG ends at byte ${bytes.length} before its IEND chunk`);
    }
    const length = view.getUint32(at);
    const type = String.fromCharCode(...bytes.subarray(at + 4, at + 8));
    if (!/^[A-Za-z]{4}$/.test(type)) {
      throw new ParseError(`PNG chunk at byte ${at} has an invalid type ${JSON.stringify(type)}`);
    }
    if (length > maxChunkBytes) {
      throw new ParseError(`PNG ${type} chunk length ${length} is over 2^31 - 1`);
    }
    if (at + chunkOverheadBytes + length > bytes.length) {
      throw new ParseError(
        `PNG ${type} chunk at byte ${at} needs ${length} bytes, the file is truncated`,
      );
    }
    const data = bytes.subarray(at + 8, at + 8 + length);
    const stored = view.getUint32(at + 8 + length);
    const computed = pngCrc32(bytes.subarray(at + 4, at + 8 + length));
    if (stored !== computed) {
      throw new ParseError(
        `PNG ${type} chunk at byte ${at} has CRC ${hex(stored)}, its bytes give ${hex(computed)}`,
      );
    }
    at += chunkOverheadBytes + length;

    if (!header) {
      if (type !== "IHDR") throw new ParseError(`PNG starts with ${type}, not IHDR`);
      header = parseHeader(data);
      continue;
    }
    if (idatState === "reading" && type !== "IDAT") idatState = "done";
    switch (type) {
      case "IHDR":
        throw new ParseError("PNG has a second IHDR chunk");
      case "PLTE":
        if (palette) throw new ParseError("PNG has a second PLTE chunk");
        if (idatState !== "none") throw new ParseError("PNG PLTE chunk comes after IDAT");
        if (seenTransparency) throw new ParseError("PNG PLTE chunk comes after tRNS");
        palette = parsePalette(data, header);
        break;
      case "tRNS":
        if (idatState !== "none") throw new ParseError("PNG tRNS chunk comes after IDAT");
        if (seenTransparency) throw new ParseError("PNG has a second tRNS chunk");
        seenTransparency = true;
        key = parseTransparency(data, header, palette);
        break;
      case "IDAT":
        if (idatState === "done") throw new ParseError("PNG IDAT chunks are not consecutive");
        if (header.colorType === 3 && !palette) {
          throw new ParseError("PNG with colour type 3 has no PLTE chunk before IDAT");
        }
        idatState = "reading";
        idatBytes += length;
        if (idatBytes > maxPngIdatBytes) {
          throw new ParseError(`PNG IDAT chunks hold over ${maxPngIdatBytes} bytes`);
        }
        idatParts.push(data);
        break;
      case "IEND":
        if (length !== 0) throw new ParseError(`PNG IEND chunk has ${length} bytes, not 0`);
        if (idatState === "none") throw new ParseError("PNG has no IDAT chunk");
        // Bytes after IEND are not part of the picture; decoders ignore them, so do we.
        return {
          header,
          palette: palette && header.colorType === 3 ? palette : undefined,
          key: header.colorType === 0 || header.colorType === 2 ? key : undefined,
          idat: concat(idatParts, idatBytes),
        };
      default:
        // Bit 5 of the first letter (lower case) marks an ancillary chunk, safe to skip.
        if ((type.charCodeAt(0) & 0x20) === 0) {
          throw new ParseError(`PNG has an unknown critical chunk ${type}`);
        }
    }
  }
}

function parseHeader(data: Uint8Array): Header {
  if (data.length !== 13) throw new ParseError(`PNG IHDR has ${data.length} bytes, not 13`);
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  const width = view.getUint32(0);
  const height = view.getUint32(4);
  const [bitDepth, colorType, compression, filter, interlace] = data.subarray(8);
  if (width === 0 || height === 0) throw new ParseError(`PNG size ${width}x${height} is empty`);
  if (width > maxPngSidePx || height > maxPngSidePx) {
    throw new ParseError(
      `PNG size ${width}x${height} is over the ${maxPngSidePx}x${maxPngSidePx} pixel limit`,
    );
  }
  const depths = bitDepths[colorType];
  if (!depths) throw new ParseError(`PNG colour type ${colorType} is not 0, 2, 3, 4 or 6`);
  if (!depths.includes(bitDepth)) {
    throw new ParseError(
      `PNG bit depth ${bitDepth} is not allowed with colour type ${colorType} ` +
        `(allowed: ${depths.join(", ")})`,
    );
  }
  if (compression !== 0) throw new ParseError(`PNG compression method ${compression} is not 0`);
  if (filter !== 0) throw new ParseError(`PNG filter method ${filter} is not 0`);
  if (interlace > 1) throw new ParseError(`PNG interlace method ${interlace} is not 0 or 1`);
  return { width, height, bitDepth, colorType, interlaced: interlace === 1 };
}

function parsePalette(data: Uint8Array, header: Header): Palette {
  if (header.colorType === 0 || header.colorType === 4) {
    throw new ParseError(`PNG PLTE chunk is not allowed with colour type ${header.colorType}`);
  }
  const entries = data.length / 3;
  const most = header.colorType === 3 ? Math.min(256, 1 << header.bitDepth) : 256;
  if (!Number.isInteger(entries) || entries < 1 || entries > most) {
    throw new ParseError(
      `PNG PLTE chunk has ${data.length} bytes, not 3 times 1 to ${most} entries`,
    );
  }
  const rgba = new Uint8Array(256 * 4);
  for (let i = 0; i < entries; i++) {
    rgba[i * 4] = data[i * 3];
    rgba[i * 4 + 1] = data[i * 3 + 1];
    rgba[i * 4 + 2] = data[i * 3 + 2];
    rgba[i * 4 + 3] = 255;
  }
  return { rgba, entries };
}

/** Reads tRNS: alpha into the palette (colour type 3) or the transparent colour (0 and 2). */
function parseTransparency(
  data: Uint8Array,
  header: Header,
  palette: Palette | undefined,
): ColourKey | undefined {
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  switch (header.colorType) {
    case 0:
    case 2: {
      const samples = channels[header.colorType];
      if (data.length !== samples * 2) {
        throw new ParseError(
          `PNG tRNS chunk has ${data.length} bytes, colour type ${header.colorType} needs ` +
            `${samples * 2}`,
        );
      }
      // Only the low bit-depth bits of each 16-bit value count.
      const mask = (1 << header.bitDepth) - 1;
      return Array.from({ length: samples }, (_, i) => view.getUint16(i * 2) & mask);
    }
    case 3:
      if (!palette) throw new ParseError("PNG tRNS chunk comes before PLTE");
      if (data.length > palette.entries) {
        throw new ParseError(
          `PNG tRNS chunk has ${data.length} alpha values for ${palette.entries} palette entries`,
        );
      }
      for (let i = 0; i < data.length; i++) palette.rgba[i * 4 + 3] = data[i];
      return undefined;
    default:
      throw new ParseError(
        `PNG tRNS chunk is not allowed with colour type ${header.colorType}, which has alpha`,
      );
  }
}

/** The passes of the picture: one for a progressive picture, the non-empty Adam7 ones else. */
function passesOf(header: Header): Pass[] {
  const { width, height } = header;
  if (!header.interlaced) {
    return [{ x0: 0, y0: 0, stepX: 1, stepY: 1, columns: width, rows: height }];
  }
  return adam7.map(([x0, y0, stepX, stepY]) => ({
    x0,
    y0,
    stepX,
    stepY,
    columns: Math.ceil(Math.max(0, width - x0) / stepX),
    rows: Math.ceil(Math.max(0, height - y0) / stepY),
  })).filter((pass) => pass.columns > 0 && pass.rows > 0);
}

/**
 * Inflates the zlib stream `data`, which must give exactly `expectedBytes`. The input goes in
 * small slices and reading stops as soon as the output passes the expected size, so a
 * stream that inflates to gigabytes costs at most one slice's worth of memory.
 */
async function inflateExactly(
  data: Uint8Array<ArrayBuffer>,
  expectedBytes: number,
): Promise<Uint8Array> {
  const out = new Uint8Array(expectedBytes);
  const stream = new DecompressionStream("deflate");
  const writer = stream.writable.getWriter();
  const reader = stream.readable.getReader();
  let stopped = false;
  const feeding = (async () => {
    for (let at = 0; at < data.length && !stopped; at += inflateInputSliceBytes) {
      await writer.write(data.subarray(at, at + inflateInputSliceBytes));
    }
    if (!stopped) await writer.close();
  })();
  // A failed write fails the read side too, where it is reported.
  feeding.catch(() => {});
  let filled = 0;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      if (filled + value.length > expectedBytes) {
        stopped = true;
        await reader.cancel();
        throw new ParseError(`PNG image data inflates to over the ${expectedBytes} bytes expected`);
      }
      out.set(value, filled);
      filled += value.length;
    }
  } catch (err) {
    stopped = true;
    if (err instanceof ParseError) throw err;
    throw new ParseError(`PNG image data is not a valid zlib stream: ${(err as Error).message}`, {
      cause: err,
    });
  } finally {
    await feeding.catch(() => {});
  }
  if (filled !== expectedBytes) {
    throw new ParseError(`PNG image data inflates to ${filled} bytes, ${expectedBytes} expected`);
  }
  return out;
}

/**
 * Unfilters the scanlines of one pass from `scanlines` at `at` and writes its pixels into
 * `rgba`; returns where the next pass starts.
 */
function decodePass(
  scanlines: Uint8Array,
  at: number,
  header: Header,
  pass: Pass,
  palette: Palette | undefined,
  key: ColourKey | undefined,
  rgba: Uint8Array,
): number {
  const bitsPerPixel = header.bitDepth * channels[header.colorType];
  const rowBytes = Math.ceil(pass.columns * bitsPerPixel / 8);
  // The filters work on whole bytes: a pixel of less than a byte counts as one.
  const pixelBytes = Math.max(1, bitsPerPixel >> 3);
  // The line above the first one is all zeros; later lines are unfiltered in place.
  let above: Uint8Array = new Uint8Array(rowBytes);
  for (let row = 0; row < pass.rows; row++) {
    const y = pass.y0 + row * pass.stepY;
    const line = scanlines.subarray(at + 1, at + 1 + rowBytes);
    unfilter(scanlines[at], line, above, pixelBytes, y);
    expandRow(
      line,
      pass.columns,
      header,
      palette,
      key,
      rgba,
      (y * header.width + pass.x0) * 4,
      pass.stepX * 4,
    );
    above = line;
    at += 1 + rowBytes;
  }
  return at;
}

/** Undoes the filter of one scanline in place, given the unfiltered line above. */
function unfilter(
  filter: number,
  line: Uint8Array,
  above: Uint8Array,
  pixelBytes: number,
  y: number,
): void {
  const n = line.length;
  switch (filter) {
    case 0:
      return;
    case 1: // Sub: plus the byte one pixel to the left.
      for (let i = pixelBytes; i < n; i++) line[i] = line[i] + line[i - pixelBytes];
      return;
    case 2: // Up: plus the byte above.
      for (let i = 0; i < n; i++) line[i] = line[i] + above[i];
      return;
    case 3: // Average: plus the floored mean of left and above.
      for (let i = 0; i < pixelBytes; i++) line[i] = line[i] + (above[i] >> 1);
      for (let i = pixelBytes; i < n; i++) {
        line[i] = line[i] + ((line[i - pixelBytes] + above[i]) >> 1);
      }
      return;
    case 4: // Paeth: plus whichever of left, above, upper left is nearest to left + above - upper left.
      for (let i = 0; i < pixelBytes; i++) line[i] = line[i] + above[i];
      for (let i = pixelBytes; i < n; i++) {
        const a = line[i - pixelBytes];
        const b = above[i];
        const c = above[i - pixelBytes];
        // Distances of p = a + b - c to a, b and c, without Math.abs calls in the hot loop.
        let pa = b - c;
        let pb = a - c;
        let pc = pa + pb;
        if (pa < 0) pa = -pa;
        if (pb < 0) pb = -pb;
        if (pc < 0) pc = -pc;
        line[i] = line[i] + (pa <= pb && pa <= pc ? a : pb <= pc ? b : c);
      }
      return;
    default:
      throw new ParseError(`PNG row ${y} has filter type ${filter}, not 0 to 4`);
  }
}

/**
 * Writes `count` pixels of an unfiltered scanline as RGBA into `rgba` from byte `start`,
 * `step` bytes apart. Samples of 1, 2, 4 and 16 bits are scaled to 0..255.
 */
function expandRow(
  line: Uint8Array,
  count: number,
  header: Header,
  palette: Palette | undefined,
  key: ColourKey | undefined,
  rgba: Uint8Array,
  start: number,
  step: number,
): void {
  const depth = header.bitDepth;
  let o = start;
  switch (header.colorType) {
    case 0: {
      const k = key ? key[0] : -1;
      if (depth === 16) {
        for (let i = 0; i < count; i++, o += step) {
          const v = (line[i * 2] << 8) | line[i * 2 + 1];
          rgba[o] = rgba[o + 1] = rgba[o + 2] = eightBits(v);
          rgba[o + 3] = v === k ? 0 : 255;
        }
      } else {
        const mask = (1 << depth) - 1;
        const scale = 255 / mask;
        for (let i = 0; i < count; i++, o += step) {
          const s = sampleAt(line, i, depth, mask);
          rgba[o] = rgba[o + 1] = rgba[o + 2] = s * scale;
          rgba[o + 3] = s === k ? 0 : 255;
        }
      }
      return;
    }
    case 2: {
      if (depth === 16) {
        for (let i = 0, p = 0; i < count; i++, o += step, p += 6) {
          const r = (line[p] << 8) | line[p + 1];
          const g = (line[p + 2] << 8) | line[p + 3];
          const b = (line[p + 4] << 8) | line[p + 5];
          rgba[o] = eightBits(r);
          rgba[o + 1] = eightBits(g);
          rgba[o + 2] = eightBits(b);
          rgba[o + 3] = key && r === key[0] && g === key[1] && b === key[2] ? 0 : 255;
        }
      } else {
        for (let i = 0, p = 0; i < count; i++, o += step, p += 3) {
          const r = line[p];
          const g = line[p + 1];
          const b = line[p + 2];
          rgba[o] = r;
          rgba[o + 1] = g;
          rgba[o + 2] = b;
          rgba[o + 3] = key && r === key[0] && g === key[1] && b === key[2] ? 0 : 255;
        }
      }
      return;
    }
    case 3: {
      const colours = palette!;
      const mask = (1 << depth) - 1;
      for (let i = 0; i < count; i++, o += step) {
        const index = depth === 8 ? line[i] : sampleAt(line, i, depth, mask);
        if (index >= colours.entries) {
          throw new ParseError(
            `PNG palette index ${index} is beyond the ${colours.entries} PLTE entries`,
          );
        }
        const c = index * 4;
        rgba[o] = colours.rgba[c];
        rgba[o + 1] = colours.rgba[c + 1];
        rgba[o + 2] = colours.rgba[c + 2];
        rgba[o + 3] = colours.rgba[c + 3];
      }
      return;
    }
    case 4: {
      if (depth === 16) {
        for (let i = 0, p = 0; i < count; i++, o += step, p += 4) {
          rgba[o] = rgba[o + 1] = rgba[o + 2] = eightBits((line[p] << 8) | line[p + 1]);
          rgba[o + 3] = eightBits((line[p + 2] << 8) | line[p + 3]);
        }
      } else {
        for (let i = 0, p = 0; i < count; i++, o += step, p += 2) {
          rgba[o] = rgba[o + 1] = rgba[o + 2] = line[p];
          rgba[o + 3] = line[p + 1];
        }
      }
      return;
    }
    default: {
      if (depth === 16) {
        for (let i = 0, p = 0; i < count; i++, o += step, p += 8) {
          rgba[o] = eightBits((line[p] << 8) | line[p + 1]);
          rgba[o + 1] = eightBits((line[p + 2] << 8) | line[p + 3]);
          rgba[o + 2] = eightBits((line[p + 4] << 8) | line[p + 5]);
          rgba[o + 3] = eightBits((line[p + 6] << 8) | line[p + 7]);
        }
      } else if (step === 4) {
        rgba.set(line.subarray(0, count * 4), o);
      } else {
        for (let i = 0, p = 0; i < count; i++, o += step, p += 4) {
          rgba[o] = line[p];
          rgba[o + 1] = line[p + 1];
          rgba[o + 2] = line[p + 2];
          rgba[o + 3] = line[p + 3];
        }
      }
    }
  }
}

/** A 16-bit sample scaled to 8 bits, rounded to nearest (v * 255 / 65535). */
function eightBits(v: number): number {
  return ((v * 255 + 32767) / 65535) | 0;
}

/** Sample `i` of a line of 1-, 2- or 4-bit samples, packed from the high bit down. */
function sampleAt(line: Uint8Array, i: number, depth: number, mask: number): number {
  const bit = i * depth;
  return (line[bit >> 3] >> (8 - depth - (bit & 7))) & mask;
}

/** The IDAT data in one buffer of its own (also for one chunk: the inflater takes it). */
function concat(parts: Uint8Array[], total: number): Uint8Array<ArrayBuffer> {
  const out = new Uint8Array(total);
  let at = 0;
  for (const part of parts) {
    out.set(part, at);
    at += part.length;
  }
  return out;
}

function hex(n: number): string {
  return `0x${n.toString(16).padStart(8, "0")}`;
}
