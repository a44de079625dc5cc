import assert from "node:assert/strict";
import { parseMpegAudioHeader } from "./mp3.ts";
import { parsesOrThrowsParseError, prng, randomBytes } from "../formats/test_fixtures.ts";

Deno.test("parseMpegAudioHeader reads layer III, layer II and MPEG-2 headers", () => {
  // MPEG-1 layer III, 128 kbit/s, 44.1 kHz, no padding, joint stereo: 417 bytes.
  assert.deepEqual(parseMpegAudioHeader(new Uint8Array([0xff, 0xfb, 0x90, 0x44])), {
    version: 1,
    layer: 3,
    sampleRate: 44100,
    channels: 2,
    samples: 1152,
    frameBytes: 417,
  });
  // MPEG-1 layer II, 192 kbit/s, 48 kHz, mono: 576 bytes.
  const mp2 = parseMpegAudioHeader(new Uint8Array([0xff, 0xfd, 0xa4, 0xc0]));
  assert.deepEqual([mp2.layer, mp2.sampleRate, mp2.channels, mp2.frameBytes], [2, 48000, 1, 576]);
  // MPEG-2 layer III, 64 kbit/s, 24 kHz, padded: 576 samples, 193 bytes.
  const m2 = parseMpegAudioHeader(new Uint8Array([0xff, 0xf3, 0x86, 0x00]));
  assert.deepEqual([m2.version, m2.samples, m2.sampleRate, m2.frameBytes], [2, 576, 24000, 193]);
});

Deno.test("parseMpegAudioHeader refuses free format, reserved values and random bytes", () => {
  assert.throws(() => parseMpegAudioHeader(new Uint8Array([0xff, 0xfb, 0x00, 0x44])));
  assert.throws(() => parseMpegAudioHeader(new Uint8Array([0xff, 0xfb, 0x9c, 0x44])));
  const rand = prng(3);
  for (let i = 0; i < 2000; i++) {
    const bytes = randomBytes(rand, Math.floor(rand() * 6));
    if (rand() < 0.5 && bytes.length > 1) bytes.set([0xff, 0xe0 | bytes[1]]);
    parsesOrThrowsParseError(() => parseMpegAudioHeader(bytes), "MPEG audio header");
  }
});
