import assert from "node:assert/strict";
import { ParseError } from "../../core/errors.ts";
import { prng, randomBytes } from "../formats/test_fixtures.ts";
import { parseVp8Keyframe, vp8IsKeyframe, vp8KeyframeInfo } from "./vp8.ts";

/** A keyframe header: tag (key, version 0, shown), start code, 640x480 with scale bits set. */
const keyframe = new Uint8Array([0x10, 0x02, 0x00, 0x9d, 0x01, 0x2a, 0x80, 0x42, 0xe0, 0xc1, 0]);

Deno.test("vp8: keyframe header gives size without the scale bits, and the version", () => {
  assert.equal(vp8IsKeyframe(keyframe), true);
  assert.deepEqual(parseVp8Keyframe(keyframe), { width: 640, height: 480, version: 0 });
  const v3 = keyframe.slice();
  v3[0] |= 3 << 1;
  assert.equal(parseVp8Keyframe(v3).version, 3);
  // Read in place, after an RTP payload descriptor.
  assert.deepEqual(vp8KeyframeInfo(new Uint8Array([0x10, ...keyframe]), 1)?.width, 640);
});

Deno.test("vp8: interframes, truncated and random bytes are no keyframe, never a crash", () => {
  const inter = keyframe.slice();
  inter[0] |= 1;
  assert.equal(vp8IsKeyframe(inter), false);
  assert.equal(vp8KeyframeInfo(inter), undefined);
  assert.equal(vp8KeyframeInfo(keyframe.subarray(0, 9)), undefined);
  assert.equal(vp8IsKeyframe(new Uint8Array()), false);
  assert.throws(() => parseVp8Keyframe(inter), ParseError);
  const rand = prng(8);
  for (let i = 0; i < 2000; i++) vp8KeyframeInfo(randomBytes(rand, Math.floor(rand() * 16)));
});
