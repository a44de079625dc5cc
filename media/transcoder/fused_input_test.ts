/**
 * The fused ffmpeg's fragmented MP4 input: ffmpeg reads back every frame with its pts and
 * dts less the origin (the whole second before the first decode time), B-frames included,
 * decodes it without error, and a track clocked in milliseconds (RTMP) lands on 90 kHz.
 */
import assert from "node:assert/strict";
import { TsDemuxer } from "../formats/mpegts/demuxer.ts";
import { decode, fixture, run, tempPath } from "../formats/test_fixtures.ts";
import type { MediaFrame, Track } from "../frame.ts";
import { FragmentedInput } from "./fused_input.ts";

/** The video frames (decode order) and track of a 2 s 320x240 fixture. */
async function videoSource(
  name: "h264_aac" | "h265_aac" = "h264_aac",
): Promise<{ track: Track; frames: MediaFrame[] }> {
  const demuxer = new TsDemuxer();
  const bytes = await Deno.readFile(await fixture(name, "ts"));
  const all = [...demuxer.push(bytes), ...demuxer.flush()];
  const track = demuxer.tracks.find((t) => t.kind === "video")!;
  return { track, frames: all.filter((f) => f.trackId === track.id) };
}

/** Writes the frames through a FragmentedInput; ffprobe's packets (pts, dts in 90 kHz). */
async function roundTrip(track: Track, frames: MediaFrame[], name: string) {
  const input = new FragmentedInput(track, { width: 320, height: 240 }, frames[0].dts);
  const parts = frames.map((f) => input.encode(f));
  const path = await tempPath(`${name}.mp4`);
  const bytes = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  parts.reduce((at, p) => (bytes.set(p, at), at + p.length), 0);
  await Deno.writeFile(path, bytes);
  const { out } = await run("ffprobe", [
    ...["-v", "error", "-select_streams", "v", "-show_entries", "packet=pts,dts"],
    ...["-of", "csv=p=0", path],
  ]);
  const packets = out.trim().split("\n").map((line) => line.split(",").map(Number));
  return { input, packets, path, fragments: parts.length };
}

Deno.test("fused input: every frame read back with its pts and dts less the origin, decodes clean", async () => {
  const { track, frames } = await videoSource();
  assert.ok(frames.some((f) => f.pts !== f.dts), "the fixture has B-frames");
  const { input, packets, path, fragments } = await roundTrip(track, frames, "fused-input");
  assert.equal(fragments, frames.length);
  // The origin: the whole second at or before the first decode time.
  const origin = Math.floor(frames[0].dts / 90000) * 90000;
  assert.equal(input.offset90k, -origin);
  assert.deepEqual(
    packets,
    frames.map((f) => [f.pts - origin, f.dts - origin]),
  );
  const decoded = await decode(path);
  assert.equal(decoded.errors, "");
  assert.equal(decoded.video, frames.length);
});

Deno.test("fused input: an H.265 source is read back on its pts and decodes clean", async () => {
  const { track, frames } = await videoSource("h265_aac");
  const { input, packets, path } = await roundTrip(track, frames, "fused-input-h265");
  const origin = -input.offset90k;
  assert.deepEqual(packets, frames.map((f) => [f.pts - origin, f.dts - origin]));
  const decoded = await decode(path);
  assert.equal(decoded.errors, "");
  assert.equal(decoded.video, frames.length);
});

Deno.test("fused input: a millisecond clock goes to 90 kHz", async () => {
  const { track, frames } = await videoSource();
  const ms = (t: number) => Math.round(t / 90);
  const msFrames = frames.map((f) => ({ ...f, pts: ms(f.pts), dts: ms(f.dts) }));
  const { input, packets } = await roundTrip(
    { ...track, clockRate: 1000 },
    msFrames,
    "fused-input-ms",
  );
  const origin = -input.offset90k;
  assert.equal(origin % 90000, 0);
  assert.deepEqual(
    packets,
    msFrames.map((f) => [f.pts * 90 - origin, f.dts * 90 - origin]),
  );
});

Deno.test("fused input: a first keyframe without parameter sets in the track or in-band throws", () => {
  const track: Track = { id: 0, kind: "video", codec: "H264", clockRate: 90000 };
  const input = new FragmentedInput(track, { width: 320, height: 240 }, 0);
  // One IDR slice NAL unit, length-prefixed, with no SPS/PPS in front.
  const idr = new Uint8Array([0, 0, 0, 3, 0x65, 0x88, 0x84]);
  const frame: MediaFrame = {
    trackId: 0,
    codec: "H264",
    pts: 0,
    dts: 0,
    keyframe: true,
    data: idr,
  };
  assert.throws(() => input.encode(frame), /parameter sets/);
});
