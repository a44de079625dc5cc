import assert from "node:assert/strict";
import { silentLogger } from "../../core/log.ts";
import { parseH264Sps } from "../codecs/h264.ts";
import { lengthPrefixedToAnnexB } from "../codecs/nalu.ts";
import { findH264ParameterSets } from "../codecs/h264.ts";
import { type CodecEngine, EngineError } from "../engine/engine.ts";
import { NativeEngine } from "../engine/native.ts";
import { WasmEngine } from "../engine/wasm.ts";
import { ivfOf } from "../formats/ivf.ts";
import { decode, probeStreams, run, tempPath } from "../formats/test_fixtures.ts";
import type { MediaFrame, Track } from "../frame.ts";
import type {
  EncodedVideoCodec,
  RawVideoFrame,
  VideoEncoder,
  VideoEncoderSettings,
} from "./video_codec.ts";
import { createVideoEncoder, i420Bytes, maxPendingEncoderWrites } from "./video_encoder.ts";
import { h264LevelFor } from "./video_encoder_args.ts";

const width = 320;
const height = 180;
const fps = 15;
const keyFrameInterval = 10;
/** 90 kHz ticks per picture at `fps`. */
const ptsStep = 90000 / fps;
/** The source's timeline does not start at zero: the encoder must keep it. */
const firstPts = 123_456;

/** `count` testsrc2 pictures of the test size, raw I420, as ffmpeg makes them. */
async function pictures(count: number): Promise<RawVideoFrame[]> {
  const result = await new Deno.Command("ffmpeg", {
    args: [
      ...["-v", "error", "-f", "lavfi", "-i", `testsrc2=size=${width}x${height}:rate=${fps}`],
      ...["-frames:v", String(count), "-f", "rawvideo", "-pix_fmt", "yuv420p", "pipe:1"],
    ],
    stdout: "piped",
  }).output();
  const size = i420Bytes(width, height);
  assert.equal(result.stdout.length, size * count);
  return Array.from({ length: count }, (_, i) => ({
    width,
    height,
    data: result.stdout.slice(i * size, (i + 1) * size),
    pts: firstPts + i * ptsStep,
  }));
}

function track(codec: EncodedVideoCodec): Track {
  return { id: 3, kind: "video", codec, clockRate: 90000, width, height };
}

/** An encoder of the test settings on `engine`, collecting its frames. */
function encoderOn(
  engine: CodecEngine,
  codec: EncodedVideoCodec,
  output: Track,
  settings: Partial<VideoEncoderSettings> = {},
) {
  const frames: MediaFrame[] = [];
  const encoder = createVideoEncoder({
    engine,
    settings: { codec, width, height, fps, keyFrameInterval, bitrateKbps: 300, ...settings },
    track: output,
    onFrame: (frame) => {
      // The configuration is set before the first keyframe is handed on.
      if (codec === "H264") assert.ok(output.config, "track.config set before the frame");
      frames.push(frame);
    },
    log: silentLogger,
  });
  return { encoder, frames };
}

/** Pushes a picture, retrying while the encoder refuses it; returns the refusals. */
async function pushWhenAccepted(encoder: VideoEncoder, picture: RawVideoFrame): Promise<number> {
  let refused = 0;
  while (!encoder.push(picture)) {
    refused++;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  return refused;
}

async function waitFor(done: () => boolean, what: string, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!done()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/** The frames as a file ffmpeg reads: Annex B H.264 or IVF VP8. */
async function writeStream(codec: EncodedVideoCodec, frames: MediaFrame[], name: string) {
  const path = await tempPath(`${name}.${codec === "H264" ? "h264" : "ivf"}`);
  if (codec === "H264") {
    const parts = frames.map((f) => lengthPrefixedToAnnexB(f.data));
    const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
    let at = 0;
    for (const part of parts) {
      out.set(part, at);
      at += part.length;
    }
    await Deno.writeFile(path, out);
  } else {
    await Deno.writeFile(path, ivfOf(frames.map((f) => f.data), width, height));
  }
  return path;
}

const engines = {
  native: () => new NativeEngine(),
  wasm: () => new WasmEngine(),
} as const;

for (const kind of ["native", "wasm"] as const) {
  for (const codec of ["H264", "VP8"] as const) {
    Deno.test(`${kind} ${codec} encoder: 30 pictures give 30 decodable frames on their pts`, async () => {
      const input = await pictures(30);
      const engine = engines[kind]();
      const output = track(codec);
      const { encoder, frames } = encoderOn(engine, codec, output);
      try {
        let refused = 0;
        for (const picture of input) refused += await pushWhenAccepted(encoder, picture);
        await waitFor(() => frames.length >= input.length, "30 frames");
        assert.equal(encoder.dropped, refused);
      } finally {
        await encoder.close();
        await engine.close();
      }
      assert.equal(frames.length, 30);
      assert.deepEqual(frames.map((f) => f.pts), input.map((p) => p.pts));
      assert.deepEqual(frames.map((f) => f.dts), input.map((p) => p.pts));
      assert.deepEqual(
        frames.map((f) => f.keyframe),
        input.map((_, i) => i % keyFrameInterval === 0),
      );
      assert.ok(frames.every((f) => f.trackId === 3 && f.codec === codec));
      if (codec === "H264") {
        assert.equal(output.config?.codec, "H264");
        const sps = parseH264Sps(output.config.sps[0]);
        // Baseline with constraint_set1 (Constrained Baseline), level 1.2 for 320x180 at 15 fps.
        assert.deepEqual(
          [sps.profileIdc, sps.constraintFlags & 0x40, sps.levelIdc, sps.width, sps.height],
          [66, 0x40, 12, width, height],
        );
        assert.ok(output.config.pps.length > 0);
        // Every keyframe repeats the parameter sets, so a viewer can join at any of them.
        for (const frame of frames.filter((f) => f.keyframe)) {
          const sets = findH264ParameterSets(frame.data);
          assert.deepEqual([sets.sps.length, sets.pps.length], [1, 1]);
        }
      }
      const path = await writeStream(codec, frames, `${kind}-${codec}`);
      const [stream] = await probeStreams(path);
      assert.deepEqual(
        [stream.codec_name, stream.width, stream.height, stream.nb_read_packets],
        [codec === "H264" ? "h264" : "vp8", width, height, "30"],
      );
      if (codec === "H264") {
        const { out } = await run("ffprobe", [
          ...["-v", "error", "-show_entries", "stream=profile", "-of", "csv=p=0", path],
        ]);
        assert.equal(out.trim(), "Constrained Baseline");
      }
      const decoded = await decode(path);
      assert.equal(decoded.errors, "");
      assert.equal(decoded.video, 30);
    });
  }
}

for (const codec of ["H264", "VP8"] as const) {
  Deno.test(`native ${codec} encoder: a picture comes back without waiting for the next`, async () => {
    const [picture] = await pictures(1);
    const engine = new NativeEngine();
    // No bitrate given: the encoder picks one for the size.
    const { encoder, frames } = encoderOn(engine, codec, track(codec), { bitrateKbps: 0 });
    try {
      assert.ok(encoder.push(picture));
      await waitFor(() => frames.length === 1, "the first frame", 5000);
      assert.deepEqual([frames[0].pts, frames[0].keyframe], [firstPts, true]);
    } finally {
      await encoder.close();
      await engine.close();
    }
  });
}

for (const codec of ["H264", "VP8"] as const) {
  Deno.test(`native ${codec} encoder at 29.97 fps: frames keep their pictures' pts`, async () => {
    const input = await pictures(12);
    const engine = new NativeEngine();
    const { encoder, frames } = encoderOn(engine, codec, track(codec), { fps: 29.97 });
    try {
      for (const picture of input) await pushWhenAccepted(encoder, picture);
      await waitFor(() => frames.length === input.length, "12 frames");
    } finally {
      await encoder.close();
      await engine.close();
    }
    assert.deepEqual(frames.map((f) => f.pts), input.map((p) => p.pts));
  });
}

Deno.test("native encoder: refused pictures are counted and the rest keep their pts", async () => {
  const input = await pictures(maxPendingEncoderWrites + 10);
  const engine = new NativeEngine();
  const { encoder, frames } = encoderOn(engine, "H264", track("H264"));
  const accepted: number[] = [];
  try {
    // All at once: only so many pictures may wait for ffmpeg's stdin.
    for (const picture of input) if (encoder.push(picture)) accepted.push(picture.pts);
    assert.ok(accepted.length < input.length, "some pictures refused");
    assert.equal(encoder.dropped, input.length - accepted.length);
    await waitFor(() => frames.length >= accepted.length, "the accepted frames");
  } finally {
    await encoder.close();
    await engine.close();
  }
  assert.deepEqual(frames.map((f) => f.pts), accepted);
  assert.equal(frames[0].keyframe, true);
});

Deno.test("chunked encoder: one run going and two chunks queued, pictures beyond are dropped", async () => {
  const input = await pictures(40);
  const engine = new WasmEngine();
  const { encoder, frames } = encoderOn(engine, "VP8", track("VP8"));
  const accepted = input.filter((picture) => encoder.push(picture)).map((p) => p.pts);
  try {
    // Chunks of 10: the first runs, the next two wait, the fourth finds no room.
    assert.deepEqual(accepted, input.slice(0, 30).map((p) => p.pts));
    assert.equal(encoder.dropped, 10);
    await waitFor(() => frames.length >= 30, "three chunks");
  } finally {
    await encoder.close();
    await engine.close();
  }
  assert.deepEqual(frames.map((f) => f.pts), accepted);
  assert.deepEqual(frames.map((f) => f.keyframe), accepted.map((_, i) => i % 10 === 0));
  // Closed: pictures are refused and nothing more comes out.
  assert.equal(encoder.push(input[0]), false);
});

/** An engine without `start` (so chunked) running native ffmpeg, whose first run fails. */
function chunkedEngine(native: NativeEngine): CodecEngine & { runs: number } {
  return {
    kind: "native",
    runs: 0,
    run(job) {
      return this.runs++ === 0
        ? Promise.reject(new EngineError("first run fails"))
        : native.run(job);
    },
    close: () => native.close(),
  };
}

Deno.test("chunked encoder: a failed run costs its pictures only", async () => {
  const input = await pictures(20);
  const engine = chunkedEngine(new NativeEngine());
  const { encoder, frames } = encoderOn(engine, "H264", track("H264"));
  try {
    for (const picture of input) await pushWhenAccepted(encoder, picture);
    await waitFor(() => frames.length >= 10, "the second chunk");
    assert.equal(engine.runs, 2);
    assert.equal(encoder.dropped, 10);
  } finally {
    await encoder.close();
    await engine.close();
  }
  assert.deepEqual(frames.map((f) => f.pts), input.slice(10).map((p) => p.pts));
  assert.equal(frames[0].keyframe, true);
});

Deno.test("chunked encoder: nothing comes out after close, even from a run going", async () => {
  const input = await pictures(10);
  const engine = chunkedEngine(new NativeEngine());
  engine.runs = 1; // no failure
  const { encoder, frames } = encoderOn(engine, "VP8", track("VP8"));
  try {
    for (const picture of input) assert.ok(encoder.push(picture));
    assert.equal(engine.runs, 1, "not started before the chain's next turn");
    await new Promise((resolve) => setTimeout(resolve, 0));
    assert.equal(engine.runs, 2, "the run is going");
    await encoder.close();
  } finally {
    await engine.close();
  }
  assert.equal(frames.length, 0);
});

Deno.test("encoder refuses a picture of another size and keeps encoding", async () => {
  const [picture] = await pictures(1);
  const engine = new NativeEngine();
  const { encoder, frames } = encoderOn(engine, "H264", track("H264"));
  try {
    assert.equal(encoder.push({ width: 2, height: 2, data: new Uint8Array(6), pts: 0 }), false);
    assert.equal(encoder.push({ ...picture, data: picture.data.subarray(1) }), false);
    assert.equal(encoder.dropped, 2);
    assert.ok(encoder.push(picture));
    await waitFor(() => frames.length === 1, "the frame of the right size");
    assert.equal(frames[0].pts, picture.pts);
  } finally {
    await encoder.close();
    await engine.close();
  }
});

Deno.test("h264LevelFor: the lowest level whose size, rate and bitrate limits fit", () => {
  assert.equal(h264LevelFor(320, 180, 15, 300), "1.2");
  assert.equal(h264LevelFor(640, 360, 30, 700), "3");
  assert.equal(h264LevelFor(1280, 720, 30, 2500), "3.1");
  assert.equal(h264LevelFor(1920, 1080, 30, 6000), "4");
  assert.equal(h264LevelFor(640, 360, 30, 12000), "3.1");
  // 4096x16 is few macroblocks but too wide below level 4 (a side is at most sqrt(8 * MaxFS)).
  assert.equal(h264LevelFor(4096, 16, 30, 1000), "4");
});
