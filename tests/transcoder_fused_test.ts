/**
 * Fused renditions (media/transcoder/fused_renditions.ts) through the REST API: several
 * plain H.264 transcoders of one source are made by one ffmpeg, each output decodes at its
 * size, rate and duration with no error; a rendition added or removed later restarts that
 * ffmpeg without a gap or a repeat in the others' frames; a watermark moves a rendition to
 * the kernels; every process ends with the transcoders.
 */
import assert from "node:assert/strict";
import type { StreamRecord } from "../core/records.ts";
import { decode, run } from "../media/formats/test_fixtures.ts";
import { WorkerRunner } from "../media/mixer/worker_runner.ts";
import type { Stream } from "../media/stream.ts";
import { meanRgb, ok, snapshotPixels } from "./helpers/rest_checks.ts";
import { probe, waitFor } from "./helpers/media_fixtures.ts";
import { testConfig, type TestServer, withServer } from "./helpers/test_server.ts";

/** A 30 s clip, `size` at `fps`, a keyframe a second, AAC, in the media folder. */
async function clip(folder: string, size: string, fps: number, video = "testsrc2") {
  await Deno.mkdir(folder, { recursive: true });
  const source = `${video}${video.includes("=") ? ":" : "="}size=${size}:rate=${fps}`;
  await run("ffmpeg", [
    ...["-v", "error", "-y", "-f", "lavfi", "-i", source],
    ...["-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000", "-t", "30"],
    ...["-pix_fmt", "yuv420p", "-c:v", "libx264", "-preset", "ultrafast", "-g", String(fps)],
    ...["-threads", "1", "-c:a", "aac", "-b:a", "64k", `${folder}/clip.mp4`],
  ]);
}

/** pids of this process's running ffmpeg children. */
function ffmpegPids(): number[] {
  const pids: number[] = [];
  for (const task of Deno.readDirSync(`/proc/${Deno.pid}/task`)) {
    let children = "";
    try {
      children = Deno.readTextFileSync(`/proc/${Deno.pid}/task/${task.name}/children`);
    } catch {
      continue; // The thread ended meanwhile.
    }
    for (const pid of children.split(" ").filter(Boolean).map(Number)) {
      try {
        if (Deno.readTextFileSync(`/proc/${pid}/comm`).trim() === "ffmpeg") pids.push(pid);
      } catch {
        // Exited meanwhile.
      }
    }
  }
  return pids.sort();
}

async function flowing(server: TestServer, name: string): Promise<StreamRecord> {
  return await waitFor(`stream ${name} with frames flowing`, async () => {
    const [found] = await (await server.post("/stream/find", { name })).json() as StreamRecord[];
    return found && found.width > 0 && found.fps > 0 ? found : undefined;
  }, 20_000);
}

async function transcode(server: TestServer, name: string, encoder: Record<string, unknown>) {
  await ok(server, "/transcoder/startup", {
    uri: `transcoder://${name}`,
    remoteStreamName: "cam",
    localStreamName: name,
    encoder,
  });
}

/** Waits until exactly `count` ffmpeg children run (a handover ended); returns their pids. */
async function settled(count: number): Promise<number[]> {
  return await waitFor(`${count} ffmpeg running`, () => {
    const pids = ffmpegPids();
    return pids.length === count ? pids : undefined;
  }, 15_000);
}

/** The pts of every video frame a reader of the stream gets, until `close`. */
function videoPts(stream: Stream) {
  const pts: number[] = [];
  const keyframes: boolean[] = [];
  const reader = stream.reader();
  const reading = (async () => {
    for await (const frame of reader) {
      if (frame.trackId !== stream.videoTrack?.id) continue;
      pts.push(frame.pts);
      keyframes.push(frame.keyframe);
    }
  })();
  return {
    pts,
    keyframes,
    close: async () => {
      reader.close();
      await reading;
    },
  };
}

Deno.test("four plain renditions of one source: one ffmpeg; each decodes at its size, rate and length", async () => {
  const config = testConfig({ media: { engine: "native" } });
  await clip(config.folders.media, "640x360", 25);
  const workersBefore = WorkerRunner.liveWorkers;
  // Keyframes every 0.2 s: a recording starts at the output's last keyframe before it was
  // asked, so its length is the wall time's within a GOP.
  const outputs = [
    { name: "a", width: 320, height: 180, fps: 15, keyFrameInterval: 3 },
    { name: "b", width: 256, height: 144, fps: 25, keyFrameInterval: 5 },
    // Frame rate 0: the source's frames as they come.
    { name: "c", width: 480, height: 270, fps: 0, keyFrameInterval: 5, probedFps: 25 },
    // Another aspect: letterboxed.
    { name: "d", width: 160, height: 160, fps: 10, keyFrameInterval: 2 },
  ];
  const gopSec = 0.2;
  await withServer(async (server) => {
    await ok(server, "/vod/startup", { uri: "vod-live://clip.mp4", localStreamName: "cam" });
    for (const { name, width, height, fps, keyFrameInterval } of outputs) {
      await transcode(server, name, { width, height, fps, keyFrameInterval });
    }
    const records = new Map<string, StreamRecord>();
    for (const { name } of outputs) records.set(name, await flowing(server, name));
    // One ffmpeg decodes the source and encodes all four (AAC passes through); no Worker.
    await settled(1);
    assert.equal(server.services.decoders.decoders, 1);
    assert.equal(WorkerRunner.liveWorkers, workersBefore);

    const started = performance.now();
    for (const record of records.values()) {
      await ok(server, "/stream/startRecording", { mediaSessionId: record.mediaSessionId });
    }
    await new Promise((r) => setTimeout(r, 6000));
    for (const record of records.values()) {
      await ok(server, "/stream/stopRecording", { mediaSessionId: record.mediaSessionId });
    }
    const wallSec = (performance.now() - started) / 1000;
    // The letterbox's bands are black, the picture between them is not.
    const square = await snapshotPixels(server, "d");
    assert.deepEqual([square.width, square.height], [160, 160]);
    const band = meanRgb(square, 0, 0, 160, 30);
    assert.ok(band.every((c) => c < 30), `band ${band}`);
    assert.ok(meanRgb(square, 0, 50, 160, 60).some((c) => c > 60), "a picture in the middle");

    const files = [...Deno.readDirSync(config.folders.records)].map((e) => e.name);
    assert.equal(files.length, outputs.length);
    for (const { name, width, height, fps, probedFps } of outputs) {
      const file = files.find((f) => f.includes(records.get(name)!.mediaSessionId)) ??
        files.find((f) => f.startsWith(name));
      assert.ok(file, `a recording of ${name} among ${files}`);
      const path = `${config.folders.records}/${file}`;
      const info = await probe(path);
      const video = info.streams.find((s) => s.codec_type === "video")!;
      assert.deepEqual(info.streams.map((s) => s.codec_name).sort(), ["aac", "h264"], name);
      assert.deepEqual([video.width, video.height], [width, height], name);
      const rate = Number(video.nb_read_frames) / info.duration;
      const expected = probedFps ?? fps;
      assert.ok(Math.abs(rate - expected) <= 1, `${name}: ${rate.toFixed(1)} fps`);
      assert.ok(
        Math.abs(info.duration - wallSec) <= wallSec * 0.05 + gopSec,
        `${name}: ${info.duration} s for ${wallSec.toFixed(2)} s recorded`,
      );
      const decoded = await decode(path);
      assert.equal(decoded.errors, "", name);
      assert.ok(decoded.video >= expected * wallSec * 0.9, `${name}: ${decoded.video} frames`);
    }

    for (const { name } of outputs) {
      await ok(server, "/transcoder/terminate", { uri: `transcoder://${name}` });
    }
    await settled(0);
    assert.equal(server.services.decoders.decoders, 0);
  }, config);
});

Deno.test("a rendition added and one removed later: the others' frames go on without a gap or a repeat", async () => {
  const config = testConfig({ media: { engine: "native" } });
  await clip(config.folders.media, "320x240", 25);
  await withServer(async (server) => {
    await ok(server, "/vod/startup", { uri: "vod-live://clip.mp4", localStreamName: "cam" });
    await transcode(server, "a", { width: 320, height: 240, fps: 25, keyFrameInterval: 25 });
    await flowing(server, "a");
    const frames = videoPts(server.services.streams.published("a") as Stream);
    const [first] = await settled(1);
    await new Promise((r) => setTimeout(r, 1000));

    await transcode(server, "b", { width: 160, height: 120, fps: 25, keyFrameInterval: 25 });
    await flowing(server, "b");
    const [second] = await settled(1);
    // The set changed: a new ffmpeg makes both.
    assert.notEqual(second, first);
    await new Promise((r) => setTimeout(r, 1000));
    await ok(server, "/transcoder/terminate", { uri: "transcoder://b" });
    await waitFor("a third ffmpeg, for a alone", () => {
      const pids = ffmpegPids();
      return pids.length === 1 && pids[0] !== second || undefined;
    }, 15_000);
    await new Promise((r) => setTimeout(r, 1000));
    await frames.close();

    const tick = 90000 / 25;
    assert.ok(frames.pts.length >= 100, `${frames.pts.length} frames`);
    assert.equal(frames.keyframes[0], true);
    for (let i = 1; i < frames.pts.length; i++) {
      const step = frames.pts[i] - frames.pts[i - 1];
      assert.equal(step, tick, `frame ${i}: ${frames.pts[i - 1]} -> ${frames.pts[i]}`);
    }
    const [record] = await (await server.post("/transcoder/find_all", {})).json() as {
      droppedFrames: number;
    }[];
    assert.equal(record.droppedFrames, 0);
    await ok(server, "/transcoder/terminate", { uri: "transcoder://a" });
    await settled(0);
  }, config);
});

Deno.test("a watermark set on a plain rendition moves it to the kernels, stamped", async () => {
  const config = testConfig({ media: { engine: "native" } });
  await clip(config.folders.media, "320x240", 25, "color=c=blue");
  await run("ffmpeg", [
    ...["-v", "error", "-y", "-f", "lavfi", "-i", "color=c=red:size=40x40", "-frames:v", "1"],
    `${config.folders.media}/mark.png`,
  ]);
  await withServer(async (server) => {
    await ok(server, "/vod/startup", { uri: "vod-live://clip.mp4", localStreamName: "cam" });
    await transcode(server, "m", { width: 320, height: 240, fps: 25, keyFrameInterval: 5 });
    await flowing(server, "m");
    await settled(1);
    await ok(server, "/transcoder/set_watermark", {
      uri: "transcoder://m",
      watermark: "mark.png",
      x: 200,
      y: 120,
    });
    const isRed = ([r, g, b]: number[]) => r > 180 && g < 80 && b < 80;
    await waitFor("the watermark", async () => {
      const pixels = await snapshotPixels(server, "m");
      return isRed(meanRgb(pixels, 204, 124, 32, 32)) || undefined;
    });
    // A decoder and an encoder now; the fused ffmpeg is gone.
    await settled(2);
    await ok(server, "/transcoder/terminate", { uri: "transcoder://m" });
    await settled(0);
  }, config);
});
