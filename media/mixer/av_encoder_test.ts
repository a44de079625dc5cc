import assert from "node:assert/strict";
import { silentLogger } from "../../core/log.ts";
import { NativeEngine } from "../engine/native.ts";
import type { MediaFrame, Track } from "../frame.ts";
import { i420Bytes } from "../transcoder/video_encoder.ts";
import { AvEncoder } from "./av_encoder.ts";

const width = 320;
const height = 180;
const fps = 15;
/** The mixer's timelines do not start at zero: the encoder must keep them. */
const firstVideoPts = 90_000 * 7;
const firstAudioPts = 48_000 * 7;
const pictures = 37;
/** 20 ms of 48 kHz stereo. */
const pcmFrames = 960;

Deno.test("one ffmpeg encodes a mixer's pictures and sound, each frame on its push's timeline", async () => {
  const engine = new NativeEngine();
  const videoTrack: Track = {
    id: 0,
    kind: "video",
    codec: "H264",
    clockRate: 90000,
    width,
    height,
  };
  const audioTrack: Track = {
    id: 1,
    kind: "audio",
    codec: "OPUS",
    clockRate: 48000,
    sampleRate: 48000,
    channels: 2,
  };
  const frames: MediaFrame[] = [];
  const encoder = new AvEncoder({
    engine,
    video: { codec: "H264", width, height, fps, keyFrameInterval: fps, bitrateKbps: 300 },
    videoTrack,
    format: { sampleRate: 48000, channels: 2 },
    audioTrack,
    audioBitrate: 32_000,
    onFrame: (frame) => frames.push(frame),
    log: silentLogger,
  });
  try {
    assert.equal(engine.runningJobs, 1);
    const grey = new Uint8Array(i420Bytes(width, height)).fill(128);
    // A 1 kHz tone, so the Opus frames are not silence.
    const tone = new Int16Array(pcmFrames * 2);
    for (let i = 0; i < pcmFrames; i++) {
      tone[2 * i] = tone[2 * i + 1] = Math.round(8000 * Math.sin(2 * Math.PI * 1000 * i / 48000));
    }
    // In real time: 2.5 s of pictures and of 20 ms sound frames, interleaved as a mixer makes
    // them (ffmpeg's muxer holds each stream's frames until the other's of their time are in).
    const start = performance.now();
    let sent = 0;
    // Pictures taken (a few may be refused while ffmpeg starts, as a busy encoder's are).
    const taken: number[] = [];
    for (let audio = 0; audio < 125; audio++) {
      encoder.push(tone, firstAudioPts + audio * pcmFrames);
      while (sent < pictures && sent * 1000 / fps <= audio * 20) {
        const pts = firstVideoPts + sent * 90000 / fps;
        if (encoder.video.push({ width, height, data: grey.slice(), pts })) taken.push(pts);
        sent++;
      }
      await new Promise((r) => setTimeout(r, Math.max(0, start + audio * 20 - performance.now())));
    }
    const deadline = performance.now() + 10_000;
    const video = () => frames.filter((f) => f.trackId === videoTrack.id);
    const audio = () => frames.filter((f) => f.trackId === audioTrack.id);
    // x264 holds no frame (zerolatency) and the sound's last frames come within a second.
    while (
      (video().length < taken.length || audio().length < 110) && performance.now() < deadline
    ) {
      await new Promise((r) => setTimeout(r, 50));
    }
    assert.ok(taken.length >= pictures - 5, `${taken.length} of ${pictures} pictures taken`);
    assert.deepEqual(video().map((f) => f.pts), taken);
    assert.ok(video()[0].keyframe);
    assert.equal(videoTrack.config?.codec, "H264");
    const audioPts = audio().map((f) => f.pts);
    assert.equal(audioPts[0], firstAudioPts);
    // 20 ms Opus frames, one after the other.
    assert.ok(audioPts.every((pts, i) => i === 0 || pts - audioPts[i - 1] === 960), `${audioPts}`);
    assert.ok(audio().every((f) => f.codec === "OPUS" && f.data.length > 10));
    assert.equal(encoder.video.dropped, pictures - taken.length);
    assert.equal(encoder.pcmDropped, 0);
  } finally {
    await encoder.close();
    await engine.close();
  }
  assert.equal(engine.runningJobs, 0);
});

Deno.test("the A/V encoder refuses a picture of another size and a full queue, and closes", async () => {
  const engine = new NativeEngine();
  const videoTrack: Track = {
    id: 0,
    kind: "video",
    codec: "H264",
    clockRate: 90000,
    width,
    height,
  };
  const audioTrack: Track = { id: 1, kind: "audio", codec: "OPUS", clockRate: 48000, channels: 2 };
  const encoder = new AvEncoder({
    engine,
    video: { codec: "H264", width, height, fps, keyFrameInterval: fps, bitrateKbps: 300 },
    videoTrack,
    format: { sampleRate: 48000, channels: 2 },
    audioTrack,
    audioBitrate: 0,
    onFrame: () => {},
    log: silentLogger,
  });
  try {
    const small = { width: 160, height: 90, data: new Uint8Array(i420Bytes(160, 90)), pts: 0 };
    assert.equal(encoder.video.push(small), false);
    // Pushed at once, faster than ffmpeg takes them: beyond three waiting, refused.
    const results = Array.from({ length: 8 }, (_, i) =>
      encoder.video.push({
        width,
        height,
        data: new Uint8Array(i420Bytes(width, height)),
        pts: (i + 1) * 6000,
      }));
    assert.ok(results.slice(0, 3).every(Boolean), `${results}`);
    assert.ok(results.includes(false), `${results}`);
    assert.equal(encoder.video.dropped, 1 + results.filter((r) => !r).length);
  } finally {
    await encoder.close();
    await engine.close();
  }
  assert.equal(engine.runningJobs, 0);
  assert.equal(encoder.video.push({ width, height, data: new Uint8Array(0), pts: 0 }), false);
});
