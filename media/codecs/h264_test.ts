import assert from "node:assert/strict";
import { ParseError } from "../../core/errors.ts";
import {
  buildAvcC,
  findH264ParameterSets,
  H264NalType,
  h264NalType,
  isH264Keyframe,
  parseAvcC,
  parseH264Sps,
} from "./h264.ts";
import { annexBToLengthPrefixed, splitAnnexB } from "./nalu.ts";
import {
  mutate,
  parsesOrThrowsParseError,
  prng,
  randomBytes,
  rawVideo,
} from "../formats/test_fixtures.ts";

async function sps(size: string, args: string[] = []): Promise<Uint8Array> {
  const nal = splitAnnexB(await rawVideo("h264", size, args)).find((n) =>
    h264NalType(n) === H264NalType.sps
  );
  assert.ok(nal, "x264 wrote an SPS");
  return nal;
}

Deno.test("parseH264Sps reads size, profile and level of x264 streams", async () => {
  const hd = parseH264Sps(await sps("1920x1080"));
  assert.deepEqual([hd.width, hd.height, hd.profileIdc, hd.chromaFormatIdc], [1920, 1080, 100, 1]);
  assert.ok(hd.levelIdc >= 30 && hd.levelIdc <= 52);
  const cropped = parseH264Sps(await sps("322x242"));
  assert.deepEqual([cropped.width, cropped.height], [322, 242]);
  const baseline = parseH264Sps(await sps("176x144", ["-profile:v", "baseline"]));
  assert.deepEqual([baseline.width, baseline.height, baseline.profileIdc], [176, 144, 66]);
  const yuv444 = parseH264Sps(await sps("320x240", ["-pix_fmt", "yuv444p"]));
  assert.deepEqual([yuv444.width, yuv444.profileIdc, yuv444.chromaFormatIdc], [320, 244, 3]);
});

Deno.test("parseH264Sps handles interlaced (frame_mbs_only_flag 0) with cropping", async () => {
  const interlaced = await sps("1920x1080", ["-flags", "+ildct+ilme", "-x264-params", "tff=1"]);
  const info = parseH264Sps(interlaced);
  assert.deepEqual([info.width, info.height], [1920, 1080]);
});

Deno.test("parseH264Sps reads the VUI: reorder depth and frame rate; a cut VUI still parses", async () => {
  const full = await sps("640x360", ["-bf", "2", "-x264-params", "b-pyramid=none"]);
  const info = parseH264Sps(full);
  assert.deepEqual([info.maxNumReorderFrames, info.frameRate, info.pocType], [1, 25, 0]);
  assert.equal(parseH264Sps(await sps("640x360", ["-bf", "0"])).maxNumReorderFrames, 0);
  // The last bytes hold the bitstream restriction: without them the picture fields remain.
  const cut = parseH264Sps(full.subarray(0, full.length - 3));
  assert.deepEqual([cut.width, cut.height, cut.maxNumReorderFrames], [640, 360, undefined]);
});

Deno.test("avcC builds from parameter sets and parses back", async () => {
  const stream = await rawVideo("h264", "320x240");
  const au = annexBToLengthPrefixed(stream);
  const sets = findH264ParameterSets(au);
  assert.equal(sets.sps.length, 1);
  assert.equal(sets.pps.length, 1);
  assert.ok(isH264Keyframe(au));
  const record = buildAvcC(sets.sps, sets.pps);
  const parsed = parseAvcC(record);
  assert.deepEqual(parsed.sps, sets.sps);
  assert.deepEqual(parsed.pps, sets.pps);
  assert.equal(parsed.nalLengthSize, 4);
  assert.equal(parsed.profileIdc, 100);
  assert.throws(() => parseAvcC(record.subarray(0, 10)), ParseError);
});

Deno.test("isH264Keyframe is false without an IDR slice", () => {
  assert.equal(isH264Keyframe(new Uint8Array([0, 0, 0, 2, 0x41, 0x9a])), false);
  assert.equal(isH264Keyframe(new Uint8Array([0, 0, 0, 2, 0x09, 0xf0, 0, 0, 0, 1, 0x65])), true);
});

Deno.test("H.264 fuzz: SPS and avcC parsers throw ParseError only", async () => {
  const rand = prng(3);
  const real = await sps("640x360");
  const record = buildAvcC([real], [new Uint8Array([0x68, 0xeb, 0xe3, 0xcb])]);
  for (let i = 0; i < 3000; i++) {
    const spsInput = i % 3 === 0
      ? new Uint8Array([0x67, ...randomBytes(rand, Math.floor(rand() * 40))])
      : i % 3 === 1
      ? mutate(rand, real, 1 + Math.floor(rand() * 4))
      : real.subarray(0, Math.floor(rand() * real.length));
    parsesOrThrowsParseError(() => parseH264Sps(spsInput), "parseH264Sps");
    const recordInput = i % 2
      ? mutate(rand, record, 1 + Math.floor(rand() * 4))
      : record.subarray(0, Math.floor(rand() * record.length));
    parsesOrThrowsParseError(() => parseAvcC(recordInput), "parseAvcC");
    parsesOrThrowsParseError(() => buildAvcC([spsInput], []), "buildAvcC");
    isH264Keyframe(randomBytes(rand, 32));
  }
});
