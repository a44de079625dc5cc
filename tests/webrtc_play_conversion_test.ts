/**
 * The live audio conversion of the codec engine: on a real stream (a VOD file published
 * through the REST API), AAC to Opus frames on the source's timeline, one ffmpeg shared by
 * every reader and closed after the last one leaves; and on paced tones of each codec pair,
 * with both engines, the latency it adds (printed as `bench:` lines).
 */
import assert from "node:assert/strict";
import { silentLogger } from "../core/log.ts";
import {
  AudioConversion,
  type AudioTarget,
  codecArgs,
  convertedAudio,
  targetTrack,
} from "../media/engine/audio_conversion.ts";
import type { CodecEngine } from "../media/engine/engine.ts";
import { LiveTranscode } from "../media/engine/live_transcode.ts";
import { NativeEngine } from "../media/engine/native.ts";
import { WasmEngine } from "../media/engine/wasm.ts";
import { TsDemuxer } from "../media/formats/mpegts/demuxer.ts";
import { run } from "../media/formats/test_fixtures.ts";
import type { MediaFrame, Track } from "../media/frame.ts";
import { Stream } from "../media/stream.ts";
import { childrenNamed } from "./helpers/children.ts";
import { makeClip } from "./helpers/media_fixtures.ts";
import { testConfig, withServer } from "./helpers/test_server.ts";

async function readFor(stream: Stream, ms: number): Promise<MediaFrame[]> {
  const reader = stream.reader();
  const timer = setTimeout(() => reader.close(), ms);
  const frames: MediaFrame[] = [];
  for await (const frame of reader) frames.push(frame);
  clearTimeout(timer);
  return frames;
}

Deno.test("AAC to Opus: one ffmpeg shared by two readers, frames on the source timeline, closed after the last", async () => {
  const config = testConfig();
  await Deno.mkdir(config.folders.media, { recursive: true });
  await makeClip(`${config.folders.media}/clip.mp4`, { seconds: 20, audio: "aac" });
  const engine = new NativeEngine();
  await withServer(async (server) => {
    const res = await server.post("/vod/startup", {
      uri: "vod-live://clip.mp4",
      localStreamName: "v",
    });
    assert.equal(res.status, 200, await res.text());
    const source = server.services.streams.published("v");
    assert.ok(source instanceof Stream);
    const baseline = childrenNamed("ffmpeg");
    const opus = convertedAudio(source, "OPUS", engine, silentLogger);
    assert.ok(opus instanceof AudioConversion);
    assert.equal(childrenNamed("ffmpeg"), baseline, "nothing runs before the first reader");
    const [a, b] = await Promise.all([
      readFor(opus, 3000),
      (async () => {
        await new Promise((r) => setTimeout(r, 500));
        assert.equal(convertedAudio(source, "OPUS", engine, silentLogger), opus, "shared");
        assert.equal(childrenNamed("ffmpeg"), baseline + 1, "one ffmpeg for both readers");
        return await readFor(opus, 2000);
      })(),
    ]);
    for (const frames of [a, b]) {
      const video = frames.filter((f) => f.codec === "H264");
      const audio = frames.filter((f) => f.codec === "OPUS");
      assert.ok(
        video.length >= 30 && audio.length >= 50,
        `${video.length} video, ${audio.length} audio`,
      );
      assert.equal(video[0].keyframe, true);
      for (let i = 1; i < audio.length; i++) {
        assert.ok(audio[i].pts > audio[i - 1].pts, "audio pts rise");
      }
      // Converted audio stays on the video's timeline (same seconds, within 150 ms).
      const lastVideoSec = video.at(-1)!.pts / 90000;
      const lastAudioSec = audio.at(-1)!.pts / 48000;
      assert.ok(
        Math.abs(lastVideoSec - lastAudioSec) < 0.15,
        `video ${lastVideoSec} s, audio ${lastAudioSec} s`,
      );
    }
    const latency = (opus as AudioConversion).transcode!.latency;
    console.log(
      `bench: AAC>Opus live conversion: first output ${Math.round(latency.firstOutputMs)} ms, ` +
        `steady delay mean ${latency.meanDelayMs} ms, max ${latency.maxDelayMs} ms (${latency.frames} frames)`,
    );
    await new Promise((r) => setTimeout(r, 300));
    assert.equal(opus.ended, true, "the conversion stops with its last reader");
    assert.equal(childrenNamed("ffmpeg"), baseline, "its ffmpeg is gone");
    const again = convertedAudio(source, "OPUS", engine, silentLogger);
    assert.notEqual(again, opus, "a later reader gets a fresh conversion");
    await readFor(again, 500);
  }, config);
  await engine.close();
});

/** `seconds` of a 440 Hz tone as frames of `codec`, made by ffmpeg, with their track. */
async function toneFrames(codec: "AAC" | "OPUS" | "PCMU", seconds: number) {
  const dir = await Deno.makeTempDir({ prefix: "tone-" });
  try {
    const path = `${dir}/tone`;
    const encoder = codec === "AAC"
      ? ["-c:a", "aac", "-f", "mpegts"]
      : codec === "OPUS"
      ? ["-c:a", "libopus", "-f", "mpegts"]
      : ["-ar", "8000", "-ac", "1", "-f", "mulaw"];
    await run("ffmpeg", [
      ...["-v", "error", "-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000"],
      ...["-t", String(seconds), ...encoder, path],
    ]);
    const bytes = await Deno.readFile(path);
    if (codec === "PCMU") {
      const track: Track = {
        id: 0,
        kind: "audio",
        codec: "PCMU",
        clockRate: 8000,
        sampleRate: 8000,
        channels: 1,
      };
      const frames: MediaFrame[] = [];
      for (let pos = 0; pos + 160 <= bytes.length; pos += 160) {
        const data = bytes.subarray(pos, pos + 160);
        frames.push({ trackId: 0, codec, pts: pos, dts: pos, keyframe: true, data });
      }
      return { track, frames };
    }
    const demuxer = new TsDemuxer();
    const frames = [...demuxer.push(bytes), ...demuxer.flush()];
    return { track: demuxer.tracks[0], frames };
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

/**
 * Pushes `frames` into a live transcode at their real pace and returns what came out and
 * the latency it measured.
 */
async function convertPaced(
  engine: CodecEngine,
  input: Track,
  frames: MediaFrame[],
  target: AudioTarget,
) {
  const output = { ...targetTrack(input, target, engine), id: 0 };
  const out: MediaFrame[] = [];
  const transcode = new LiveTranscode({
    engine,
    input,
    output,
    codecArgs: codecArgs(output),
    onFrame: (frame) => out.push(frame),
    log: silentLogger,
  });
  const startMs = performance.now();
  for (const frame of frames) {
    const dueMs = startMs + (frame.pts - frames[0].pts) * 1000 / input.clockRate;
    const waitMs = dueMs - performance.now();
    if (waitMs > 0) await new Promise((r) => setTimeout(r, waitMs));
    transcode.push(frame);
  }
  // What is still in the converter (a chunk, for the wasm engine) comes out within 2 s.
  await new Promise((r) => setTimeout(r, 2000));
  await transcode.close();
  return {
    out,
    clock: output.clockRate,
    latency: transcode.latency,
    streaming: transcode.streaming,
  };
}

for (
  const [from, to, Engine] of [
    ["AAC", "OPUS", NativeEngine],
    ["OPUS", "AAC", NativeEngine],
    ["PCMU", "OPUS", NativeEngine],
    ["AAC", "OPUS", WasmEngine],
    ["AAC", "PCMU", NativeEngine],
    ["OPUS", "PCMA", WasmEngine],
  ] as const
) {
  Deno.test(`live ${from} to ${to} (${Engine.name}): output on the input timeline, latency`, async () => {
    const { track, frames } = await toneFrames(from, 4);
    const engine = new Engine();
    try {
      const { out, clock, latency, streaming } = await convertPaced(engine, track, frames, to);
      console.log(
        `bench: live ${from}>${to} ${engine.kind}${streaming ? "" : " (chunked)"}: ` +
          `first output ${Math.round(latency.firstOutputMs)} ms, ` +
          `delay mean ${latency.meanDelayMs} ms, max ${latency.maxDelayMs} ms`,
      );
      const inStartSec = frames[0].pts / track.clockRate;
      const inEndSec = frames.at(-1)!.pts / track.clockRate;
      assert.ok(out.length > 0 && out.every((f) => f.codec === to));
      // The output covers the input's span on the input's clock (within two frames).
      assert.ok(Math.abs(out[0].pts / clock - inStartSec) < 0.05, `starts at ${out[0].pts}`);
      assert.ok(out.at(-1)!.pts / clock > inEndSec - 1.1, `ends at ${out.at(-1)!.pts / clock}`);
      for (let i = 1; i < out.length; i++) assert.ok(out[i].pts > out[i - 1].pts);
      assert.equal(streaming, engine.kind === "native");
      // Streaming: well under the 1 s of the chunked conversion it replaced.
      if (streaming) assert.ok(latency.meanDelayMs < 300, `mean delay ${latency.meanDelayMs} ms`);
    } finally {
      await engine.close();
    }
  });
}
