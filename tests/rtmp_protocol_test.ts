/**
 * The RTMP protocol layer over bytes: round trips of chunks, AMF0 and FLV tags, and
 * fuzz-style runs (seeded PRNG) of the handshake, chunk reader and AMF0 decoder over random,
 * mutated and truncated input: each ends in a typed error or a clean result, within bounds.
 */
import assert from "node:assert/strict";
import { BadRequestError, ParseError, TruncatedError } from "../core/errors.ts";
import { mutate, prng, randomBytes } from "../media/formats/test_fixtures.ts";
import {
  decodeAmf0,
  decodeAmf0All,
  encodeAmf0,
  maxAmfDepth,
} from "../media/protocols/rtmp/amf0.ts";
import {
  ChunkReader,
  defaultChunkBytes,
  maxChunkBytes,
  maxChunkStreams,
  maxMessageBytes,
} from "../media/protocols/rtmp/chunk_reader.ts";
import { writeChunks } from "../media/protocols/rtmp/chunk_writer.ts";
import { buildOnStatus, parseCommand, parseMetaData } from "../media/protocols/rtmp/command.ts";
import {
  buildAudioConfigTag,
  parseAudioTag,
  parseVideoTag,
  writeVideoFrameHeader,
} from "../media/protocols/rtmp/flv_tag.ts";
import {
  buildHandshakeEcho,
  buildHandshakeHello,
  handshakePacketBytes,
  parseHandshakeHello,
} from "../media/protocols/rtmp/handshake.ts";
import {
  buildSetChunkSize,
  MessageType,
  type RtmpMessage,
} from "../media/protocols/rtmp/message.ts";
import { parseRtmpUrl } from "../media/protocols/rtmp/url.ts";
import { silentAacFrame } from "../media/publishers/rtmp_silence.ts";
import { RtmpMediaReceiver } from "../media/providers/rtmp_receiver.ts";

/** Runs `fn`; it must return or throw ParseError (TruncatedError is one), nothing else. */
function typedOrClean(fn: () => unknown, label: string): void {
  try {
    fn();
  } catch (err) {
    assert.ok(err instanceof ParseError, `${label}: ${err}`);
  }
}

const seeds = [1, 7, 42, 1234, 98765];

function message(type: number, timestamp: number, payload: Uint8Array, streamId = 1): RtmpMessage {
  return { type, streamId, timestamp, payload };
}

Deno.test("chunks: messages survive the writer and the reader at any split and chunk size", () => {
  const rand = prng(3);
  for (const chunkBytes of [128, 4096]) {
    const messages = [
      message(MessageType.video, 0, randomBytes(rand, 10_000)),
      message(MessageType.audio, 40, randomBytes(rand, 300)),
      message(MessageType.video, 0x1000000 + 5, randomBytes(rand, 5000)), // extended timestamp
      message(MessageType.dataAmf0, 80, new Uint8Array(0)),
    ];
    let wire = writeChunks(
      2,
      message(MessageType.setChunkSize, 0, buildSetChunkSize(chunkBytes), 0),
      128,
    );
    for (const [i, m] of messages.entries()) {
      const bytes = writeChunks(i % 2 ? 4 : 300, m, chunkBytes); // 300: a 2-byte chunk stream id
      const joined = new Uint8Array(wire.length + bytes.length);
      joined.set(wire);
      joined.set(bytes, wire.length);
      wire = joined;
    }
    const reader = new ChunkReader();
    const got: RtmpMessage[] = [];
    for (let pos = 0; pos < wire.length;) {
      const step = 1 + Math.floor(rand() * 700);
      got.push(...reader.push(wire.subarray(pos, pos + step)));
      pos += step;
    }
    reader.end();
    assert.equal(reader.chunkBytes, chunkBytes);
    assert.deepEqual(got.slice(1), messages);
  }
});

Deno.test("chunks: format 1-3 headers apply timestamp deltas; abort drops a partial message", () => {
  // csid 3: fmt 0 at t=1000 (len 2), fmt 2 delta 40 (len kept), fmt 3 (delta reapplied).
  const wire = Uint8Array.from([
    0x03,
    0x00,
    0x03,
    0xe8,
    0x00,
    0x00,
    0x02,
    0x08,
    0x01,
    0x00,
    0x00,
    0x00,
    0xaa,
    0xbb,
    0x83,
    0x00,
    0x00,
    0x28,
    0xcc,
    0xdd, // fmt 2 on csid 3
    0xc3,
    0xee,
    0xff, // fmt 3 on csid 3
  ]);
  const got = new ChunkReader().push(wire);
  assert.deepEqual(got.map((m) => m.timestamp), [1000, 1040, 1080]);
  assert.deepEqual([...got[2].payload], [0xee, 0xff]);

  const reader = new ChunkReader();
  // A 300-byte message on csid 4 cut after its first 128-byte chunk, then Abort(4).
  const first = writeChunks(4, message(MessageType.audio, 0, new Uint8Array(300)), 128).subarray(
    0,
    12 + 128,
  );
  assert.deepEqual(reader.push(first), []);
  assert.throws(() => reader.end(), TruncatedError);
  const abort = writeChunks(
    2,
    message(MessageType.abort, 0, Uint8Array.from([0, 0, 0, 4]), 0),
    128,
  );
  assert.equal(reader.push(abort)[0].type, MessageType.abort);
  reader.end();
});

Deno.test("chunks: limits on message size, chunk size and chunk streams are ParseErrors", () => {
  const tooBig = Uint8Array.from([
    0x04,
    0,
    0,
    0,
    (maxMessageBytes + 1) >> 16,
    ((maxMessageBytes + 1) >> 8) & 0xff,
    (maxMessageBytes + 1) & 0xff,
    9,
    1,
    0,
    0,
    0,
  ]);
  assert.throws(() => new ChunkReader().push(tooBig), ParseError);
  const hugeChunk = writeChunks(
    2,
    message(MessageType.setChunkSize, 0, buildSetChunkSize(maxChunkBytes + 1), 0),
    128,
  );
  assert.throws(() => new ChunkReader().push(hugeChunk), ParseError);
  assert.throws(() => new ChunkReader().push(Uint8Array.from([0x44, 0, 0, 0])), ParseError); // fmt 1 first
  // A partial message (header says 200 bytes, one 128-byte chunk sent) on each of many chunk streams.
  const reader = new ChunkReader();
  assert.throws(() => {
    for (let csid = 3; csid < 3 + maxChunkStreams + 1; csid++) {
      const header = csid < 64 ? [csid] : [0, csid - 64];
      reader.push(
        Uint8Array.from([...header, 0, 0, 0, 0, 0, 200, 8, 1, 0, 0, 0, ...new Uint8Array(128)]),
      );
    }
  }, /more than 64 chunk streams/);
});

Deno.test("fuzz: the chunk reader gives messages or ParseError on random and mutated input, bounded", () => {
  for (const seed of seeds) {
    const rand = prng(seed);
    const valid = writeChunks(
      6,
      message(MessageType.video, 123, randomBytes(rand, 3000)),
      defaultChunkBytes,
    );
    for (let i = 0; i < 300; i++) {
      const input = i % 3 === 0
        ? randomBytes(rand, Math.floor(rand() * 2000))
        : i % 3 === 1
        ? mutate(rand, valid, 1 + Math.floor(rand() * 4))
        : valid.subarray(0, Math.floor(rand() * valid.length));
      const reader = new ChunkReader();
      typedOrClean(() => {
        for (let pos = 0; pos < input.length; pos += 97) {
          for (const m of reader.push(input.subarray(pos, pos + 97))) {
            assert.ok(m.payload.length <= maxMessageBytes);
          }
        }
        reader.end();
      }, `chunk seed ${seed} case ${i}`);
    }
  }
});

Deno.test("fuzz: the handshake accepts only version 3 with a whole C1, else a typed error", () => {
  const hello = buildHandshakeHello(1234);
  assert.equal(hello.length, 1 + handshakePacketBytes);
  const c1 = parseHandshakeHello(hello);
  assert.deepEqual(buildHandshakeEcho(c1), hello.subarray(1));
  assert.throws(() => parseHandshakeHello(hello.subarray(0, 100)), TruncatedError);
  assert.throws(() => parseHandshakeHello(Uint8Array.from([6, ...hello.subarray(1)])), ParseError);
  for (const seed of seeds) {
    const rand = prng(seed);
    for (let i = 0; i < 200; i++) {
      const input = i % 2
        ? randomBytes(rand, Math.floor(rand() * 1600))
        : mutate(rand, hello, 1 + Math.floor(rand() * 4));
      typedOrClean(() => parseHandshakeHello(input), `handshake seed ${seed} case ${i}`);
    }
  }
});

Deno.test("AMF0: commands and metadata round trip; prototype keys stay data", () => {
  const status = parseCommand(buildOnStatus("error", "NetStream.Publish.BadName", "in use"));
  assert.equal(status.name, "onStatus");
  assert.deepEqual(status.args[0], {
    level: "error",
    code: "NetStream.Publish.BadName",
    description: "in use",
  });
  const values = [1.5, true, "x".repeat(70_000), null, [1, "a", { b: false }], {
    nested: { deep: 1 },
  }];
  assert.deepEqual(decodeAmf0All(encodeAmf0(...values)), values);
  const meta = parseMetaData(encodeAmf0("@setDataFrame", "onMetaData", { width: 640 }));
  assert.deepEqual(meta, { width: 640 });
  const evil = decodeAmf0(encodeAmf0({ ["__proto__"]: 1 } as never)).value as Record<
    string,
    unknown
  >;
  assert.equal(Object.getPrototypeOf(evil), Object.prototype);
});

Deno.test("fuzz: the AMF0 decoder gives values or ParseError, even for deep nesting and lying counts", () => {
  let deep = encodeAmf0(1);
  for (let i = 0; i <= maxAmfDepth + 1; i++) deep = Uint8Array.from([10, 0, 0, 0, 1, ...deep]);
  assert.throws(() => decodeAmf0(deep), ParseError);
  // A strict array claiming 2^32-1 elements in 5 bytes: refused before any allocation.
  assert.throws(() => decodeAmf0(Uint8Array.from([10, 0xff, 0xff, 0xff, 0xff])), TruncatedError);
  const sample = encodeAmf0("connect", 1, { app: "live", tcUrl: "rtmp://h/live", n: [1, 2] });
  for (const seed of seeds) {
    const rand = prng(seed);
    for (let i = 0; i < 300; i++) {
      const input = i % 3 === 0
        ? randomBytes(rand, Math.floor(rand() * 200))
        : i % 3 === 1
        ? mutate(rand, sample, 1 + Math.floor(rand() * 4))
        : sample.subarray(0, Math.floor(rand() * sample.length));
      typedOrClean(() => decodeAmf0All(input), `amf seed ${seed} case ${i}`);
    }
  }
});

Deno.test("FLV tags: AVC, Enhanced hvc1 and Opus parse; random tags give a typed error or a value", () => {
  const avc = new Uint8Array(5 + 3);
  writeVideoFrameHeader(avc, "H264", true, -2);
  const parsedAvc = parseVideoTag(avc);
  assert.deepEqual(
    parsedAvc.kind === "frame" && [parsedAvc.codec, parsedAvc.keyframe, parsedAvc.ctsMs],
    [
      "H264",
      true,
      -2,
    ],
  );
  const hevc = new Uint8Array(8 + 3);
  writeVideoFrameHeader(hevc, "H265", false, 40);
  const parsedHevc = parseVideoTag(hevc);
  assert.deepEqual(
    parsedHevc.kind === "frame" && [parsedHevc.codec, parsedHevc.keyframe, parsedHevc.ctsMs],
    [
      "H265",
      false,
      40,
    ],
  );
  const opusHead = Uint8Array.from(
    [..."OpusHead"].map((c) => c.charCodeAt(0)).concat([1, 2, 0, 0, 0x80, 0xbb, 0, 0, 0, 0, 0]),
  );
  const opus = parseAudioTag(buildAudioConfigTag("OPUS", opusHead));
  assert.deepEqual(opus.kind === "config" && [opus.codec, opus.config.length], ["OPUS", 19]);
  for (const seed of seeds) {
    const rand = prng(seed);
    for (let i = 0; i < 200; i++) {
      const input = randomBytes(rand, Math.floor(rand() * 12));
      typedOrClean(() => parseVideoTag(input), `video seed ${seed}`);
      typedOrClean(() => parseAudioTag(input), `audio seed ${seed}`);
    }
  }
});

Deno.test("FLV sound formats: MP3 (2, 14) are frames with their rate; Speex, Nellymoser, PCM are named refusals", () => {
  const tag = (b0: number) => parseAudioTag(Uint8Array.of(b0, 0xff, 0xfb));
  assert.deepEqual(tag(0x2f), {
    kind: "frame",
    codec: "MP3",
    data: Uint8Array.of(0xff, 0xfb),
    rateHz: 44100,
    channels: 2,
  });
  const mp3At8k = tag(0xe2);
  assert.deepEqual(mp3At8k.kind === "frame" && [mp3At8k.rateHz, mp3At8k.channels], [8000, 1]);
  const named = [0x00, 0x10, 0x46, 0x52, 0x62, 0xb6].map((b0) => {
    const t = tag(b0);
    return t.kind === "unsupported" ? t.codec : t.kind;
  });
  assert.deepEqual(named, [
    "Linear PCM",
    "ADPCM",
    "Nellymoser",
    "Nellymoser",
    "Nellymoser",
    "Speex",
  ]);
  // The receiver refuses the publish, naming the codec, instead of dropping its audio.
  const receiver = new RtmpMediaReceiver();
  assert.throws(
    () =>
      receiver.receive({
        type: MessageType.audio,
        streamId: 1,
        timestamp: 0,
        payload: Uint8Array.of(0xb6, 1),
      }),
    (err) =>
      err instanceof BadRequestError && err.field === "audiocodecid" &&
      err.message === "audio codec Speex is not supported",
  );
});

Deno.test("silent AAC frames: mono and stereo AAC-LC; other configurations are 501", () => {
  assert.equal(silentAacFrame(Uint8Array.from([0x11, 0x88]), "/push/mute").length, 4); // 48 kHz mono
  assert.equal(silentAacFrame(Uint8Array.from([0x11, 0x90]), "/push/mute").length, 6); // 48 kHz stereo
  assert.throws(
    () => silentAacFrame(Uint8Array.from([0x11, 0xb0]), "/push/mute"), // 6 channels
    (err: Error & { status?: number }) => err.status === 501,
  );
});

Deno.test("RTMP URLs: app, stream name and tcUrl; malformed ones are 400s naming the field", () => {
  assert.deepEqual(parseRtmpUrl("rtmp://127.0.0.1:1940/live/cam/1?k=v", "uri"), {
    hostname: "127.0.0.1",
    port: 1940,
    app: "live",
    streamName: "cam/1?k=v",
    tcUrl: "rtmp://127.0.0.1:1940/live",
  });
  assert.equal(parseRtmpUrl("rtmp://h/live/s", "uri").port, 1935);
  for (
    const bad of ["rtmp://h/live", "rtmp://h", "rtmps://h/live/s", "rtmp://h/live/%zz", "nope"]
  ) {
    assert.throws(
      () => parseRtmpUrl(bad, "rtmpUrl"),
      (err: Error & { status?: number; field?: string }) =>
        err.status === 400 && err.field === "rtmpUrl",
    );
  }
});
