import assert from "node:assert/strict";
import { ParseError, TruncatedError } from "../../core/errors.ts";
import {
  adtsHeaderBytes,
  adtsToAsc,
  buildAsc,
  parseAdtsHeader,
  parseAsc,
  writeAdtsHeader,
} from "./aac.ts";
import {
  mutate,
  parsesOrThrowsParseError,
  prng,
  probeStreams,
  randomBytes,
  run,
  tempPath,
} from "../formats/test_fixtures.ts";

Deno.test("parseAsc reads AAC-LC and explicit HE-AAC configs", () => {
  assert.deepEqual(parseAsc(new Uint8Array([0x11, 0x90])), {
    objectType: 2,
    sampleRate: 48000,
    extensionSampleRate: undefined,
    channelConfig: 2,
    channels: 2,
  });
  assert.equal(parseAsc(new Uint8Array([0x12, 0x08])).sampleRate, 44100);
  const he = parseAsc(new Uint8Array([0x2b, 0x11, 0x88]));
  assert.deepEqual([he.objectType, he.sampleRate, he.extensionSampleRate], [2, 24000, 48000]);
  assert.throws(() => parseAsc(new Uint8Array([0x11])), TruncatedError);
  assert.throws(() => parseAsc(new Uint8Array([0x17, 0x90])), ParseError); // index 14
});

Deno.test("buildAsc round-trips through parseAsc", () => {
  assert.deepEqual(buildAsc(2, 48000, 2), new Uint8Array([0x11, 0x90]));
  const parsed = parseAsc(buildAsc(2, 44100, 1));
  assert.deepEqual([parsed.objectType, parsed.sampleRate, parsed.channels], [2, 44100, 1]);
  assert.throws(() => buildAsc(2, 12345, 2), ParseError);
});

Deno.test("ADTS headers written and parsed agree", () => {
  const out = new Uint8Array(adtsHeaderBytes + 300);
  writeAdtsHeader(out, 0, parseAsc(new Uint8Array([0x11, 0x90])), 300);
  const header = parseAdtsHeader(out);
  assert.deepEqual(
    [header.objectType, header.sampleRate, header.channelConfig, header.frameBytes],
    [2, 48000, 2, 307],
  );
  assert.equal(header.headerBytes, 7);
  assert.deepEqual(adtsToAsc(header), new Uint8Array([0x11, 0x90]));
  assert.throws(() => parseAdtsHeader(out.subarray(0, 6)), TruncatedError);
});

Deno.test("parseAdtsHeader walks every frame of an ffmpeg ADTS file", async () => {
  const path = await tempPath("sine.aac");
  await run("ffmpeg", [
    "-v",
    "error",
    "-y",
    "-f",
    "lavfi",
    "-i",
    "sine=frequency=440:sample_rate=44100",
    "-t",
    "1",
    "-ac",
    "2",
    "-c:a",
    "aac",
    "-f",
    "adts",
    path,
  ]);
  const data = await Deno.readFile(path);
  let frames = 0;
  for (let pos = 0; pos < data.length; frames++) {
    const h = parseAdtsHeader(data, pos);
    assert.deepEqual([h.sampleRate, h.channelConfig], [44100, 2]);
    pos += h.frameBytes;
  }
  const [stream] = await probeStreams(path);
  assert.equal(frames, Number(stream.nb_read_packets));
});

Deno.test("AAC fuzz: ASC and ADTS parsers throw ParseError only", () => {
  const rand = prng(5);
  const header = new Uint8Array(adtsHeaderBytes + 10);
  writeAdtsHeader(header, 0, parseAsc(new Uint8Array([0x12, 0x10])), 10);
  for (let i = 0; i < 5000; i++) {
    const bytes = i % 2 ? randomBytes(rand, Math.floor(rand() * 8)) : mutate(rand, header, 2);
    parsesOrThrowsParseError(() => parseAsc(bytes), "parseAsc");
    parsesOrThrowsParseError(() => parseAdtsHeader(bytes), "parseAdtsHeader");
    parsesOrThrowsParseError(() => adtsToAsc(parseAdtsHeader(bytes)), "adtsToAsc");
  }
});
