import assert from "node:assert/strict";
import { ParseError, TruncatedError } from "../../core/errors.ts";
import { vp8KeyframeInfo } from "../codecs/vp8.ts";
import { type IvfFrame, ivfOf, IvfReader } from "./ivf.ts";
import {
  mutate,
  parsesOrThrowsParseError,
  prng,
  probeStreams,
  randomBytes,
  run,
  tempPath,
} from "./test_fixtures.ts";

/** Feeds `data` in random-size chunks, as a pipe would deliver it. */
function readAll(reader: IvfReader, data: Uint8Array, seed: number): IvfFrame[] {
  const rand = prng(seed);
  const frames: IvfFrame[] = [];
  for (let pos = 0; pos < data.length;) {
    const n = 1 + Math.floor(rand() * 700);
    frames.push(...reader.push(data.subarray(pos, pos + n)));
    pos += n;
  }
  return frames;
}

/** A 1 s 160x120 VP8 clip in IVF, made by ffmpeg. */
async function ffmpegIvf(): Promise<{ path: string; data: Uint8Array }> {
  const path = await tempPath("reader.ivf");
  await run("ffmpeg", [
    ...["-v", "error", "-y", "-f", "lavfi", "-i", "testsrc2=size=160x120:rate=10", "-t", "1"],
    ...["-c:v", "libvpx", "-g", "5", "-b:v", "200k", "-f", "ivf", path],
  ]);
  return { path, data: await Deno.readFile(path) };
}

Deno.test("IvfReader reads ffmpeg's VP8 IVF like ffprobe, whatever the chunking", async () => {
  const { path, data } = await ffmpegIvf();
  const [stream] = await probeStreams(path);
  for (const seed of [1, 2, 3]) {
    const reader = new IvfReader();
    const frames = readAll(reader, data, seed);
    reader.end();
    assert.equal(frames.length, Number(stream.nb_read_packets));
    assert.deepEqual(reader.header, {
      fourcc: "VP80",
      width: 160,
      height: 120,
      timeBaseNum: 1,
      timeBaseDen: 10,
    });
    assert.deepEqual(frames.map((f) => f.timestamp), frames.map((_, i) => i));
    assert.deepEqual(vp8KeyframeInfo(frames[0].data), { width: 160, height: 120, version: 0 });
    assert.equal(reader.bufferedBytes, 0);
  }
});

Deno.test("IvfReader gives back what ivfOf wrote", () => {
  const rand = prng(7);
  const written = [5, 0, 3000, 1].map((n) => randomBytes(rand, n));
  const reader = new IvfReader();
  const frames = readAll(reader, ivfOf(written, 320, 180), 4);
  reader.end();
  assert.deepEqual(frames.map((f) => f.data), written);
  assert.deepEqual(frames.map((f) => f.timestamp), [0, 1, 2, 3]);
  assert.deepEqual([reader.header?.width, reader.header?.height], [320, 180]);
});

Deno.test("IvfReader: a cut stream keeps its whole frames and end() says it was cut", () => {
  const written = [new Uint8Array(10).fill(1), new Uint8Array(20).fill(2)];
  const data = ivfOf(written, 64, 64);
  const boundaries = new Set([32, 32 + 12 + 10, data.length]);
  for (let cut = 0; cut <= data.length; cut++) {
    const reader = new IvfReader();
    const frames = reader.push(data.subarray(0, cut));
    const whole = cut < 54 ? 0 : cut < data.length ? 1 : 2;
    assert.equal(frames.length, whole, `cut at ${cut}`);
    if (boundaries.has(cut)) reader.end();
    else assert.throws(() => reader.end(), TruncatedError, `cut at ${cut}`);
  }
});

Deno.test("IvfReader rejects bad headers and oversized frames with a ParseError", () => {
  const data = ivfOf([new Uint8Array(100)], 64, 64);
  const badSignature = data.slice();
  badSignature[0] = 0x45;
  assert.throws(() => new IvfReader().push(badSignature), ParseError);
  const shortHeader = data.slice();
  shortHeader[6] = 8;
  assert.throws(() => new IvfReader().push(shortHeader), ParseError);
  const zeroTimeBase = data.slice();
  zeroTimeBase.fill(0, 16, 20);
  assert.throws(() => new IvfReader().push(zeroTimeBase), ParseError);
  // A size field beyond the limit fails as soon as the frame header is in, before buffering.
  const reader = new IvfReader({ maxFrameBytes: 99 });
  assert.throws(() => reader.push(data), /exceeds 99/);
  assert.ok(reader.bufferedBytes <= 12);
  const huge = data.slice();
  new DataView(huge.buffer).setUint32(32, 0xffffffff, true);
  const bounded = new IvfReader();
  assert.throws(() => bounded.push(huge.subarray(0, 44)), ParseError);
  assert.ok(bounded.bufferedBytes <= 12);
});

Deno.test("IvfReader on random and mutated bytes: frames or a ParseError, bounded memory", async () => {
  const { data } = await ffmpegIvf();
  const rand = prng(99);
  const maxFrameBytes = 64 * 1024;
  for (let i = 0; i < 300; i++) {
    const input = i % 3 === 0
      ? randomBytes(rand, Math.floor(rand() * 4000))
      : i % 3 === 1
      ? mutate(rand, data, 1 + Math.floor(rand() * 8))
      // Random bytes behind a valid header exercise the frame size checks.
      : new Uint8Array([...data.subarray(0, 32), ...randomBytes(rand, 2000)]);
    const reader = new IvfReader({ maxFrameBytes });
    parsesOrThrowsParseError(() => readAll(reader, input, i), `input ${i}`);
    assert.ok(reader.bufferedBytes <= maxFrameBytes + 12);
  }
});
