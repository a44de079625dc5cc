import assert from "node:assert/strict";
import type { MediaFrame } from "../../frame.ts";
import { TsDemuxer } from "./demuxer.ts";
import { TsMuxer } from "./muxer.ts";
import {
  fixture,
  mutate,
  prng,
  probeStreams,
  probeVideoKeyflags,
  randomBytes,
  run,
  tempPath,
} from "../test_fixtures.ts";

/** Feeds `data` in random-size chunks, as a pipe would deliver it. */
function demuxAll(demuxer: TsDemuxer, data: Uint8Array, seed: number): MediaFrame[] {
  const rand = prng(seed);
  const frames: MediaFrame[] = [];
  for (let pos = 0; pos < data.length;) {
    const n = 1 + Math.floor(rand() * 3000);
    frames.push(...demuxer.push(data.subarray(pos, pos + n)));
    pos += n;
  }
  frames.push(...demuxer.flush());
  return frames;
}

const expected = {
  h264_aac: ["H264", "AAC"],
  h264_opus: ["H264", "OPUS"],
  h265_aac: ["H265", "AAC"],
} as const;

for (const name of ["h264_aac", "h264_opus", "h265_aac"] as const) {
  Deno.test(`TsDemuxer reads ffmpeg's ${name} MPEG-TS like ffprobe`, async () => {
    const path = await fixture(name, "ts");
    const demuxer = new TsDemuxer();
    const frames = demuxAll(demuxer, await Deno.readFile(path), 11);
    const tracks = [...demuxer.tracks].sort((a, b) => a.id - b.id);
    assert.deepEqual(tracks.map((t) => t.codec), expected[name]);
    assert.equal(demuxer.expectedTrackCount, 2);
    assert.deepEqual([tracks[0].width, tracks[0].height, tracks[0].clockRate], [320, 240, 90000]);
    assert.deepEqual([tracks[1].sampleRate, tracks[1].channels], [48000, 1]);
    assert.equal(demuxer.droppedPes, 0);
    const streams = await probeStreams(path);
    const counts = [0, 1].map((id) => frames.filter((f) => f.trackId === id).length);
    assert.deepEqual(counts, streams.map((s) => Number(s.nb_read_packets)));
    const video = frames.filter((f) => f.trackId === 0);
    assert.deepEqual(video.map((f) => f.keyframe), await probeVideoKeyflags(path));
    const audio = frames.filter((f) => f.trackId === 1);
    for (let i = 1; i < audio.length; i++) assert.ok(audio[i].pts > audio[i - 1].pts);
    // 4-byte length-prefixed NAL units, no access unit delimiters left.
    const first = video[0].data;
    const len = new DataView(first.buffer, first.byteOffset).getUint32(0);
    assert.ok(len + 4 <= first.length);
    assert.notEqual(first[4] & 0x1f, 9);
  });
}

Deno.test("TsDemuxer resyncs after garbage and drops the PES that lost a packet", async () => {
  const data = await Deno.readFile(await fixture("h264_aac", "ts"));
  const clean = demuxAll(new TsDemuxer(), data, 12);
  // A video packet in the middle of a PES is replaced by garbage of another length.
  let k = 200;
  while (
    ((data[k * 188 + 1] & 0x1f) << 8 | data[k * 188 + 2]) !== 0x100 || data[k * 188 + 1] & 0x40
  ) k++;
  const garbage = randomBytes(prng(13), 300);
  const damaged = new Uint8Array(data.length - 188 + garbage.length);
  damaged.set(data.subarray(0, k * 188));
  damaged.set(garbage, k * 188);
  damaged.set(data.subarray((k + 1) * 188), k * 188 + garbage.length);
  const demuxer = new TsDemuxer();
  const frames = demuxAll(demuxer, damaged, 14);
  assert.equal(demuxer.droppedPes, 1);
  assert.equal(frames.length, clean.length - 1);
  const lost = clean.findIndex((f, i) =>
    frames[i].pts !== f.pts || frames[i].trackId !== f.trackId
  );
  assert.equal(clean[lost].trackId, 0);
  assert.deepEqual(frames.slice(lost).map((f) => f.data), clean.slice(lost + 1).map((f) => f.data));
});

Deno.test("TsDemuxer bounds PES buffering", async () => {
  const data = await Deno.readFile(await fixture("h264_aac", "ts"));
  const demuxer = new TsDemuxer({ maxPesBytes: 2000 });
  const frames = demuxAll(demuxer, data, 15);
  assert.ok(demuxer.droppedPes > 0);
  assert.ok(frames.every((f) => f.data.length < 2000));
});

Deno.test("TsDemuxer fuzz: random, mutated and truncated streams never throw", async () => {
  const rand = prng(16);
  const data = await Deno.readFile(await fixture("h264_opus", "ts"));
  for (let i = 0; i < 60; i++) {
    const input = i % 3 === 0
      ? randomBytes(rand, 20000)
      : i % 3 === 1
      ? mutate(rand, data, 1 + Math.floor(rand() * 200))
      : data.subarray(0, Math.floor(rand() * data.length));
    const demuxer = new TsDemuxer({ maxPesBytes: 64 * 1024 });
    for (const frame of demuxAll(demuxer, input, i)) assert.ok(frame.data.length <= 64 * 1024);
  }
  // Random bytes that happen to carry sync bytes every 188.
  const synced = randomBytes(rand, 188 * 500);
  for (let p = 0; p < synced.length; p += 188) synced[p] = 0x47;
  demuxAll(new TsDemuxer(), synced, 17);
});

Deno.test("TsDemuxer unwraps timestamps across the 33-bit wrap", () => {
  const track = {
    id: 0,
    kind: "audio" as const,
    codec: "OPUS" as const,
    clockRate: 48000,
    channels: 2,
  };
  // Start 1 s before the wrap; 100 frames of 20 ms cross it.
  const muxer = new TsMuxer({ tracks: [track], timestampOffset90k: 2 ** 33 - 90000 });
  const demuxer = new TsDemuxer();
  const frames: MediaFrame[] = [];
  for (let i = 0; i < 100; i++) {
    const pts = i * 960;
    const packet = new Uint8Array([0xfc, i]);
    frames.push(
      ...demuxer.push(
        muxer.mux({ trackId: 0, codec: "OPUS", pts, dts: pts, keyframe: true, data: packet }),
      ),
    );
  }
  frames.push(...demuxer.flush());
  assert.equal(frames.length, 100);
  for (let i = 1; i < frames.length; i++) assert.equal(frames[i].pts - frames[i - 1].pts, 960);
  assert.deepEqual(frames[99].data, new Uint8Array([0xfc, 99]));
});

Deno.test("TsDemuxer reads MPEG audio (MP3, MP2) one frame at a time, as ffprobe counts them", async () => {
  for (
    const [codec, rate, samples] of [["libmp3lame", 44100, 1152], ["mp2", 48000, 1152]] as const
  ) {
    const path = await tempPath(`audio_${codec}.ts`);
    await run("ffmpeg", [
      ...["-v", "error", "-y", "-f", "lavfi", "-i", `sine=frequency=440:sample_rate=${rate}`],
      ...["-t", "2", "-c:a", codec, "-f", "mpegts", path],
    ]);
    const demuxer = new TsDemuxer();
    const frames = demuxAll(demuxer, await Deno.readFile(path), 5);
    assert.deepEqual(demuxer.programCodecs, ["MP3"]);
    assert.equal(demuxer.tracks[0].codec, "MP3");
    assert.equal(demuxer.tracks[0].sampleRate, rate);
    const { out } = await run("ffprobe", [
      ...["-v", "error", "-count_packets", "-show_entries", "stream=nb_read_packets"],
      ...["-of", "csv=p=0", path],
    ]);
    assert.equal(frames.length, Number(out.trim().split("\n")[0]), codec);
    for (let i = 1; i < frames.length; i++) {
      assert.equal(frames[i].pts - frames[i - 1].pts, samples, `${codec} frame ${i}`);
    }
  }
});
