import assert from "node:assert/strict";
import { ParseError } from "../../core/errors.ts";
import {
  buildHvcC,
  findH265ParameterSets,
  H265NalType,
  h265NalType,
  isH265Keyframe,
  parseH265Sps,
  parseHvcC,
} from "./h265.ts";
import { annexBToLengthPrefixed, splitAnnexB } from "./nalu.ts";
import {
  mutate,
  parsesOrThrowsParseError,
  prng,
  randomBytes,
  rawVideo,
} from "../formats/test_fixtures.ts";

Deno.test("parseH265Sps reads size (conformance window) and profile of x265 streams", async () => {
  for (const [size, w, h] of [["1920x1080", 1920, 1080], ["322x242", 322, 242]] as const) {
    const nal = splitAnnexB(await rawVideo("hevc", size)).find((n) =>
      h265NalType(n) === H265NalType.sps
    );
    assert.ok(nal);
    const info = parseH265Sps(nal);
    assert.deepEqual([info.width, info.height, info.profileIdc], [w, h, 1]);
    assert.equal(info.chromaFormatIdc, 1);
  }
});

Deno.test("parseH265Sps reads sps_max_num_reorder_pics", async () => {
  for (const [bframes, depth] of [["0", 0], ["1", 1]] as const) {
    const nal = splitAnnexB(await rawVideo("hevc", "320x240", ["-bf", bframes])).find((n) =>
      h265NalType(n) === H265NalType.sps
    );
    assert.ok(nal);
    assert.equal(parseH265Sps(nal).maxNumReorderPics, depth, `-bf ${bframes}`);
  }
});

Deno.test("hvcC builds from parameter sets and parses back; IRAP is a keyframe", async () => {
  const au = annexBToLengthPrefixed(await rawVideo("hevc", "320x240"));
  assert.ok(isH265Keyframe(au));
  const sets = findH265ParameterSets(au);
  const record = buildHvcC(sets.vps, sets.sps, sets.pps);
  const parsed = parseHvcC(record);
  assert.deepEqual([parsed.vps, parsed.sps, parsed.pps], [sets.vps, sets.sps, sets.pps]);
  assert.equal(parsed.nalLengthSize, 4);
  assert.equal(parsed.profileIdc, 1);
  assert.throws(() => parseHvcC(record.subarray(0, 30)), ParseError);
  assert.equal(isH265Keyframe(new Uint8Array([0, 0, 0, 3, 0x02, 0x01, 0xd0])), false);
});

Deno.test("H.265 fuzz: SPS and hvcC parsers throw ParseError only", async () => {
  const rand = prng(4);
  const au = annexBToLengthPrefixed(await rawVideo("hevc", "320x240"));
  const sets = findH265ParameterSets(au);
  const real = sets.sps[0];
  const record = buildHvcC(sets.vps, sets.sps, sets.pps);
  for (let i = 0; i < 3000; i++) {
    const spsInput = i % 3 === 0
      ? new Uint8Array([0x42, 0x01, ...randomBytes(rand, Math.floor(rand() * 60))])
      : i % 3 === 1
      ? mutate(rand, real, 1 + Math.floor(rand() * 4))
      : real.subarray(0, Math.floor(rand() * real.length));
    parsesOrThrowsParseError(() => parseH265Sps(spsInput), "parseH265Sps");
    const recordInput = i % 2
      ? mutate(rand, record, 1 + Math.floor(rand() * 4))
      : record.subarray(0, Math.floor(rand() * record.length));
    parsesOrThrowsParseError(() => parseHvcC(recordInput), "parseHvcC");
    isH265Keyframe(randomBytes(rand, 32));
  }
});
