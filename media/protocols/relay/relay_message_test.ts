import assert from "node:assert/strict";
import { ParseError, TruncatedError } from "../../../core/errors.ts";
import type { MediaFrame, Track } from "../../frame.ts";
import { Mp4Demuxer } from "../../formats/mp4/demuxer.ts";
import { type Fixture, fixture, prng, randomBytes } from "../../formats/test_fixtures.ts";
import { openFileByteSource } from "../../providers/file_source.ts";
import {
  decodeRelayMessage,
  encodeDropped,
  encodeEnd,
  encodeFrame,
  encodeHello,
  encodeKeyframeRequest,
  maxRelayFrameBytes,
  maxRelayTextChars,
  maxRelayTracks,
  RelayType,
  relayVersion,
} from "./relay_message.ts";

/** The tracks and frames of an ffmpeg-made clip, as the VOD provider reads them. */
async function clip(name: Fixture): Promise<{ tracks: Track[]; frames: MediaFrame[] }> {
  const source = await openFileByteSource(await fixture(name, "mp4"));
  try {
    const demuxer = await Mp4Demuxer.open(source);
    const frames: MediaFrame[] = [];
    for await (const frame of demuxer.frames()) frames.push(frame);
    return { tracks: [...demuxer.tracks], frames };
  } finally {
    source.close();
  }
}

/** Tracks of the codecs no fixture has, or has without a config. */
const configless: Track[] = [
  { id: 0, kind: "video", codec: "VP8", clockRate: 90000, width: 640, height: 480 },
  { id: 1, kind: "audio", codec: "OPUS", clockRate: 48000, sampleRate: 48000, channels: 2 },
  { id: 2, kind: "audio", codec: "OPUS", clockRate: 48000, config: { codec: "OPUS" } },
  { id: 3, kind: "audio", codec: "PCMU", clockRate: 8000, sampleRate: 8000, channels: 1 },
  { id: 4, kind: "audio", codec: "PCMA", clockRate: 8000 },
  { id: 5, kind: "audio", codec: "G722", clockRate: 8000, sampleRate: 16000 },
  { id: 6, kind: "audio", codec: "MP3", clockRate: 44100 },
];

function hello(bytes: Uint8Array): { streamName: string; tracks: Track[] } {
  const message = decodeRelayMessage(bytes);
  assert.equal(message.type, "hello");
  if (message.type !== "hello") throw new Error("unreachable");
  assert.equal(message.version, relayVersion);
  return message;
}

for (const name of ["h264_aac", "h264_opus", "h265_aac"] as const) {
  Deno.test(`relay message: the tracks and every frame of ${name} round-trip`, async () => {
    const { tracks, frames } = await clip(name);
    assert.ok(tracks.every((t) => t.config), "the fixture's tracks carry their configs");
    const back = hello(encodeHello("cam/1 ünï", tracks));
    assert.equal(back.streamName, "cam/1 ünï");
    assert.deepEqual(back.tracks, tracks);
    assert.ok(frames.some((f) => f.keyframe && tracks[f.trackId].kind === "video"));
    for (const frame of frames) {
      const message = decodeRelayMessage(encodeFrame(frame), back.tracks);
      assert.deepEqual(message, { type: "frame", frame });
    }
  });
}

Deno.test("relay message: tracks without a config, and Opus with and without a head, round-trip", () => {
  assert.deepEqual(hello(encodeHello("s", configless)).tracks, configless);
});

Deno.test("relay message: pts and dts keep every safe integer, negative ones included", () => {
  const tracks = [configless[0]];
  for (
    const [pts, dts] of [[0, 0], [2 ** 53 - 1, 2 ** 53 - 2], [2 ** 33 + 7, -3003], [
      1,
      -(2 ** 53 - 1),
    ]]
  ) {
    const frame: MediaFrame = {
      trackId: 0,
      codec: "VP8",
      pts,
      dts,
      keyframe: false,
      data: new Uint8Array([1, 2, 3]),
    };
    assert.deepEqual(decodeRelayMessage(encodeFrame(frame), tracks), { type: "frame", frame });
  }
  for (const pts of [2 ** 53, 1.5, NaN, Infinity]) {
    const bytes = encodeFrame({
      trackId: 0,
      codec: "VP8",
      pts,
      dts: 0,
      keyframe: true,
      data: new Uint8Array(),
    });
    assert.throws(() => decodeRelayMessage(bytes, tracks), ParseError, String(pts));
  }
});

Deno.test("relay message: end, dropped and keyframe round-trip; an unknown type is skippable", () => {
  assert.deepEqual(decodeRelayMessage(encodeEnd("stopped: «restricted access»")), {
    type: "end",
    reason: "stopped: «restricted access»",
  });
  const long = decodeRelayMessage(encodeEnd("x".repeat(5000)));
  assert.deepEqual(long, { type: "end", reason: "x".repeat(maxRelayTextChars) });
  assert.deepEqual(decodeRelayMessage(encodeDropped(123456)), { type: "dropped", frames: 123456 });
  assert.deepEqual(decodeRelayMessage(encodeKeyframeRequest()), { type: "keyframe" });
  assert.deepEqual(decodeRelayMessage(Uint8Array.of(0x7f, 1, 2, 3)), {
    type: "unknown",
    code: 0x7f,
  });
});

/** Encodes a hello with `json` as its body, bypassing the encoder's own checks. */
function rawHello(json: unknown, version = relayVersion): Uint8Array {
  const body = new TextEncoder().encode(JSON.stringify(json));
  return Uint8Array.of(RelayType.hello, version, ...body);
}

Deno.test("relay message: out-of-bounds and inconsistent messages are ParseErrors", () => {
  const tracks = [configless[0]];
  const refused: [what: string, bytes: Uint8Array, tracks?: readonly Track[]][] = [
    ["empty", new Uint8Array(), undefined],
    [
      "frame before hello",
      encodeFrame({
        trackId: 0,
        codec: "VP8",
        pts: 0,
        dts: 0,
        keyframe: true,
        data: new Uint8Array(1),
      }),
    ],
    [
      "unknown track",
      encodeFrame({
        trackId: 1,
        codec: "VP8",
        pts: 0,
        dts: 0,
        keyframe: true,
        data: new Uint8Array(1),
      }),
      tracks,
    ],
    [
      "frame too big",
      new Uint8Array(19 + maxRelayFrameBytes + 1).fill(RelayType.frame, 0, 1),
      tracks,
    ],
    ["unknown flags", Uint8Array.of(RelayType.frame, 0, 0x80, ...new Uint8Array(16)), tracks],
    ["newer version", encodeHello("s", tracks).fill(relayVersion + 1, 1, 2)],
    ["not JSON", Uint8Array.of(RelayType.hello, relayVersion, 0x7b)],
    ["not UTF-8", Uint8Array.of(RelayType.end, 0xff, 0xfe)],
    ["no tracks", rawHello({ streamName: "s", tracks: [] })],
    [
      "too many tracks",
      encodeHello(
        "s",
        Array.from({ length: maxRelayTracks + 1 }, (_, id) => ({ ...configless[3], id })),
      ),
    ],
    ["id not its index", rawHello({ streamName: "s", tracks: [{ ...configless[3], id: 1 }] })],
    [
      "kind not the codec's",
      rawHello({ streamName: "s", tracks: [{ ...configless[3], kind: "video" }] }),
    ],
    [
      "unknown codec",
      rawHello({ streamName: "s", tracks: [{ ...configless[3], codec: "SPEEX" }] }),
    ],
    [
      "no clock rate",
      rawHello({ streamName: "s", tracks: [{ id: 0, kind: "audio", codec: "PCMU" }] }),
    ],
    ["fractional width", rawHello({ streamName: "s", tracks: [{ ...configless[0], width: 1.5 }] })],
    [
      "config of another codec",
      rawHello({
        streamName: "s",
        tracks: [{ ...configless[0], config: { codec: "H264", sps: [], pps: [] } }],
      }),
    ],
    [
      "config not base64",
      rawHello({
        streamName: "s",
        tracks: [{
          id: 0,
          kind: "audio",
          codec: "AAC",
          clockRate: 48000,
          config: { codec: "AAC", asc: "%%" },
        }],
      }),
    ],
    [
      "name too long",
      rawHello({ streamName: "n".repeat(maxRelayTextChars + 1), tracks: [configless[3]] }),
    ],
    ["end without reason", Uint8Array.of(RelayType.end, ...new TextEncoder().encode("{}"))],
    ["dropped cut short", Uint8Array.of(RelayType.dropped, 0, 0)],
  ];
  for (const [what, bytes, known] of refused) {
    assert.throws(() => decodeRelayMessage(bytes, known), ParseError, what);
  }
});

Deno.test("relay message: every cut of every message is a TruncatedError/ParseError or a message", async () => {
  const { tracks, frames } = await clip("h264_aac");
  const messages = [
    encodeHello("s", tracks),
    ...frames.slice(0, 5).map(encodeFrame),
    encodeEnd("bye"),
    encodeDropped(9),
  ];
  let truncated = 0;
  for (const message of messages) {
    for (let n = 0; n < Math.min(message.length, 400); n++) {
      try {
        decodeRelayMessage(message.subarray(0, n), tracks);
      } catch (err) {
        assert.ok(err instanceof ParseError, `${err}`);
        if (err instanceof TruncatedError) truncated++;
      }
    }
  }
  assert.ok(truncated > 0, "short headers are TruncatedErrors");
});

Deno.test("relay message: random and mutated bytes never throw anything but a ParseError", async () => {
  const { tracks, frames } = await clip("h264_aac");
  const seeds = [encodeHello("s", tracks), encodeFrame(frames[0]), encodeEnd("bye")];
  const rand = prng(18);
  let decoded = 0;
  for (let i = 0; i < 20_000; i++) {
    let input: Uint8Array;
    if (i % 2 === 0) input = randomBytes(rand, Math.floor(rand() * 64));
    else {
      input = seeds[i % seeds.length].slice(0, 2000);
      for (let flips = 1 + Math.floor(rand() * 4); flips > 0; flips--) {
        input[Math.floor(rand() * input.length)] = Math.floor(rand() * 256);
      }
    }
    try {
      decodeRelayMessage(input, tracks);
      decoded++;
    } catch (err) {
      if (!(err instanceof ParseError)) throw new Error(`input ${i} threw ${err}`, { cause: err });
    }
  }
  assert.ok(decoded > 0);
});
