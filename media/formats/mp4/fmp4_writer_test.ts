import assert from "node:assert/strict";
import type { MediaFrame, Track } from "../../frame.ts";
import { memoryByteSource, Mp4Demuxer } from "./demuxer.ts";
import { Fmp4Writer, moofBoxType } from "./fmp4_writer.ts";
import {
  decode,
  type Fixture,
  fixture,
  probeDuration,
  probeStreams,
  probeVideoKeyflags,
  run,
  tempPath,
} from "../test_fixtures.ts";
import { vp8IsKeyframe } from "../../codecs/vp8.ts";

async function demux(name: Fixture): Promise<{ tracks: Track[]; frames: MediaFrame[] }> {
  const demuxer = await Mp4Demuxer.open(
    memoryByteSource(await Deno.readFile(await fixture(name, "mp4"))),
  );
  const frames: MediaFrame[] = [];
  for await (const frame of demuxer.frames()) frames.push(frame);
  return { tracks: demuxer.tracks, frames };
}

function concat(chunks: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(chunks.reduce((n, c) => n + c.length, 0));
  let pos = 0;
  for (const c of chunks) {
    out.set(c, pos);
    pos += c.length;
  }
  return out;
}

/** The chunks an Fmp4Writer of `tracks` gives for `frames`, its finishing chunk last. */
function writeAll(tracks: Track[], frames: MediaFrame[]): Uint8Array[] {
  const writer = new Fmp4Writer({ tracks });
  const chunks: Uint8Array[] = [];
  for (const frame of frames) {
    const out = writer.push(frame);
    if (out) chunks.push(out);
  }
  chunks.push(writer.finish()!);
  return chunks;
}

const codecNames: Record<string, string> = {
  H264: "h264",
  H265: "hevc",
  AAC: "aac",
  OPUS: "opus",
};

for (const name of ["h264_aac", "h264_opus", "h265_aac"] as const) {
  Deno.test(`Fmp4Writer round trip of ${name}: ffprobe and ffmpeg agree`, async () => {
    const { tracks, frames } = await demux(name);
    const chunks = writeAll(tracks, frames);
    assert.ok(chunks.length >= 3, "a fragment at least every second");
    const path = await tempPath(`${name}-ours.mp4`);
    const bytes = concat(chunks);
    await Deno.writeFile(path, bytes);

    const source = await probeStreams(await fixture(name, "mp4"));
    const ours = await probeStreams(path);
    assert.deepEqual(ours.map((s) => s.codec_name), tracks.map((t) => codecNames[t.codec]));
    assert.deepEqual([ours[0].width, ours[0].height], [320, 240]);
    assert.deepEqual(
      ours.map((s) => s.nb_read_packets),
      source.map((s) => s.nb_read_packets),
    );
    const duration = await probeDuration(path);
    const sourceDuration = await probeDuration(await fixture(name, "mp4"));
    assert.ok(Math.abs(duration - sourceDuration) / sourceDuration < 0.1, `duration ${duration}`);
    const decoded = await decode(path);
    assert.equal(decoded.errors, "");
    assert.equal(decoded.video, Number(source[0].nb_read_packets));

    // Our demuxer reads the fragments back with the same samples.
    const back = await Mp4Demuxer.open(memoryByteSource(bytes));
    const again: MediaFrame[] = [];
    for await (const frame of back.frames()) again.push(frame);
    assert.equal(again.length, frames.length);
    const byTrack = (list: MediaFrame[], id: number) => list.filter((f) => f.trackId === id);
    for (const track of tracks) {
      const a = byTrack(frames, track.id);
      const b = byTrack(again, track.id);
      assert.deepEqual(b.map((f) => f.data.length), a.map((f) => f.data.length));
      assert.deepEqual(b.map((f) => f.keyframe), a.map((f) => f.keyframe));
      const shift = b[0].dts - a[0].dts;
      assert.deepEqual(b.map((f) => f.pts - shift), a.map((f) => f.pts));
    }
  });
}

Deno.test("Fmp4Writer crash-safe file cut mid-fragment decodes cleanly up to the cut", async () => {
  const { tracks, frames } = await demux("h264_aac");
  const writer = new Fmp4Writer({ tracks, fragmentDurationMs: 500, crashSafe: true });
  const chunks: { bytes: Uint8Array; commitOffset: number }[] = [];
  const collect = (bytes: Uint8Array | undefined) => {
    if (bytes) chunks.push({ bytes, commitOffset: writer.commitOffset! });
  };
  for (const frame of frames) collect(writer.push(frame));
  collect(writer.finish());
  // What a recorder does once a chunk is on disk: overwrite "free" with "moof".
  const commit = (c: { bytes: Uint8Array; commitOffset: number }) => {
    const bytes = c.bytes.slice();
    bytes.set(moofBoxType, c.commitOffset);
    return bytes;
  };
  assert.ok(chunks.length >= 4);
  const durable = chunks.slice(0, -1).map(commit);
  const inFlight = chunks[chunks.length - 1].bytes;

  const all = await tempPath("all-committed.mp4");
  await Deno.writeFile(all, concat([...durable, commit(chunks[chunks.length - 1])]));
  assert.deepEqual(await decode(all), { errors: "", video: 50, audio: 95 });

  const before = await tempPath("durable.mp4");
  await Deno.writeFile(before, concat(durable));
  const expected = await decode(before);
  assert.equal(expected.errors, "");
  assert.ok(expected.video > 25 && expected.video < 50, `${expected.video} frames before the cut`);

  for (const fraction of [0.01, 0.5, 0.99, 1]) {
    const path = await tempPath(`cut-${fraction}.mp4`);
    const partial = inFlight.subarray(0, Math.floor(inFlight.length * fraction));
    await Deno.writeFile(path, concat([...durable, partial]));
    assert.deepEqual(await decode(path), expected, `cut at ${fraction} of the last fragment`);
    const ours = await Mp4Demuxer.open(memoryByteSource(await Deno.readFile(path)));
    assert.equal(ours.sampleCount, expected.video + expected.audio);
  }
});

Deno.test("Fmp4Writer puts two streams (4 tracks) in one file that ffprobe accepts", async () => {
  const a = await demux("h264_aac");
  const b = await demux("h265_aac");
  const tracks = [...a.tracks, ...b.tracks.map((t) => ({ ...t, id: t.id + 2 }))];
  const frames = [
    ...a.frames,
    ...b.frames.map((f) => ({ ...f, trackId: f.trackId + 2 })),
  ].sort((x, y) => x.dts / tracks[x.trackId].clockRate - y.dts / tracks[y.trackId].clockRate);
  const path = await tempPath("multi.mp4");
  await Deno.writeFile(path, concat(writeAll(tracks, frames)));
  const streams = await probeStreams(path);
  assert.deepEqual(streams.map((s) => s.codec_name), ["h264", "aac", "hevc", "aac"]);
  assert.deepEqual(streams.map((s) => s.nb_read_packets), ["50", "95", "50", "95"]);
  const decoded = await decode(path);
  assert.equal(decoded.errors, "");
});

/** VP8 frames of a 2 s 320x240 25 fps libvpx clip, read from IVF, on a 90 kHz clock. */
async function vp8Frames(): Promise<MediaFrame[]> {
  const path = await tempPath("vp8.ivf");
  await run("ffmpeg", [
    "-v",
    "error",
    "-f",
    "lavfi",
    "-i",
    "testsrc2=size=320x240:rate=25",
    "-t",
    "2",
    "-c:v",
    "libvpx",
    "-deadline",
    "realtime",
    "-g",
    "25",
    "-f",
    "ivf",
    path,
  ]);
  const ivf = await Deno.readFile(path);
  const view = new DataView(ivf.buffer);
  const [rate, scale] = [view.getUint32(16, true), view.getUint32(20, true)];
  const frames: MediaFrame[] = [];
  for (let at = view.getUint16(6, true); at + 12 <= ivf.length;) {
    const size = view.getUint32(at, true);
    const pts = Math.round(Number(view.getBigUint64(at + 4, true)) * 90000 * scale / rate);
    const data = ivf.subarray(at + 12, at + 12 + size);
    frames.push({ trackId: 0, codec: "VP8", pts, dts: pts, keyframe: vp8IsKeyframe(data), data });
    at += 12 + size;
  }
  return frames;
}

Deno.test("Fmp4Writer writes VP8 (vp08 + vpcC) with Opus: ffprobe and ffmpeg decode it cleanly", async () => {
  const video = await vp8Frames();
  assert.equal(video.length, 50);
  assert.deepEqual(video.filter((f) => f.keyframe).length, 2);
  const opus = await demux("h264_opus");
  const audioTrack = opus.tracks.find((t) => t.codec === "OPUS")!;
  // No size on the track: the writer reads it from the first keyframe.
  const tracks: Track[] = [
    { id: 0, kind: "video", codec: "VP8", clockRate: 90000 },
    { ...audioTrack, id: 1 },
  ];
  const frames = [
    ...video,
    ...opus.frames.filter((f) => f.trackId === audioTrack.id).map((f) => ({ ...f, trackId: 1 })),
  ].sort((x, y) => x.dts / tracks[x.trackId].clockRate - y.dts / tracks[y.trackId].clockRate);
  const path = await tempPath("vp8_opus.mp4");
  await Deno.writeFile(path, concat(writeAll(tracks, frames)));
  const streams = await probeStreams(path);
  assert.deepEqual(streams.map((s) => s.codec_name), ["vp8", "opus"]);
  assert.deepEqual([streams[0].width, streams[0].height], [320, 240]);
  assert.equal(streams[0].nb_read_packets, "50");
  const duration = await probeDuration(path);
  assert.ok(Math.abs(duration - 2) < 0.1, `duration ${duration}`);
  const decoded = await decode(path);
  assert.deepEqual([decoded.errors, decoded.video], ["", 50]);
  assert.ok(decoded.audio > 90, `${decoded.audio} audio frames`);
  assert.deepEqual(await probeVideoKeyflags(path), video.map((f) => f.keyframe));
});
