import assert from "node:assert/strict";
import type { MediaFrame } from "../frame.ts";
import { Mp4Demuxer } from "../formats/mp4/demuxer.ts";
import { openFileByteSource } from "../providers/file_source.ts";
import { fixture, rawVideo, run, tempPath } from "../formats/test_fixtures.ts";
import { DtsSequence, reorderInfo, VideoDtsDeriver } from "./dts_deriver.ts";
import { H264NalType, h264NalType } from "./h264.ts";
import { H265NalType, h265NalType } from "./h265.ts";
import { splitAnnexB } from "./nalu.ts";

/** Decode-order pts of an IBBP stream with one frame per `step` ticks: I0 P3 B1 B2 P6 B4 B5 ... */
function ibbp(frames: number, step: number): number[] {
  const pts = [0];
  for (let p = 3; pts.length < frames; p += 3) pts.push(p * step, (p - 2) * step, (p - 1) * step);
  return pts.slice(0, frames);
}

function assertValid(pts: readonly number[], dts: readonly number[]): void {
  for (let i = 0; i < dts.length; i++) {
    assert.ok(dts[i] <= pts[i], `frame ${i}: dts ${dts[i]} > pts ${pts[i]}`);
    if (i > 0) assert.ok(dts[i] > dts[i - 1], `frame ${i}: dts ${dts[i]} after ${dts[i - 1]}`);
  }
}

Deno.test("DtsSequence: B-frames get the sorted pts, delayed by the reorder depth", () => {
  const pts = ibbp(30, 3600);
  const seq = new DtsSequence(2, 3600);
  const dts = pts.map((p) => seq.next(p));
  assertValid(pts, dts);
  // Decode times one frame apart from the start: -2, -1, then the pictures in output order.
  assert.deepEqual(dts, pts.map((_, i) => (i - 2) * 3600));
  assert.equal(seq.corrections, 0);
});

Deno.test("DtsSequence: depth 0 keeps pts; a lost frame or a repeated pts keeps dts valid", () => {
  const plain = new DtsSequence(0, 3000);
  assert.deepEqual([0, 3000, 6000].map((p) => plain.next(p)), [0, 3000, 6000]);

  const lossy = ibbp(30, 3600).filter((_, i) => i !== 7 && i !== 13);
  const seq = new DtsSequence(2, 3600);
  const dts = lossy.map((p) => seq.next(p));
  assertValid(lossy, dts);
  assert.equal(seq.corrections, 0);

  const repeated = new DtsSequence(0, 3000);
  const out = [0, 3000, 3000, 6000].map((p) => repeated.next(p));
  assert.deepEqual(out, [0, 3000, 3001, 6000]);
  assert.equal(repeated.corrections, 1);
});

Deno.test("DtsSequence: a stream deeper than declared still gets rising dts; a new one stays above the last", () => {
  const pts = ibbp(30, 3600);
  const seq = new DtsSequence(0, 3600);
  const dts = pts.map((p) => seq.next(p));
  for (let i = 1; i < dts.length; i++) assert.ok(dts[i] > dts[i - 1]);
  assert.ok(seq.corrections > 0);
  const next = new DtsSequence(2, 3600, seq.last);
  assert.ok(next.next(seq.last - 10_000) > seq.last);
});

async function firstNal(codec: "h264" | "hevc", args: string[], type: number) {
  const nal = splitAnnexB(await rawVideo(codec, "320x240", args)).find((n) =>
    (codec === "h264" ? h264NalType(n) : h265NalType(n)) === type
  );
  assert.ok(nal, "the encoder wrote an SPS");
  return nal;
}

/** has_b_frames as ffprobe reads it from a raw stream: the decoder's reorder depth. */
async function ffprobeReorder(codec: "h264" | "hevc", args: string[]): Promise<number> {
  const path = await tempPath(`reorder-${codec}-${args.join("_").replace(/[^\w]/g, "")}`);
  await run("ffmpeg", [
    "-v",
    "error",
    "-y",
    "-f",
    "lavfi",
    "-i",
    "testsrc2=size=320x240:rate=25",
    "-frames:v",
    "10",
    "-c:v",
    codec === "h264" ? "libx264" : "libx265",
    ...(codec === "hevc" ? ["-x265-params", "log-level=error"] : []),
    ...args,
    "-f",
    codec,
    path,
  ]);
  const { out } = await run("ffprobe", [
    "-v",
    "error",
    "-show_entries",
    "stream=has_b_frames",
    "-of",
    "csv=p=0",
    path,
  ]);
  return Number(out.trim());
}

Deno.test("reorder depth from the SPS matches ffprobe's has_b_frames (x264, x265)", async () => {
  const cases: ["h264" | "hevc", string[]][] = [
    ["h264", ["-profile:v", "baseline"]],
    ["h264", ["-bf", "0"]],
    ["h264", ["-bf", "1"]],
    ["h264", ["-bf", "3"]],
    ["h264", ["-bf", "3", "-x264-params", "b-pyramid=none"]],
    ["hevc", ["-bf", "0"]],
    ["hevc", []],
  ];
  for (const [codec, args] of cases) {
    const type = codec === "h264" ? H264NalType.sps : H265NalType.sps;
    const sps = await firstNal(codec, args, type);
    const info = reorderInfo(codec === "h264" ? "H264" : "H265", sps, 90000);
    assert.equal(info.depth, await ffprobeReorder(codec, args), `${codec} ${args.join(" ")}`);
    if (codec === "h264") assert.equal(info.frameTicks, 3600, "x264 writes 25 fps timing");
  }
});

Deno.test("reorder depth without a bitstream_restriction: 0 for baseline, the DPB size otherwise", () => {
  // A hand-written 320x240 main-profile SPS at level 3.0, no VUI: 8100 / 300 MBs = 27 > 16.
  const main = new Uint8Array([0x67, 77, 0, 30, 0xf4, 0x0a, 0x0f, 0xc8]);
  assert.equal(reorderInfo("H264", main, 90000).depth, 16);
  const baseline = main.slice();
  baseline[1] = 66;
  assert.equal(reorderInfo("H264", baseline, 90000).depth, 0);
  assert.equal(reorderInfo("H264", undefined, 90000).depth, 0);
  assert.equal(reorderInfo("VP8", undefined, 90000).frameTicks, 3000);
});

/** The frames of an MP4 fixture's video track, in decode order. */
async function videoFrames(path: string): Promise<{ frames: MediaFrame[]; demuxer: Mp4Demuxer }> {
  const source = await openFileByteSource(path);
  try {
    const demuxer = await Mp4Demuxer.open(source);
    const frames: MediaFrame[] = [];
    for await (const frame of demuxer.frames()) {
      if (demuxer.tracks[frame.trackId].kind === "video") frames.push(frame);
    }
    return { frames, demuxer };
  } finally {
    source.close();
  }
}

for (const name of ["h264_aac", "h265_aac"] as const) {
  Deno.test(`VideoDtsDeriver on ${name}: from pts alone, the encoder's own decode times`, async () => {
    const { frames, demuxer } = await videoFrames(await fixture(name, "mp4"));
    const track = demuxer.tracks[frames[0].trackId];
    const deriver = new VideoDtsDeriver(track);
    const derived = frames.map((f) => {
      const copy = { ...f, dts: f.pts };
      deriver.derive(copy);
      return copy.dts;
    });
    const depth = deriver.depth!;
    assert.ok(depth > 0, "the fixture has B-frames");
    assertValid(frames.map((f) => f.pts), derived);
    // After the first `depth` frames, exactly the file's decode times.
    assert.deepEqual(derived.slice(depth), frames.slice(depth).map((f) => f.dts));
    assert.equal(deriver.corrections, 0);
  });
}

Deno.test("VideoDtsDeriver: a restart at a keyframe after a jump forward stays above the last dts", async () => {
  const { frames, demuxer } = await videoFrames(await fixture("h264_aac", "mp4"));
  const deriver = new VideoDtsDeriver(demuxer.tracks[frames[0].trackId]);
  const dts: number[] = [];
  const pts: number[] = [];
  for (const [round, shift] of [[0, 0], [1, 2 * 90000]]) {
    if (round === 1) deriver.restart();
    for (const f of frames) {
      const copy = { ...f, pts: f.pts + shift };
      deriver.derive(copy);
      pts.push(copy.pts);
      dts.push(copy.dts);
    }
  }
  assertValid(pts, dts);
});
