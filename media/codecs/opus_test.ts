import assert from "node:assert/strict";
import { ParseError, TruncatedError } from "../../core/errors.ts";
import { buildOpusHead, type OpusHead, opusPacketSamples, parseOpusHead } from "./opus.ts";
import { mutate, parsesOrThrowsParseError, prng, randomBytes } from "../formats/test_fixtures.ts";

Deno.test("OpusHead builds and parses back (families 0 and 1)", () => {
  const stereo: OpusHead = {
    channels: 2,
    preSkip: 312,
    inputSampleRate: 48000,
    outputGain: -256,
    mappingFamily: 0,
  };
  const bytes = buildOpusHead(stereo);
  assert.equal(bytes.length, 19);
  assert.equal(new TextDecoder().decode(bytes.subarray(0, 8)), "OpusHead");
  assert.deepEqual([bytes[10], bytes[11]], [0x38, 0x01]); // little-endian pre-skip
  assert.deepEqual(parseOpusHead(bytes), stereo);
  const surround: OpusHead = {
    channels: 6,
    preSkip: 0,
    inputSampleRate: 44100,
    outputGain: 0,
    mappingFamily: 1,
    streamCount: 4,
    coupledCount: 2,
    channelMapping: new Uint8Array([0, 4, 1, 2, 3, 5]),
  };
  assert.deepEqual(parseOpusHead(buildOpusHead(surround)), surround);
  assert.throws(() => parseOpusHead(bytes.subarray(0, 18)), TruncatedError);
  assert.throws(() => buildOpusHead({ ...stereo, channels: 3 }), ParseError);
});

Deno.test("opusPacketSamples follows the TOC byte", () => {
  assert.equal(opusPacketSamples(new Uint8Array([0xfc])), 960); // CELT 20 ms, one frame
  assert.equal(opusPacketSamples(new Uint8Array([0xfd])), 1920); // two frames
  assert.equal(opusPacketSamples(new Uint8Array([0x00])), 480); // SILK 10 ms
  assert.equal(opusPacketSamples(new Uint8Array([0x18])), 2880); // SILK 60 ms
  assert.equal(opusPacketSamples(new Uint8Array([0x83, 3])), 360); // CELT 2.5 ms x3
  assert.throws(() => opusPacketSamples(new Uint8Array([0x83, 0])), ParseError);
  assert.throws(() => opusPacketSamples(new Uint8Array([0x1b, 3])), ParseError); // 180 ms
  assert.throws(() => opusPacketSamples(new Uint8Array([0x03])), TruncatedError);
  assert.throws(() => opusPacketSamples(new Uint8Array()), TruncatedError);
});

Deno.test("Opus fuzz: OpusHead and TOC parsers throw ParseError only", () => {
  const rand = prng(6);
  const head = buildOpusHead({
    channels: 2,
    preSkip: 312,
    inputSampleRate: 48000,
    outputGain: 0,
    mappingFamily: 0,
  });
  for (let i = 0; i < 5000; i++) {
    const bytes = i % 2 ? randomBytes(rand, Math.floor(rand() * 30)) : mutate(rand, head, 2);
    parsesOrThrowsParseError(() => parseOpusHead(bytes), "parseOpusHead");
    parsesOrThrowsParseError(() => opusPacketSamples(bytes), "opusPacketSamples");
  }
});
