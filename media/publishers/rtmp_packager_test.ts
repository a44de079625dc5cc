import assert from "node:assert/strict";
import type { MediaFrame, Track } from "../frame.ts";
import { MessageType, type RtmpMessage } from "../protocols/rtmp/message.ts";
import { RtmpPackager } from "./rtmp_packager.ts";
import { aacFrame, aacTrack, h264Track } from "../../tests/helpers/media_tracks.ts";
import { playerChunkReader } from "../../tests/helpers/rtmp_player_reader.ts";

const tracks: Track[] = [h264Track({ width: 320, height: 240 }), aacTrack(1)];

const video = (ms: number, key = false): MediaFrame => ({
  trackId: 0,
  codec: "H264",
  pts: ms * 90,
  dts: ms * 90,
  keyframe: key,
  data: new Uint8Array([0, 0, 0, 1, key ? 0x65 : 0x41]),
});
const audio = aacFrame;

/** The messages a player receives from these bytes, as [type, timestamp] pairs. */
function messages(bytes: Uint8Array[]): Array<[string, number]> {
  const reader = playerChunkReader();
  return bytes.flatMap((b) => reader.push(b)).map((m: RtmpMessage) => [
    m.type === MessageType.video ? "video" : "audio",
    m.timestamp,
  ]);
}

Deno.test("players write audio bundled with the next picture, in stream order", () => {
  const packager = new RtmpPackager(tracks);
  const frames = [video(0, true), audio(0), audio(21), video(40), audio(43), video(80)];
  const first = frames.map((f) => packager.playChunks(f));
  assert.deepEqual(first.map((b) => b !== undefined), [true, false, false, true, false, true]);
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

Deno.test("headers made before an encoder set its parameter sets are made again after", () => {
  const video: Track = { id: 0, kind: "video", codec: "H264", clockRate: 90000 };
  const packager = new RtmpPackager([video, tracks[1]]);
  const videoMessages = (bytes: Uint8Array) =>
    messages([bytes]).filter(([kind]) => kind === "video").length;
  const before = packager.headerVersion;
  assert.equal(videoMessages(packager.header), 0);
  // SPS (baseline, 320x240) and PPS as an encoder sets them with its first frame.
  video.config = {
    codec: "H264",
    sps: [new Uint8Array([0x67, 0x42, 0xc0, 0x0d, 0xda, 0x05, 0x07, 0xec, 0x04, 0x40])],
    pps: [new Uint8Array([0x68, 0xce, 0x3c, 0x80])],
  };
  assert.equal(packager.headerVersion, before + 1);
  assert.equal(videoMessages(packager.header), 1);
  assert.equal(videoMessages(packager.publishHeader), 1);
  assert.equal(packager.headerVersion, before + 1, "unchanged while the config is");
});
