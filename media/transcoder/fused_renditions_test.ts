/**
 * Fused renditions fed a source's frames directly: every source pts comes back in order on
 * a rendition that keeps the source's rate (B-frames in the source, H.264 and VP8
 * sources), renditions of other rates land on their ticks, each output decodes without
 * error at its size, and the process ends with the group.
 */
import assert from "node:assert/strict";
import { silentLogger } from "../../core/log.ts";
import { NativeEngine } from "../engine/native.ts";
import { IvfReader } from "../formats/ivf.ts";
import { TsDemuxer } from "../formats/mpegts/demuxer.ts";
import { TsMuxer } from "../formats/mpegts/muxer.ts";
import { decode, run, tempPath } from "../formats/test_fixtures.ts";
import type { MediaFrame, Track } from "../frame.ts";
import { FusedRenditions } from "./fused_renditions.ts";
import type { VideoEncoderSettings } from "./video_codec.ts";

const fps = 25;
const tick = 90000 / fps;
/** Frames ffmpeg may still hold when the input stops: reorder delay, parser, rate filter. */
const held = 6;

/** A 3 s 320x240 clip of `codec` (H.264 with B-frames, or VP8), as a track and its frames. */
async function source(codec: "H264" | "VP8"): Promise<{ track: Track; frames: MediaFrame[] }> {
  const dir = await tempPath("fused");
  await Deno.mkdir(dir, { recursive: true });
  const path = `${dir}/src.${codec === "H264" ? "ts" : "ivf"}`;
  await run("ffmpeg", [
    ...["-v", "error", "-y", "-f", "lavfi", "-i", `testsrc2=size=320x240:rate=${fps}`],
    ...["-t", "3", "-pix_fmt", "yuv420p", "-g", String(fps)],
    ...(codec === "H264"
      // x264's defaults: B-frames, so decode order is not presentation order.
      ? ["-c:v", "libx264", "-preset", "medium", "-f", "mpegts"]
      : ["-c:v", "libvpx", "-b:v", "300k", "-f", "ivf"]),
    path,
  ]);
  const bytes = await Deno.readFile(path);
  if (codec === "H264") {
    const demuxer = new TsDemuxer();
    const frames = [...demuxer.push(bytes), ...demuxer.flush()];
    const track = demuxer.tracks.find((t) => t.kind === "video")!;
    return { track, frames: frames.filter((f) => f.trackId === track.id) };
  }
  const reader = new IvfReader();
  const frames = reader.push(bytes).map((f): MediaFrame => ({
    trackId: 0,
    codec: "VP8",
    pts: f.timestamp * tick,
    dts: f.timestamp * tick,
    keyframe: (f.data[0] & 1) === 0,
    data: f.data,
  }));
  const track: Track = { id: 0, kind: "video", codec: "VP8", clockRate: 90000 };
  return { track, frames };
}

function settings(width: number, height: number, rate: number): VideoEncoderSettings {
  return { codec: "H264", width, height, fps: rate, keyFrameInterval: 0, bitrateKbps: 300 };
}

/** Pushes the frames in real time, then waits for the outputs to settle. */
async function play(
  codec: "H264" | "VP8",
  outputs: VideoEncoderSettings[],
  edit: (frames: MediaFrame[]) => MediaFrame[] = (frames) => frames,
): Promise<{ sourcePts: number[]; got: MediaFrame[][]; processes: number; gaps: number }> {
  const clip = await source(codec);
  const track = clip.track;
  const frames = edit(clip.frames);
  let gaps = 0;
  const engine = new NativeEngine();
  const fused = new FusedRenditions({
    engine,
    track,
    log: silentLogger,
    requestKeyframe: () => {},
    sourceGapMs: 2000,
  });
  const got = outputs.map(() => [] as MediaFrame[]);
  outputs.forEach((s, i) =>
    fused.add({ settings: s, onFrame: (f) => got[i].push(f), onSourceGap: () => gaps++ })
  );
  try {
    for (const frame of frames) {
      fused.push(frame);
      await new Promise((r) => setTimeout(r, 1000 / fps));
    }
    // ffmpeg holds the last few frames (reorder, parser, rate filter): wait until nothing
    // more comes.
    let count = -1;
    while (count !== got.flat().length) {
      count = got.flat().length;
      await new Promise((r) => setTimeout(r, 500));
    }
    const processes = engine.runningJobs;
    await fused.close();
    assert.equal(engine.runningJobs, 0);
    const sourcePts = frames.map((f) => f.pts).sort((a, b) => a - b);
    return { sourcePts, got, processes, gaps };
  } finally {
    await engine.close();
  }
}

/** Writes an output's frames in MPEG-TS, on their pts, and decodes it. */
async function decodes(frames: MediaFrame[]) {
  const path = `${await tempPath("fused-out")}.ts`;
  const muxer = new TsMuxer({
    tracks: [{ id: 0, kind: "video", codec: "H264", clockRate: 90000 }],
  });
  const parts = frames.map((f) => muxer.mux({ ...f, trackId: 0 }));
  const bytes = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  parts.reduce((at, p) => (bytes.set(p, at), at + p.length), 0);
  await Deno.writeFile(path, bytes);
  const { out } = await run("ffprobe", [
    ...["-v", "error", "-select_streams", "v", "-show_entries", "stream=width,height"],
    ...["-of", "csv=p=0", path],
  ]);
  return { size: out.trim().split("\n")[0], ...(await decode(path)) };
}

for (const codec of ["H264", "VP8"] as const) {
  Deno.test(`fused renditions of a ${codec} source: one process, source pts kept, ticks, clean decode`, async () => {
    const { sourcePts, got, processes } = await play(codec, [
      settings(320, 240, 0),
      settings(160, 120, 10),
    ]);
    assert.equal(processes, 1);
    const [same, slower] = got;
    // The source's rate: every source pts, in order (all but the last few, still in ffmpeg),
    // each frame once.
    const pts = same.map((f) => f.pts);
    assert.ok(pts.length >= sourcePts.length - held, `${pts.length} of ${sourcePts.length}`);
    assert.deepEqual(pts, sourcePts.slice(0, pts.length));
    assert.equal(same[0].keyframe, true);
    // 10 fps: frames on the 10 fps ticks of the source's timeline, from its first picture
    // (none made up before it).
    assert.ok(Math.abs(slower[0].pts - sourcePts[0]) <= 9000, `first at ${slower[0].pts}`);
    for (let i = 1; i < slower.length; i++) {
      assert.equal(slower[i].pts - slower[i - 1].pts, 9000, `frame ${i}`);
    }
    assert.ok(slower.length >= 30 - held, `${slower.length} frames at 10 fps`);
    for (const [frames, size] of [[same, "320,240"], [slower, "160,120"]] as const) {
      const decoded = await decodes(frames);
      assert.equal(decoded.size, size);
      assert.equal(decoded.errors, "");
      assert.equal(decoded.video, frames.length);
    }
  });
}

Deno.test("fused renditions: a source gap over 2 s restarts at the next keyframe, not filled with repeats", async () => {
  const gapTicks = 3 * 90000;
  // 1.5 s of the clip, then the rest 3 s later (keyframes every second).
  const cut = Math.round(1.5 * fps);
  const { got, gaps, processes } = await play(
    "H264",
    [settings(160, 120, 10)],
    (frames) =>
      frames.map((f, i) => i < cut ? f : { ...f, pts: f.pts + gapTicks, dts: f.dts + gapTicks }),
  );
  assert.equal(gaps, 1);
  assert.equal(processes, 1);
  const [frames] = got;
  const steps = frames.slice(1).map((f, i) => f.pts - frames[i].pts);
  // Every step is one 10 fps tick but one, the jump over the gap (at least its 3 s).
  const jumps = steps.filter((step) => step !== 9000);
  assert.equal(jumps.length, 1, `steps ${steps}`);
  assert.ok(jumps[0] >= gapTicks, `jump ${jumps[0]}`);
  const after = frames[steps.indexOf(jumps[0]) + 1];
  assert.equal(after.keyframe, true);
  assert.equal((await decodes(frames)).errors, "");
});
