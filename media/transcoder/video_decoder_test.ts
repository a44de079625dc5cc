/**
 * The pipeline's video decoder on both engines: ffmpeg-made clips (H.264 with B-frames,
 * H.265, VP8) pushed frame by frame come out as raw I420 pictures identical to ffmpeg's own
 * decode of the clip, one per frame, on the source's presentation times; a resolution change
 * mid-stream gives pictures of both sizes; a decoder that falls behind drops input but never
 * emits a picture under a wrong pts; close leaves no process or Worker behind.
 */
import assert from "node:assert/strict";
import { silentLogger } from "../../core/log.ts";
import { BitReader } from "../codecs/bitreader.ts";
import { H264NalType, h264NalType, parseH264Sps } from "../codecs/h264.ts";
import {
  joinLengthPrefixed,
  removeEmulationPrevention,
  splitLengthPrefixed,
} from "../codecs/nalu.ts";
import { vp8IsKeyframe } from "../codecs/vp8.ts";
import type { CodecEngine, EngineJob, LiveJob, LiveJobOptions } from "../engine/engine.ts";
import { NativeEngine } from "../engine/native.ts";
import { WasmEngine } from "../engine/wasm.ts";
import { IvfReader } from "../formats/ivf.ts";
import { TsDemuxer } from "../formats/mpegts/demuxer.ts";
import { fixture, run, tempPath } from "../formats/test_fixtures.ts";
import type { MediaFrame, Track } from "../frame.ts";
import type { RawVideoFrame } from "./video_codec.ts";
import { createVideoDecoder } from "./video_decoder.ts";
import { i420Bytes, type PictureSize } from "./video_decoder_input.ts";

/** A clip as a source gives it, and ffmpeg's own decode of it. */
interface Clip {
  track: Track;
  /** Video frames in decode order. */
  frames: MediaFrame[];
  /** ffmpeg's pictures of the clip, in presentation order. */
  pictures: Uint8Array[];
  width: number;
  height: number;
}

const clips = new Map<string, Promise<Clip>>();

/**
 * ffmpeg's decode of a file to I420 pictures of `width` x `height` (scaled to that size with
 * area averaging when `scaled`).
 */
async function referencePictures(path: string, width: number, height: number, scaled = false) {
  const scale = scaled ? ["-vf", `scale=${width}:${height}:flags=area`] : [];
  const out = await new Deno.Command("ffmpeg", {
    args: [
      ...["-v", "error", "-i", path, "-an", ...scale],
      ...["-f", "rawvideo", "-pix_fmt", "yuv420p", "-"],
    ],
    stdout: "piped",
  }).output();
  const bytes = i420Bytes({ width, height });
  assert.equal(out.stdout.length % bytes, 0);
  return Array.from(
    { length: out.stdout.length / bytes },
    (_, i) => out.stdout.subarray(i * bytes, (i + 1) * bytes),
  );
}

/** The video of an MPEG-TS file, demuxed as a source would. */
async function tsClip(path: string, width: number, height: number): Promise<Clip> {
  const demuxer = new TsDemuxer();
  const all = [...demuxer.push(await Deno.readFile(path)), ...demuxer.flush()];
  const track = demuxer.tracks.find((t) => t.kind === "video")!;
  const video = all.filter((f) => f.trackId === track.id);
  // The clip starts at 0 (ffmpeg's MPEG-TS starts at 1.4 s).
  const start = Math.min(...video.map((f) => f.pts));
  const frames = shifted(video, -start);
  return { track, frames, pictures: await referencePictures(path, width, height), width, height };
}

/** ffmpeg's encoder arguments of the clips made here, and their picture sizes. */
const madeClips = {
  "h264-small": { size: [160, 120], args: ["-c:v", "libx264", "-bf", "2"] },
  // What WebRTC publishers send: no B-frames, so no picture waits for a later frame.
  "h264-baseline": { size: [320, 240], args: ["-c:v", "libx264", "-profile:v", "baseline"] },
  "h265-no-bframes": {
    size: [320, 240],
    args: ["-c:v", "libx265", "-x265-params", "log-level=error:bframes=0"],
  },
  "vp8": { size: [320, 240], args: ["-c:v", "libvpx", "-b:v", "500k"] },
  "vp8-small": { size: [160, 120], args: ["-c:v", "libvpx", "-b:v", "500k"] },
  // 4 s, keyframes at 0 and 3 s: a GOP longer than a chunk.
  "h264-long-gop": {
    size: [320, 240],
    args: ["-c:v", "libx264", "-bf", "2", "-g", "75", "-t", "4"],
  },
} as const;

/** A 25 fps clip (2 s unless said): the fixture (320x240 H.264 with B-frames, H.265), or one made here. */
function clip(kind: "h264" | "h265" | keyof typeof madeClips): Promise<Clip> {
  let made = clips.get(kind);
  if (made) return made;
  made = (async () => {
    if (kind === "h264") return tsClip(await fixture("h264_aac", "ts"), 320, 240);
    if (kind === "h265") return tsClip(await fixture("h265_aac", "ts"), 320, 240);
    const vp8 = kind.startsWith("vp8");
    const [width, height] = madeClips[kind].size;
    const path = await tempPath(`decoder-${kind}.${vp8 ? "ivf" : "ts"}`);
    await run("ffmpeg", [
      ...["-v", "error", "-y", "-f", "lavfi", "-i", `testsrc2=size=${width}x${height}:rate=25`],
      ...["-t", "2", "-pix_fmt", "yuv420p", "-g", "25", ...madeClips[kind].args, path],
    ]);
    if (!vp8) return tsClip(path, width, height);
    const reader = new IvfReader();
    const ivf = reader.push(await Deno.readFile(path));
    const { timeBaseNum, timeBaseDen } = reader.header!;
    const track: Track = { id: 0, kind: "video", codec: "VP8", clockRate: 90000, width, height };
    const frames = ivf.map((f): MediaFrame => {
      const pts = Math.round(f.timestamp * 90000 * timeBaseNum / timeBaseDen);
      return {
        trackId: 0,
        codec: "VP8",
        pts,
        dts: pts,
        keyframe: vp8IsKeyframe(f.data),
        data: f.data,
      };
    });
    return { track, frames, pictures: await referencePictures(path, width, height), width, height };
  })();
  clips.set(kind, made);
  return made;
}

/** The clip's frames `offset` (90 kHz) later. */
function shifted(frames: MediaFrame[], offset: number): MediaFrame[] {
  return frames.map((f) => ({ ...f, pts: f.pts + offset, dts: f.dts + offset }));
}

/** The clip's pts in presentation order. */
function presentationPts(frames: MediaFrame[], offset = 0): number[] {
  return frames.map((f) => f.pts + offset).sort((a, b) => a - b);
}

const clipSpan = 2 * 90000;
/**
 * Frames of the next clip pushed after the last one, as a live source goes on: the decoder
 * has no end of input, so these push the last pictures out of ffmpeg's parser and reorder
 * buffer (streaming) or end the last GOP (chunked).
 */
const followingFrames = 6;

/** The clip's frames, then followingFrames of the next clip (see there). */
function withFollowing(frames: MediaFrame[]): MediaFrame[] {
  return [...frames, ...shifted(frames, clipSpan).slice(0, followingFrames)];
}

/** Asserts that every picture of the clip's second GOP (from 1 s) is among `pictures`. */
function assertSecondGopWhole(source: Clip, pictures: RawVideoFrame[]): void {
  const secondGop = presentationPts(source.frames).filter((pts) => pts >= 90000);
  assert.deepEqual(pictures.filter((p) => p.pts >= 90000).map((p) => p.pts), secondGop);
}

/** A decoder of `track` on `engine` whose pictures go to `pictures` (scaled into `box`). */
function collectingDecoder(
  engine: CodecEngine,
  track: Track,
  pictures: RawVideoFrame[],
  box?: PictureSize,
): ReturnType<typeof createVideoDecoder> {
  return createVideoDecoder({
    engine,
    track,
    log: silentLogger,
    box,
    onPicture: (p) => pictures.push(p),
  });
}

/**
 * Pushes `frames` (paced: ten times their real rate for the native engine, about their rate
 * for ffmpeg.wasm, which decodes a GOP at a time) and returns the pictures before `until`
 * once they and the frames dropped make `expected`.
 */
async function decode(
  engine: CodecEngine,
  track: Track,
  frames: MediaFrame[],
  until: number,
  expected: number,
  box?: PictureSize,
): Promise<{ pictures: RawVideoFrame[]; dropped: number }> {
  const pictures: RawVideoFrame[] = [];
  const decoder = collectingDecoder(engine, track, pictures, box);
  try {
    const paceMs = engine.kind === "native" ? 4 : 30;
    for (const [i, frame] of frames.entries()) {
      decoder.push(frame);
      await delay(paceMs);
      // No faster than the native decoder takes them, however loaded the machine: a refused
      // write would cost the rest of its GOP, which these tests do not mean to test. (The
      // chunked one answers a GOP at a time and queues whole GOPs.)
      if (engine.kind === "native") await keepUp(() => i + 1 - pictures.length - decoder.dropped);
    }
    const deadline = Date.now() + 15_000;
    const done = () => pictures.filter((p) => p.pts < until).length + decoder.dropped;
    while (done() < expected && Date.now() < deadline) await delay(20);
    return { pictures: pictures.filter((p) => p.pts < until), dropped: decoder.dropped };
  } finally {
    await decoder.close();
  }
}

/** Frames pushed but not yet decoded, at most: well under the decoder's pending writes. */
const maxInFlightFrames = 12;

/** Waits (up to 10 s) until fewer than `maxInFlightFrames` frames are in the decoder. */
async function keepUp(inFlight: () => number): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (inFlight() > maxInFlightFrames && Date.now() < deadline) await delay(2);
}

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

function lumaMean(picture: Uint8Array, width: number, height: number): number {
  let sum = 0;
  for (let i = 0; i < width * height; i++) sum += picture[i];
  return sum / (width * height);
}

/** Asserts that `decoded` is every picture of `source`, in presentation order, none dropped. */
function assertWholeClip(
  source: Clip,
  decoded: { pictures: RawVideoFrame[]; dropped: number },
): void {
  assert.deepEqual(decoded.pictures.map((p) => p.pts), presentationPts(source.frames));
  assertPicturesOf(source, decoded.pictures, 0);
  assert.equal(decoded.dropped, 0);
}

/** Checks that each picture is ffmpeg's picture of the clip at the same presentation time. */
function assertPicturesOf(clip: Clip, pictures: RawVideoFrame[], offset: number): void {
  const times = presentationPts(clip.frames, offset);
  for (const picture of pictures) {
    const index = times.indexOf(picture.pts);
    assert.ok(index >= 0, `picture pts ${picture.pts} is no frame's`);
    assert.equal(picture.width, clip.width);
    assert.equal(picture.height, clip.height);
    assert.equal(picture.data.length, i420Bytes(clip));
    const want = clip.pictures[index];
    assert.ok(
      Math.abs(
        lumaMean(picture.data, clip.width, clip.height) -
          lumaMean(want, clip.width, clip.height),
      ) < 0.5,
      `luma of picture ${index}`,
    );
    assert.deepEqual(picture.data, want, `picture ${index} is ffmpeg's`);
  }
}

function assertIncreasing(pictures: RawVideoFrame[]): void {
  for (let i = 1; i < pictures.length; i++) {
    assert.ok(
      pictures[i].pts > pictures[i - 1].pts,
      `pts ${pictures[i].pts} after ${pictures[i - 1].pts}`,
    );
  }
}

const engines: [string, () => CodecEngine][] = [
  ["native", () => new NativeEngine()],
  ["wasm", () => new WasmEngine()],
];

for (const [name, makeEngine] of engines) {
  for (const kind of ["h264", "vp8", "h265"] as const) {
    Deno.test(`${name} decoder: a 2 s ${kind} clip gives ffmpeg's 50 pictures on its pts`, async () => {
      const source = await clip(kind);
      const engine = makeEngine();
      try {
        const frames = withFollowing(source.frames);
        const { pictures, dropped } = await decode(engine, source.track, frames, clipSpan, 50);
        assertIncreasing(pictures);
        assertPicturesOf(source, pictures, 0);
        if (kind === "h265" && name === "wasm") {
          // Each GOP is a run that starts at a CRA: its RASL pictures are not decodable.
          assert.equal(pictures.length + dropped, 50);
        } else {
          assert.deepEqual(pictures.map((p) => p.pts), presentationPts(source.frames));
          assert.equal(dropped, 0);
        }
      } finally {
        await engine.close();
      }
    });
  }

  for (const codec of ["h264", "vp8"] as const) {
    Deno.test(`${name} decoder: a ${codec} resolution change mid-stream gives pictures of both sizes, none lost`, async () => {
      const [large, small] = await Promise.all([clip(codec), clip(`${codec}-small`)]);
      const engine = makeEngine();
      try {
        const frames = [
          ...large.frames,
          ...shifted(small.frames, clipSpan),
          ...shifted(small.frames, 2 * clipSpan).slice(0, followingFrames),
        ];
        const { pictures, dropped } = await decode(engine, large.track, frames, 2 * clipSpan, 100);
        assertIncreasing(pictures);
        const before = pictures.filter((p) => p.pts < clipSpan);
        const after = pictures.filter((p) => p.pts >= clipSpan);
        assertPicturesOf(large, before, 0);
        assertPicturesOf(small, after, clipSpan);
        assert.deepEqual(after.map((p) => p.pts), presentationPts(small.frames, clipSpan));
        assert.deepEqual(before.map((p) => p.pts), presentationPts(large.frames));
        assert.equal(dropped, 0);
      } finally {
        await engine.close();
      }
    });
  }

  Deno.test(`${name} decoder: a damaged frame costs the rest of its GOP, not the decoder`, async () => {
    const source = await clip("h264");
    const engine = makeEngine();
    try {
      const frames = withFollowing(source.frames);
      // Frame 10's first NAL unit claims more bytes than the frame has.
      const damaged = frames[10].data.slice();
      new DataView(damaged.buffer).setUint32(0, damaged.length);
      frames[10] = { ...frames[10], data: damaged };
      const { pictures, dropped } = await decode(engine, source.track, frames, clipSpan, 50);
      assertIncreasing(pictures);
      assertPicturesOf(source, pictures, 0);
      assertSecondGopWhole(source, pictures);
      assert.ok(dropped > 0);
      assert.equal(pictures.length + dropped, 50);
    } finally {
      await engine.close();
    }
  });

  Deno.test(`${name} decoder: frames before the first keyframe are dropped and counted`, async () => {
    const source = await clip("h264");
    const engine = makeEngine();
    try {
      // Joining a stream mid-GOP: the first 20 frames have no keyframe to start at.
      const frames = [
        ...source.frames.slice(5),
        ...shifted(source.frames, clipSpan).slice(0, followingFrames),
      ];
      const { pictures, dropped } = await decode(engine, source.track, frames, clipSpan, 45);
      assert.equal(dropped, 20);
      const secondGop = presentationPts(source.frames).filter((pts) => pts >= 90000);
      assert.deepEqual(pictures.map((p) => p.pts), secondGop);
      assertPicturesOf(source, pictures, 0);
    } finally {
      await engine.close();
    }
  });

  Deno.test(`${name} decoder: close stops the engine's work and emits nothing after`, async () => {
    const source = await clip("h264");
    const engine = makeEngine();
    const pictures: RawVideoFrame[] = [];
    const decoder = collectingDecoder(engine, source.track, pictures);
    // Two GOPs and a keyframe: the chunked decoder has a run in flight, the streaming one
    // pictures in its pipes.
    for (const frame of source.frames.slice(0, 45)) decoder.push(frame);
    decoder.push(shifted(source.frames, clipSpan)[0]);
    await decoder.close();
    const count = pictures.length;
    decoder.push(source.frames[0]);
    await delay(300);
    assert.equal(pictures.length, count);
    await engine.close();
  });
}

Deno.test("native decoder: a box scales pictures into it as ffmpeg's area scaler does, never up", async () => {
  const [large, small] = await Promise.all([clip("h264"), clip("h264-small")]);
  const engine = new NativeEngine();
  try {
    // 320x240 fits the box at 200x150; the 160x120 pictures after the change fit as they are.
    const box = { width: 200, height: 200 };
    const scaled: Clip = {
      ...large,
      width: 200,
      height: 150,
      pictures: await referencePictures(await fixture("h264_aac", "ts"), 200, 150, true),
    };
    const frames = [
      ...large.frames,
      ...shifted(small.frames, clipSpan),
      ...shifted(small.frames, 2 * clipSpan).slice(0, followingFrames),
    ];
    const { pictures, dropped } = await decode(engine, large.track, frames, 2 * clipSpan, 100, box);
    assertIncreasing(pictures);
    assertPicturesOf(scaled, pictures.filter((p) => p.pts < clipSpan), 0);
    assertPicturesOf(small, pictures.filter((p) => p.pts >= clipSpan), clipSpan);
    assert.equal(pictures.length, 100);
    assert.equal(dropped, 0);
  } finally {
    await engine.close();
  }
});

Deno.test("native decoder: input it cannot take is dropped up to a keyframe, never mislabeled", async () => {
  const source = await clip("h264");
  const engine = new NativeEngine();
  try {
    // Four clips at once: more than the decoder's pending writes, so some are refused.
    const burst = [0, 1, 2, 3].flatMap((i) => shifted(source.frames, i * clipSpan));
    const pictures: RawVideoFrame[] = [];
    const decoder = collectingDecoder(engine, source.track, pictures);
    for (const frame of burst) decoder.push(frame);
    assert.ok(decoder.dropped > 0, "the burst overflowed the pending writes");
    // Until ffmpeg has decoded what it took of the burst (no picture for 1 s: with 300 ms a
    // busy machine's pauses let the paced clip start while ffmpeg still worked on the burst).
    for (let seen = -1; seen !== pictures.length;) {
      seen = pictures.length;
      await delay(1000);
    }
    const decodedBefore = pictures.length;
    for (const [i, frame] of shifted(source.frames, 4 * clipSpan).entries()) {
      decoder.push(frame);
      await delay(2);
      await keepUp(() => i + 1 - (pictures.length - decodedBefore));
    }
    const deadline = Date.now() + 10_000;
    while (!pictures.some((p) => p.pts >= 4 * clipSpan + 90000) && Date.now() < deadline) {
      await delay(20);
    }
    await decoder.close();
    assertIncreasing(pictures);
    for (let i = 0; i <= 4; i++) {
      const ofClip = pictures.filter((p) => p.pts >= i * clipSpan && p.pts < (i + 1) * clipSpan);
      assertPicturesOf(source, ofClip, i * clipSpan);
    }
    // The paced clip after the burst decodes whole (but its last frames, still in ffmpeg:
    // a loaded CI machine had 43 out before the close).
    const last = pictures.filter((p) => p.pts >= 4 * clipSpan);
    assert.ok(last.length >= 40, `${last.length} pictures of the paced clip`);
  } finally {
    await engine.close();
  }
});

/** The native engine with each live job changed by `wrap` (given the job's number). */
class WrappedEngine implements CodecEngine {
  readonly kind = "native";
  #engine = new NativeEngine();
  #started = 0;

  constructor(private readonly wrap: (job: LiveJob, index: number) => LiveJob) {}

  run(job: EngineJob): Promise<Uint8Array> {
    return this.#engine.run(job);
  }

  start(options: LiveJobOptions): LiveJob {
    return this.wrap(this.#engine.start(options), this.#started++);
  }

  close(): Promise<void> {
    return this.#engine.close();
  }
}

/**
 * `job` with its output cut anew into pieces of odd sizes, some larger than a picture, as an
 * engine whose output is not a byte stream may give it.
 */
function rechunked(job: LiveJob): LiveJob {
  return {
    write: (chunk) => job.write(chunk),
    get errors() {
      return job.errors;
    },
    close: () => job.close(),
    output: rechunk(job.output, [1000, 250_000, 7, 115_200]),
  };
}

async function* rechunk(
  output: AsyncIterable<Uint8Array>,
  sizes: number[],
): AsyncIterable<Uint8Array> {
  let held = new Uint8Array(0);
  let next = 0;
  for await (const chunk of output) {
    const joined = new Uint8Array(held.length + chunk.length);
    joined.set(held);
    joined.set(chunk, held.length);
    held = joined;
    while (held.length >= sizes[next % sizes.length]) {
      const size = sizes[next++ % sizes.length];
      yield held.subarray(0, size);
      held = held.subarray(size);
    }
  }
  if (held.length > 0) yield held;
}

Deno.test("native decoder: output in chunks of any size is cut into the same pictures", async () => {
  const source = await clip("h264");
  const engine = new WrappedEngine(rechunked);
  try {
    // A whole GOP follows: the re-cutting holds up to 250 kB, the last pictures' bytes.
    const frames = [...source.frames, ...shifted(source.frames, clipSpan).slice(0, 25)];
    assertWholeClip(source, await decode(engine, source.track, frames, clipSpan, 50));
  } finally {
    await engine.close();
  }
});

Deno.test("native decoder: when its ffmpeg dies, the next keyframe starts another", async () => {
  const source = await clip("h264");
  // The first ffmpeg is killed after 10 frames (its stdin then refuses what follows).
  const engine = new WrappedEngine((job, index) => {
    if (index > 0) return job;
    let writes = 0;
    return {
      write: (chunk) => {
        if (++writes === 10) job.close();
        return job.write(chunk);
      },
      get errors() {
        return job.errors;
      },
      close: () => job.close(),
      output: job.output,
    };
  });
  try {
    const frames = withFollowing(source.frames);
    const { pictures, dropped } = await decode(engine, source.track, frames, clipSpan, 50);
    assertIncreasing(pictures);
    assertPicturesOf(source, pictures, 0);
    // The second GOP (from 1 s) decodes whole on the new ffmpeg.
    assertSecondGopWhole(source, pictures);
    assert.equal(pictures.length + dropped, 50);
  } finally {
    await engine.close();
  }
});

for (const kind of ["h264-baseline", "h265-no-bframes", "vp8"] as const) {
  Deno.test(`native decoder: each ${kind} frame's picture comes before the next frame is pushed`, async () => {
    const source = await clip(kind);
    const engine = new NativeEngine();
    const pictures: RawVideoFrame[] = [];
    const decoder = collectingDecoder(engine, source.track, pictures);
    try {
      for (const [i, frame] of source.frames.entries()) {
        decoder.push(frame);
        const deadline = Date.now() + 2000;
        while (pictures.length <= i && Date.now() < deadline) await delay(2);
        assert.equal(pictures.length, i + 1, `picture ${i} came without the next frame`);
      }
      assert.deepEqual(pictures.map((p) => p.pts), presentationPts(source.frames));
      assertPicturesOf(source, pictures, 0);
    } finally {
      await decoder.close();
      await engine.close();
    }
  });
}

/**
 * An x264 SPS (high profile, no scaling matrices, frame pictures) without its VUI: no
 * bitstream_restriction says how deep pictures are reordered, as some hardware encoders
 * send it. Bits up to vui_parameters_present_flag are kept, the flag becomes 0.
 */
function withoutVui(sps: Uint8Array): Uint8Array {
  const rbsp = removeEmulationPrevention(sps);
  const r = new BitReader(rbsp, 1);
  const profileIdc = r.readBits(8);
  r.readBits(16);
  r.readUE(); // seq_parameter_set_id
  if (profileIdc >= 100) {
    assert.equal(r.readUE(), 1, "4:2:0");
    r.readUE();
    r.readUE();
    r.readBit();
    assert.equal(r.readBit(), 0, "no scaling matrices");
  }
  r.readUE(); // log2_max_frame_num_minus4
  const pocType = r.readUE();
  if (pocType === 0) r.readUE();
  assert.ok(pocType !== 1);
  r.readUE(); // max_num_ref_frames
  r.readBit();
  r.readUE();
  r.readUE();
  assert.equal(r.readBit(), 1, "frame_mbs_only");
  r.readBit(); // direct_8x8_inference_flag
  if (r.readBit()) { for (let i = 0; i < 4; i++) r.readUE(); }
  // Bits kept, then vui_parameters_present_flag = 0 and the RBSP stop bit.
  const bits = [...Array(r.bitPosition).keys()].map((i) => (rbsp[i >> 3] >> (7 - (i & 7))) & 1);
  bits.push(0, 1);
  while (bits.length % 8 !== 0) bits.push(0);
  const out: number[] = [];
  for (let i = 0; i < bits.length; i += 8) {
    const byte = bits.slice(i, i + 8).reduce((b, bit) => b * 2 + bit, 0);
    // Emulation prevention: no 00 00 followed by 00..03.
    if (out.length >= 2 && out.at(-1) === 0 && out.at(-2) === 0 && byte <= 3) out.push(3);
    out.push(byte);
  }
  return new Uint8Array(out);
}

Deno.test("native decoder: B-frames without VUI reorder depth still give every picture on its pts", async () => {
  const source = await clip("h264");
  const strip = (data: Uint8Array) =>
    joinLengthPrefixed(
      splitLengthPrefixed(data).map((nal) =>
        h264NalType(nal) === H264NalType.sps ? withoutVui(nal) : nal
      ),
    );
  const config = source.track.config!;
  assert.equal(config.codec, "H264");
  assert.equal(parseH264Sps(config.sps[0]).maxNumReorderFrames, 2);
  assert.equal(parseH264Sps(withoutVui(config.sps[0])).maxNumReorderFrames, undefined);
  const track: Track = {
    ...source.track,
    config: { ...config, sps: config.codec === "H264" ? config.sps.map(withoutVui) : [] },
  };
  const frames = withFollowing(source.frames).map((f) => ({
    ...f,
    data: f.keyframe ? strip(f.data) : f.data,
  }));
  const engine = new NativeEngine();
  try {
    assertWholeClip(source, await decode(engine, track, frames, clipSpan, 50));
  } finally {
    await engine.close();
  }
});

Deno.test("wasm decoder: a GOP longer than a chunk is decoded in steps, pictures in order", async () => {
  const source = await clip("h264-long-gop");
  assert.equal(source.frames.length, 100);
  assert.deepEqual(source.frames.flatMap((f, i) => f.keyframe ? [i] : []), [0, 75]);
  const wasm = new WasmEngine();
  const runs: number[] = [];
  const engine: CodecEngine = {
    kind: "wasm",
    run: (job) => {
      runs.push((job.input as Uint8Array).length);
      return wasm.run(job);
    },
    close: () => wasm.close(),
  };
  try {
    const span = 4 * 90000;
    const frames = [...source.frames, ...shifted(source.frames, span).slice(0, followingFrames)];
    assertWholeClip(source, await decode(engine, source.track, frames, span, 100));
    // The first 2 s of the long GOP, the whole GOP again, then the last GOP.
    assert.equal(runs.length, 3);
    assert.ok(runs[0] < runs[1]);
  } finally {
    await engine.close();
  }
});
