import assert from "node:assert/strict";
import { buildAsc } from "../codecs/aac.ts";
import type { MediaFrame, Track } from "../frame.ts";
import { ChunkReader } from "../protocols/rtmp/chunk_reader.ts";
import { outChunkBytes, writeChunks } from "../protocols/rtmp/chunk_writer.ts";
import { buildSetChunkSize, MessageType, type RtmpMessage } from "../protocols/rtmp/message.ts";
import { RtmpPackager } from "./rtmp_packager.ts";

const tracks: Track[] = [
  { id: 0, kind: "video", codec: "H264", clockRate: 90000, width: 320, height: 240 },
  {
    id: 1,
    kind: "audio",
    codec: "AAC",
    clockRate: 48000,
    sampleRate: 48000,
    channels: 1,
    config: { codec: "AAC", asc: buildAsc(2, 48000, 1) },
  },
];

const video = (ms: number, key = false): MediaFrame => ({
  trackId: 0,
  codec: "H264",
  pts: ms * 90,
  dts: ms * 90,
  keyframe: key,
  data: new Uint8Array([0, 0, 0, 1, key ? 0x65 : 0x41]),
});
const audio = (ms: number): MediaFrame => ({
  trackId: 1,
  codec: "AAC",
  pts: ms * 48,
  dts: ms * 48,
  keyframe: true,
  data: new Uint8Array([0x21, ms & 0xff]),
});

/** The messages a player receives from these bytes, as [type, timestamp] pairs. */
function messages(bytes: Uint8Array[]): Array<[string, number]> {
  const reader = new ChunkReader();
  // A real player is told the chunk size first.
  reader.push(writeChunks(2, {
    type: MessageType.setChunkSize,
    streamId: 0,
    timestamp: 0,
    payload: buildSetChunkSize(outChunkBytes),
  }, 128));
  return bytes.flatMap((b) => reader.push(b)).map((m: RtmpMessage) => [
    m.type === MessageType.video ? "video" : "audio",
    m.timestamp,
  ]);
}

Deno.test("players write audio bundled with the next picture, in stream order, shared by all", () => {
  const packager = new RtmpPackager(tracks);
  const frames = [video(0, true), audio(0), audio(21), video(40), audio(43), video(80)];
  const first = frames.map((f) => packager.playChunks(f));
  assert.deepEqual(first.map((b) => b !== undefined), [true, false, false, true, false, true]);
  // A second player gets the very same bundles, built once.
  const second = frames.map((f) => packager.playChunks(f));
  first.forEach((b, i) => assert.equal(second[i], b));
  assert.deepEqual(messages(first.filter((b) => b !== undefined) as Uint8Array[]), [
    ["video", 0],
    ["audio", 0],
    ["audio", 21],
    ["video", 40],
    ["audio", 43],
    ["video", 80],
  ]);
});

Deno.test("audio goes out on its own once 100 ms of it is held (pictures stopped)", () => {
  const packager = new RtmpPackager(tracks);
  packager.playChunks(video(0, true));
  const out = [0, 21, 43, 64, 85, 107].map((ms) => packager.playChunks(audio(ms)));
  assert.deepEqual(out.map((b) => b !== undefined), [false, false, false, false, false, true]);
  assert.deepEqual(messages([out[5]!]).map(([, ms]) => ms), [0, 21, 43, 64, 85, 107]);
  assert.equal(packager.endChunks(), undefined, "nothing left held");
  packager.playChunks(audio(128));
  assert.deepEqual(messages([packager.endChunks()!]), [["audio", 128]]);
});
