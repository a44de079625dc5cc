/** The codec engine: both implementations convert the same frames alike, and stop on close. */
import assert from "node:assert/strict";
import { NativeEngine } from "../media/engine/native.ts";
import { createEngine } from "../media/engine/select.ts";
import { transcodeFrames } from "../media/engine/transcode.ts";
import { WasmEngine } from "../media/engine/wasm.ts";
import type { MediaFrame } from "../media/frame.ts";
import { Mp4Demuxer } from "../media/formats/mp4/demuxer.ts";
import { openFileByteSource } from "../media/providers/file_source.ts";
import { TsMuxer } from "../media/formats/mpegts/muxer.ts";
import { makeClip } from "./helpers/media_fixtures.ts";

async function clipFrames(seconds: number) {
  const dir = await Deno.makeTempDir({ prefix: "engine-test-" });
  await makeClip(`${dir}/clip.mp4`, { seconds, audio: "aac" });
  const source = await openFileByteSource(`${dir}/clip.mp4`);
  try {
    const demuxer = await Mp4Demuxer.open(source);
    const frames: MediaFrame[] = [];
    for await (const frame of demuxer.frames()) frames.push(frame);
    return { tracks: demuxer.tracks, frames };
  } finally {
    source.close();
    await Deno.remove(dir, { recursive: true });
  }
}

for (const Engine of [NativeEngine, WasmEngine]) {
  Deno.test(`${Engine.name}: frames in, re-encoded frames out`, async () => {
    const { tracks, frames } = await clipFrames(1);
    const engine = new Engine();
    try {
      const out = await transcodeFrames(engine, tracks, frames, [
        "-c:v",
        "libx264",
        "-preset",
        "ultrafast",
        "-s",
        "160x120",
        "-c:a",
        "copy",
      ]);
      const video = out.tracks.find((t) => t.kind === "video");
      assert.equal(video?.codec, "H264");
      assert.equal(video?.width, 160);
      assert.equal(video?.height, 120);
      assert.equal(out.tracks.find((t) => t.kind === "audio")?.codec, "AAC");
      const videoIn = frames.filter((f) =>
        f.trackId === tracks.findIndex((t) => t.kind === "video")
      );
      const videoOut = out.frames.filter((f) => f.trackId === video!.id);
      assert.equal(videoOut.length, videoIn.length, "one picture out per picture in");
      assert.ok(videoOut[0].keyframe);
    } finally {
      await engine.close();
    }
  });

  Deno.test(`${Engine.name}: close() stops a running job`, async () => {
    const engine = new Engine();
    const { tracks, frames } = await clipFrames(4);
    const muxer = new TsMuxer({ tracks });
    const { promise: release, resolve } = Promise.withResolvers<void>();
    // Natively, a live-like input that stalls after its frames: only close() can end the job.
    // The wasm engine takes its input whole, so there the encoding itself keeps it busy.
    async function* input(stall: boolean): AsyncGenerator<Uint8Array> {
      for (const frame of frames) yield muxer.mux(frame);
      if (stall) await release;
    }
    const job = engine.run({
      inputArgs: ["-f", "mpegts"],
      input: input(Engine === NativeEngine),
      outputArgs: ["-c:v", "libx264", "-preset", "veryslow", "-f", "mpegts"],
    });
    await new Promise((r) => setTimeout(r, 1500));
    await engine.close();
    await assert.rejects(job, Engine === WasmEngine ? /engine was closed/ : /stopped by SIGKILL/);
    resolve();
    await assert.rejects(
      engine.run({ inputArgs: [], input: new Uint8Array(), outputArgs: [] }),
      /closed/,
    );
  });
}

Deno.test("media.engine auto picks native ffmpeg when it is on PATH, else wasm", () => {
  const path = Deno.env.get("PATH") ?? "";
  try {
    assert.equal(createEngine("auto").kind, "native");
    Deno.env.set("PATH", "/nonexistent");
    assert.equal(createEngine("auto").kind, "wasm");
    assert.equal(createEngine("native").kind, "native");
  } finally {
    Deno.env.set("PATH", path);
  }
});
