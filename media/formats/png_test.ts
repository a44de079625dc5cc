/**
 * The PNG decoder against ffmpeg: PNGs written by ffmpeg (every pixel format its encoder
 * has, progressive and Adam7) and PNGs built here (bit depths and colour types ffmpeg does
 * not write, tRNS, every filter type, several IDATs) decode to the RGBA ffmpeg decodes from
 * the same file, byte for byte. Hostile input is a ParseError, never a hang or a crash.
 */
import assert from "node:assert/strict";
import { ParseError } from "../../core/errors.ts";
import { decodePng, maxPngSidePx, pngCrc32 } from "./png.ts";
import { restampPngChecks } from "./png_fixtures.ts";
import { mutate, prng, randomBytes, run, tempPath } from "./test_fixtures.ts";

const signature = new Uint8Array([137, 80, 78, 71, 13, 10, 26, 10]);
const enc = new TextEncoder();

/** A test source with alpha that varies over the picture (testsrc has none). */
const alphaSource = (size: string) =>
  `testsrc2=size=${size},format=rgba,` +
  "geq=r='r(X,Y)':g='g(X,Y)':b='b(X,Y)':a='mod(X*7+Y*13,256)'";

/** Writes one frame of `source` as a PNG with ffmpeg. */
async function ffmpegPng(name: string, source: string, args: string[]): Promise<Uint8Array> {
  const path = await tempPath(`${name}.png`);
  await run("ffmpeg", [
    "-v",
    "error",
    "-y",
    "-f",
    "lavfi",
    "-i",
    source,
    "-frames:v",
    "1",
    ...args,
    path,
  ]);
  return await Deno.readFile(path);
}

/** ffmpeg's decode of a PNG file as raw pixels of `pixFmt` (rgba, rgba64be). */
async function ffmpegDecode(png: Uint8Array, pixFmt: "rgba" | "rgba64be"): Promise<Uint8Array> {
  const path = await tempPath(`decode-${crypto.randomUUID()}.png`);
  await Deno.writeFile(path, png);
  await run("ffmpeg", [
    "-v",
    "error",
    "-y",
    "-i",
    path,
    "-f",
    "rawvideo",
    "-pix_fmt",
    pixFmt,
    `${path}.raw`,
  ]);
  const raw = await Deno.readFile(`${path}.raw`);
  await Deno.remove(path);
  await Deno.remove(`${path}.raw`);
  return raw;
}

/**
 * The RGBA ffmpeg decodes: its rgba output for 8-bit files; for 16-bit ones its exact
 * rgba64be output scaled to 8 bits by round(v * 255 / 65535), the decoder's documented
 * reduction (ffmpeg's own 16-to-8 conversion dithers gray, so it cannot be the reference).
 */
async function reference(png: Uint8Array): Promise<Uint8Array> {
  if (png[24] !== 16) return await ffmpegDecode(png, "rgba");
  const wide = await ffmpegDecode(png, "rgba64be");
  const out = new Uint8Array(wide.length / 2);
  for (let i = 0; i < out.length; i++) {
    out[i] = Math.round(((wide[i * 2] << 8) | wide[i * 2 + 1]) * 255 / 65535);
  }
  return out;
}

/** Decodes `png` and checks it is the picture ffmpeg decodes, byte for byte. */
async function assertSameAsFfmpeg(png: Uint8Array, what: string): Promise<void> {
  const decoded = await decodePng(png);
  const view = new DataView(png.buffer, png.byteOffset);
  assert.deepEqual([decoded.width, decoded.height], [view.getUint32(16), view.getUint32(20)], what);
  const expected = await reference(png);
  assert.equal(decoded.rgba.length, expected.length, what);
  const first = decoded.rgba.findIndex((b, i) => b !== expected[i]);
  assert.equal(
    first,
    -1,
    `${what}: pixel ${first >> 2} is ${decoded.rgba.subarray(first & ~3, (first & ~3) + 4)}, ` +
      `ffmpeg has ${expected.subarray(first & ~3, (first & ~3) + 4)}`,
  );
}

/** One chunk: length, type, data, CRC. */
function chunk(type: string, data: Uint8Array = new Uint8Array()): Uint8Array {
  const out = new Uint8Array(12 + data.length);
  const view = new DataView(out.buffer);
  view.setUint32(0, data.length);
  out.set(enc.encode(type), 4);
  out.set(data, 8);
  view.setUint32(8 + data.length, pngCrc32(out.subarray(4, 8 + data.length)));
  return out;
}

function concat(...parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const part of parts) {
    out.set(part, at);
    at += part.length;
  }
  return out;
}

function ihdr(width: number, height: number, bitDepth: number, colorType: number, interlace = 0) {
  const data = new Uint8Array(13);
  const view = new DataView(data.buffer);
  view.setUint32(0, width);
  view.setUint32(4, height);
  data.set([bitDepth, colorType, 0, 0, interlace], 8);
  return chunk("IHDR", data);
}

async function deflate(data: Uint8Array<ArrayBuffer>): Promise<Uint8Array> {
  const stream = new Blob([data]).stream().pipeThrough(new CompressionStream("deflate"));
  return new Uint8Array(await new Response(stream).arrayBuffer());
}

/** What a PNG built by `buildPng` holds. */
interface PngSpec {
  width: number;
  height: number;
  colorType: 0 | 2 | 3 | 4 | 6;
  bitDepth: 1 | 2 | 4 | 8 | 16;
  interlaced?: boolean;
  /** RGB triples of PLTE. */
  palette?: number[];
  /** Data of tRNS. */
  transparency?: Uint8Array;
  /** Samples of every pixel, row after row, at the bit depth. */
  samples: ArrayLike<number>;
  /** Bytes per IDAT chunk (the zlib stream is split across several). */
  idatBytes?: number;
}

const samplesPerPixel = { 0: 1, 2: 3, 3: 1, 4: 2, 6: 4 };
const adam7Passes = [
  [0, 0, 8, 8],
  [4, 0, 8, 8],
  [0, 4, 4, 8],
  [2, 0, 4, 4],
  [0, 2, 2, 4],
  [1, 0, 2, 2],
  [0, 1, 1, 2],
];

/** Filters a scanline with `type`, given the raw line above (the PNG encoder side). */
function filterLine(type: number, line: Uint8Array, above: Uint8Array, bpp: number): Uint8Array {
  const out = new Uint8Array(line.length + 1);
  out[0] = type;
  for (let i = 0; i < line.length; i++) {
    const a = i >= bpp ? line[i - bpp] : 0;
    const b = above[i];
    const c = i >= bpp ? above[i - bpp] : 0;
    let predictor = 0;
    if (type === 1) predictor = a;
    if (type === 2) predictor = b;
    if (type === 3) predictor = (a + b) >> 1;
    if (type === 4) {
      const p = a + b - c;
      const [pa, pb, pc] = [Math.abs(p - a), Math.abs(p - b), Math.abs(p - c)];
      predictor = pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
    }
    out[i + 1] = (line[i] - predictor) & 0xff;
  }
  return out;
}

/** A PNG of `spec`, each row filtered with another of the five filter types. */
async function buildPng(spec: PngSpec): Promise<Uint8Array> {
  const channels = samplesPerPixel[spec.colorType];
  const depth = spec.bitDepth;
  const bpp = Math.max(1, (depth * channels) >> 3);
  const passes = spec.interlaced ? adam7Passes : [[0, 0, 1, 1]];
  const lines: Uint8Array[] = [];
  let filterType = 0;
  for (const [x0, y0, dx, dy] of passes) {
    const columns = Math.ceil(Math.max(0, spec.width - x0) / dx);
    const rows = Math.ceil(Math.max(0, spec.height - y0) / dy);
    if (columns === 0 || rows === 0) continue;
    const rowBytes = Math.ceil(columns * channels * depth / 8);
    let above = new Uint8Array(rowBytes);
    for (let r = 0; r < rows; r++) {
      const line = new Uint8Array(rowBytes);
      let bit = 0;
      for (let c = 0; c < columns; c++) {
        const pixel = (y0 + r * dy) * spec.width + x0 + c * dx;
        for (let s = 0; s < channels; s++, bit += depth) {
          const v = spec.samples[pixel * channels + s];
          if (depth === 16) {
            line[bit >> 3] = v >> 8;
            line[(bit >> 3) + 1] = v & 0xff;
          } else {
            line[bit >> 3] |= v << (8 - depth - (bit & 7));
          }
        }
      }
      lines.push(filterLine(filterType++ % 5, line, above, bpp));
      above = line;
    }
  }
  const zlib = await deflate(concat(...lines) as Uint8Array<ArrayBuffer>);
  const step = spec.idatBytes ?? zlib.length;
  const idats = [];
  for (let at = 0; at < zlib.length; at += step) {
    idats.push(chunk("IDAT", zlib.subarray(at, at + step)));
  }
  return concat(
    signature,
    ihdr(spec.width, spec.height, depth, spec.colorType, spec.interlaced ? 1 : 0),
    ...(spec.palette ? [chunk("PLTE", new Uint8Array(spec.palette))] : []),
    ...(spec.transparency ? [chunk("tRNS", spec.transparency)] : []),
    chunk("tEXt", enc.encode("Comment\0ignored ancillary chunk")),
    ...idats,
    chunk("IEND"),
  );
}

/** Random samples of `depth` bits for a picture. */
function randomSamples(seed: number, count: number, depth: number): number[] {
  const rand = prng(seed);
  return Array.from({ length: count }, () => Math.floor(rand() * 2 ** depth));
}

/** Offsets where each chunk starts, and the file length. */
function chunkBoundaries(png: Uint8Array): number[] {
  const view = new DataView(png.buffer, png.byteOffset, png.byteLength);
  const out = [];
  for (let at = 8; at < png.length; at += 12 + view.getUint32(at)) out.push(at);
  return [...out, png.length];
}

async function assertParseError(png: Uint8Array, message: RegExp): Promise<void> {
  await assert.rejects(decodePng(png), (err: Error) => {
    assert.ok(err instanceof ParseError, `${err.name}: ${err.message}`);
    assert.match(err.message, message);
    return true;
  });
}

/** Decodes `png`: success and ParseError are both fine, anything else fails the test. */
async function decodesOrParseError(png: Uint8Array, what: string): Promise<"ok" | "refused"> {
  try {
    await decodePng(png);
    return "ok";
  } catch (err) {
    if (err instanceof ParseError) return "refused";
    throw new Error(`${what}: threw ${(err as Error).name}: ${(err as Error).message}`, {
      cause: err,
    });
  }
}

const pixelFormats = [
  "rgba",
  "rgb24",
  "gray",
  "pal8",
  "ya8",
  "rgb48be",
  "rgba64be",
  "gray16be",
  "ya16be",
  "monob",
];

Deno.test("PNGs ffmpeg writes in each of its pixel formats decode to ffmpeg's RGBA", async () => {
  for (const pixFmt of pixelFormats) {
    for (const size of ["64x48", "37x23"]) {
      const png = await ffmpegPng(`${pixFmt}-${size}`, alphaSource(size), ["-pix_fmt", pixFmt]);
      await assertSameAsFfmpeg(png, `${pixFmt} ${size}`);
    }
  }
});

Deno.test("ffmpeg PNGs with each prediction (filter) method decode to ffmpeg's RGBA", async () => {
  for (const pred of ["none", "sub", "up", "avg", "paeth", "mixed"]) {
    const png = await ffmpegPng(`pred-${pred}`, alphaSource("53x31"), [
      "-pix_fmt",
      "rgba",
      "-pred",
      pred,
    ]);
    await assertSameAsFfmpeg(png, `pred ${pred}`);
  }
});

Deno.test("Adam7-interlaced PNGs from ffmpeg decode to ffmpeg's RGBA", async () => {
  for (const pixFmt of ["rgba", "rgb24", "pal8", "gray", "monob", "gray16be", "rgba64be"]) {
    for (const size of ["61x45", "9x9", "3x2", "1x1"]) {
      const png = await ffmpegPng(`adam7-${pixFmt}-${size}`, alphaSource(size), [
        "-pix_fmt",
        pixFmt,
        "-pred",
        "mixed",
        "-flags",
        "+ildct",
      ]);
      assert.equal(png[28], 1, "ffmpeg wrote an interlaced PNG");
      await assertSameAsFfmpeg(png, `adam7 ${pixFmt} ${size}`);
    }
  }
});

Deno.test("built PNGs: every colour type and bit depth, progressive and Adam7, decode to ffmpeg's RGBA", async () => {
  const combos: [PngSpec["colorType"], PngSpec["bitDepth"]][] = [
    [0, 1],
    [0, 2],
    [0, 4],
    [0, 8],
    [0, 16],
    [2, 8],
    [2, 16],
    [3, 1],
    [3, 2],
    [3, 4],
    [3, 8],
    [4, 8],
    [4, 16],
    [6, 8],
    [6, 16],
  ];
  let seed = 1;
  for (const [colorType, bitDepth] of combos) {
    for (const interlaced of [false, true]) {
      for (const [width, height] of [[29, 19], [5, 3]]) {
        const channels = samplesPerPixel[colorType];
        const entries = colorType === 3 ? Math.min(256, 2 ** bitDepth) : 0;
        const spec: PngSpec = {
          width,
          height,
          colorType,
          bitDepth,
          interlaced,
          samples: randomSamples(
            seed++,
            width * height * channels,
            colorType === 3 ? Math.log2(entries) : bitDepth,
          ),
          palette: colorType === 3 ? randomSamples(seed++, entries * 3, 8) : undefined,
          idatBytes: 64,
        };
        const what = `colour type ${colorType} depth ${bitDepth} ${width}x${height}${
          interlaced ? " adam7" : ""
        }`;
        await assertSameAsFfmpeg(await buildPng(spec), what);
      }
    }
  }
});

Deno.test("tRNS: palette alpha, and the transparent gray and RGB colour, become alpha", async () => {
  const palette = await buildPng({
    width: 4,
    height: 1,
    colorType: 3,
    bitDepth: 2,
    palette: [255, 0, 0, 0, 255, 0, 0, 0, 255, 9, 9, 9],
    transparency: new Uint8Array([0, 128]), // entries 2 and 3 stay opaque
    samples: [0, 1, 2, 3],
  });
  assert.deepEqual([...(await decodePng(palette)).rgba], [
    255,
    0,
    0,
    0,
    0,
    255,
    0,
    128,
    0,
    0,
    255,
    255,
    9,
    9,
    9,
    255,
  ]);
  await assertSameAsFfmpeg(palette, "palette tRNS");

  const gray = await buildPng({
    width: 3,
    height: 1,
    colorType: 0,
    bitDepth: 4,
    transparency: new Uint8Array([0, 5]),
    samples: [5, 6, 15],
  });
  assert.deepEqual([...(await decodePng(gray)).rgba], [
    85,
    85,
    85,
    0,
    102,
    102,
    102,
    255,
    255,
    255,
    255,
    255,
  ]);

  const rgb16 = await buildPng({
    width: 2,
    height: 1,
    colorType: 2,
    bitDepth: 16,
    transparency: new Uint8Array([0x12, 0x34, 0, 0, 0xff, 0xff]),
    samples: [0x1234, 0, 0xffff, 0x1234, 0, 0xfffe],
  });
  assert.deepEqual([...(await decodePng(rgb16)).rgba], [18, 0, 255, 0, 18, 0, 255, 255]);
});

Deno.test("random bytes and mutated PNGs are decoded or refused with a ParseError", async () => {
  const rand = prng(12);
  for (let i = 0; i < 200; i++) {
    const noise = randomBytes(rand, Math.floor(rand() * 400));
    await decodesOrParseError(noise, `noise ${i}`);
    await decodesOrParseError(concat(signature, noise), `signature + noise ${i}`);
  }
  const seeds = [
    await ffmpegPng("mutate-pal8", alphaSource("24x16"), ["-pix_fmt", "pal8"]),
    await ffmpegPng("mutate-rgba", alphaSource("24x16"), ["-pix_fmt", "rgba", "-flags", "+ildct"]),
  ];
  const outcomes = { ok: 0, refused: 0 };
  for (let i = 0; i < 600; i++) {
    const seed = seeds[i % seeds.length];
    const mutated = restampPngChecks(mutate(rand, seed, 1 + Math.floor(rand() * 4)));
    outcomes[await decodesOrParseError(mutated, `mutation ${i}`)]++;
  }
  assert.ok(outcomes.ok > 0 && outcomes.refused > 0, JSON.stringify(outcomes));
});

Deno.test("a PNG cut at any chunk boundary, or inside a chunk, is a ParseError", async () => {
  const png = await ffmpegPng("cut", alphaSource("32x20"), ["-pix_fmt", "rgba"]);
  const boundaries = chunkBoundaries(png);
  assert.ok(boundaries.length >= 4);
  const cuts = new Set([0, 4, 8]);
  for (const b of boundaries) for (const d of [-1, 0, 1, 6]) cuts.add(b + d);
  for (const cut of [...cuts].filter((c) => c >= 0 && c < png.length).sort((a, b) => a - b)) {
    await assertParseError(png.subarray(0, cut), /signature|ends at byte|truncated|no IDAT/);
  }
  await decodePng(png);
});

Deno.test("a wrong CRC in any chunk, critical or ancillary, is a ParseError", async () => {
  const png = await buildPng({
    width: 2,
    height: 2,
    colorType: 6,
    bitDepth: 8,
    samples: new Array(16).fill(7),
  });
  const boundaries = chunkBoundaries(png);
  for (let i = 0; i + 1 < boundaries.length; i++) {
    const bad = png.slice();
    bad[boundaries[i + 1] - 1] ^= 0x40;
    await assertParseError(bad, /has CRC 0x[0-9a-f]{8}, its bytes give/);
  }
});

Deno.test("a size over the limit or zero is refused before anything is inflated", async () => {
  const idat = chunk("IDAT", await deflate(new Uint8Array(10)));
  for (const [w, h] of [[maxPngSidePx + 1, 1], [1, maxPngSidePx + 1], [0x7fffffff, 0x7fffffff]]) {
    await assertParseError(
      concat(signature, ihdr(w, h, 8, 6), idat, chunk("IEND")),
      /over the 4096x4096 pixel limit/,
    );
  }
  await assertParseError(concat(signature, ihdr(0, 5, 8, 6), idat, chunk("IEND")), /is empty/);
});

/**
 * A zlib stream of a fixed-Huffman deflate block: one zero byte, then `copies` copies of 258
 * bytes at distance 1 (13 bits each), so it inflates about 160 times the ratio zlib reaches.
 * It never ends: the decoder must give up long before.
 */
function zeroBomb(copies: number): Uint8Array {
  const out = new Uint8Array(2 + Math.ceil((3 + 8 + copies * 13) / 8) + 1);
  out.set([0x78, 0x01]);
  let bit = 16;
  /** Writes a Huffman code most significant bit first. */
  const code = (value: number, bits: number) => {
    for (let i = bits - 1; i >= 0; i--, bit++) out[bit >> 3] |= ((value >> i) & 1) << (bit & 7);
  };
  code(0b110, 3); // BFINAL 1, then BTYPE 01 (fixed Huffman) least significant bit first
  code(0b00110000, 8); // literal 0
  for (let i = 0; i < copies; i++) {
    code(0b11000101, 8); // length code 285: 258 bytes
    code(0, 5); // distance code 0: distance 1
  }
  return out;
}

Deno.test("IDAT data that inflates beyond the picture's size stops early as a ParseError", async () => {
  // 16 MiB of deflate that would inflate to about 2.6 GB.
  const bomb = zeroBomb(10_000_000);
  const png = concat(signature, ihdr(16, 16, 8, 6), chunk("IDAT", bomb), chunk("IEND"));
  const started = performance.now();
  await assertParseError(png, /inflates to over the 1040 bytes expected/);
  const ms = performance.now() - started;
  // Inflating it all takes tens of seconds and gigabytes; stopping early takes well under 5 s.
  assert.ok(ms < 5000, `took ${ms} ms`);

  const tooMuch = await deflate(new Uint8Array(16 * 65 + 1));
  await assertParseError(
    concat(signature, ihdr(16, 16, 8, 0), chunk("IDAT", tooMuch), chunk("IEND")),
    /inflates to over/,
  );
  const tooLittle = await deflate(new Uint8Array(16 * 17 - 1));
  await assertParseError(
    concat(signature, ihdr(16, 16, 8, 0), chunk("IDAT", tooLittle), chunk("IEND")),
    /inflates to 271 bytes, 272 expected/,
  );
  await assertParseError(
    concat(
      signature,
      ihdr(1, 1, 8, 0),
      chunk("IDAT", new Uint8Array([0x78, 0x01, 0xff, 0xff])),
      chunk("IEND"),
    ),
    /not a valid zlib stream/,
  );
});

Deno.test("structural errors are ParseErrors naming the problem", async () => {
  const gray = (rows: number[][]) => deflate(new Uint8Array(rows.flat()));
  const idat = chunk("IDAT", await gray([[0, 1, 2]]));
  const plte = chunk("PLTE", new Uint8Array([1, 2, 3, 4, 5, 6]));
  const cases: [Uint8Array, RegExp][] = [
    [
      concat(signature, chunk("tEXt", enc.encode("a\0b")), ihdr(2, 1, 8, 0), idat, chunk("IEND")),
      /starts with tEXt, not IHDR/,
    ],
    [concat(signature, ihdr(2, 1, 8, 0), ihdr(2, 1, 8, 0), idat, chunk("IEND")), /second IHDR/],
    [
      concat(signature, ihdr(2, 1, 3, 0), idat, chunk("IEND")),
      /bit depth 3 is not allowed with colour type 0/,
    ],
    [concat(signature, ihdr(2, 1, 8, 5), idat, chunk("IEND")), /colour type 5/],
    [
      concat(signature, ihdr(2, 1, 4, 2), idat, chunk("IEND")),
      /bit depth 4 is not allowed with colour type 2/,
    ],
    [concat(signature, ihdr(2, 1, 8, 0, 2), idat, chunk("IEND")), /interlace method 2/],
    [concat(signature, ihdr(2, 1, 8, 3), idat, chunk("IEND")), /colour type 3 has no PLTE/],
    [
      concat(signature, ihdr(2, 1, 8, 0), plte, idat, chunk("IEND")),
      /PLTE chunk is not allowed with colour type 0/,
    ],
    [
      concat(signature, ihdr(2, 1, 1, 3), chunk("PLTE", new Uint8Array(9)), idat, chunk("IEND")),
      /PLTE chunk has 9 bytes/,
    ],
    [
      concat(
        signature,
        ihdr(2, 1, 8, 3),
        plte,
        chunk("tRNS", new Uint8Array(3)),
        idat,
        chunk("IEND"),
      ),
      /3 alpha values for 2 palette entries/,
    ],
    [
      concat(signature, ihdr(2, 1, 8, 6), chunk("tRNS", new Uint8Array(2)), idat, chunk("IEND")),
      /tRNS chunk is not allowed with colour type 6/,
    ],
    [
      concat(
        signature,
        ihdr(2, 1, 8, 0),
        idat,
        chunk("tEXt", enc.encode("a\0b")),
        idat,
        chunk("IEND"),
      ),
      /not consecutive/,
    ],
    [concat(signature, ihdr(2, 1, 8, 0), chunk("IEND")), /no IDAT/],
    [
      concat(signature, ihdr(2, 1, 8, 0), chunk("ABCD"), idat, chunk("IEND")),
      /unknown critical chunk ABCD/,
    ],
    [
      concat(signature, ihdr(2, 1, 8, 0), chunk("a1cd"), idat, chunk("IEND")),
      /invalid type "a1cd"/,
    ],
    [
      concat(signature, ihdr(2, 1, 8, 0), idat, chunk("IEND", new Uint8Array(1))),
      /IEND chunk has 1 bytes/,
    ],
    [
      concat(signature, ihdr(2, 1, 8, 0), chunk("IDAT", await gray([[5, 1, 2]])), chunk("IEND")),
      /row 0 has filter type 5/,
    ],
    [
      concat(
        signature,
        ihdr(2, 1, 8, 3),
        plte,
        chunk("IDAT", await gray([[0, 1, 2]])),
        chunk("IEND"),
      ),
      /palette index 2 is beyond the 2 PLTE entries/,
    ],
  ];
  for (const [png, message] of cases) await assertParseError(png, message);
  // Bytes after IEND are not the picture's and are ignored, as other decoders do.
  const ok = concat(signature, ihdr(2, 1, 8, 0), idat, chunk("IEND"), new Uint8Array([1, 2, 3]));
  assert.deepEqual([...(await decodePng(ok)).rgba], [1, 1, 1, 255, 2, 2, 2, 255]);
});
