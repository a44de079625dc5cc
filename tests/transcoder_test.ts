/**
 * /transcoder and /transcoder2 through the REST API, checked as a user would: the output
 * stream's size, a recording of it ffprobed (codec, size, frame rate, duration), snapshots
 * (size, watermark pixels), decoder sharing and cleanup, and the refusals.
 */
import assert from "node:assert/strict";
import type { StreamRecord, TranscoderRecord } from "../core/records.ts";
import { decode, run } from "../media/formats/test_fixtures.ts";
import { WorkerRunner } from "../media/mixer/worker_runner.ts";
import { Stream } from "../media/stream.ts";
import { PlayRenditions } from "../media/transcoder/play_renditions.ts";
import { childrenNamed } from "./helpers/children.ts";
import { meanRgb, ok, refused, snapshotPixels } from "./helpers/rest_checks.ts";
import { probe, waitFor } from "./helpers/media_fixtures.ts";
import { startTestServer, testConfig, type TestServer, withServer } from "./helpers/test_server.ts";

/** Writes a clip of `seconds` to the media folder: a picture source, H.264 and AAC. */
async function clip(
  folder: string,
  name: string,
  options: { seconds: number; size: string; fps: number; video?: string; x264?: string[] },
): Promise<void> {
  await Deno.mkdir(folder, { recursive: true });
  const source = options.video ?? "testsrc2";
  await run("ffmpeg", [
    ...["-v", "error", "-y"],
    ...[
      "-f",
      "lavfi",
      "-i",
      `${source}${source.includes("=") ? ":" : "="}size=${options.size}:rate=${options.fps}`,
    ],
    ...["-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000"],
    ...["-t", String(options.seconds), "-pix_fmt", "yuv420p"],
    ...(options.x264 ?? ["-c:v", "libx264", "-preset", "ultrafast", "-g", "25"]),
    ...["-threads", "1", "-c:a", "aac", "-b:a", "64k", `${folder}/${name}`],
  ]);
}

async function outputStream(server: TestServer, name: string): Promise<StreamRecord> {
  return await waitFor(`stream ${name} with frames flowing`, async () => {
    const [found] = await (await server.post("/stream/find", { name })).json() as StreamRecord[];
    return found && found.width > 0 && found.fps > 0 ? found : undefined;
  }, 20_000);
}

async function transcoders(server: TestServer, scheme = "transcoder"): Promise<TranscoderRecord[]> {
  return await (await server.post(`/${scheme}/find_all`)).json();
}

for (const engine of ["native", "wasm"] as const) {
  Deno.test(`${engine} engine: VOD 640x360 25 fps -> 320x180 15 fps, recorded and snapshotted`, async () => {
    const config = testConfig({ media: { engine } });
    await clip(config.folders.media, "clip.mp4", { seconds: 30, size: "640x360", fps: 25 });
    await withServer(async (server) => {
      await ok(server, "/vod/startup", { uri: "vod-live://clip.mp4", localStreamName: "cam" });
      await ok(server, "/transcoder/startup", {
        uri: "transcoder://small",
        remoteStreamName: "cam",
        localStreamName: "small",
        // Short GOPs: a recording starts at the output's last keyframe before it was asked.
        encoder: { width: 320, height: 180, fps: 15, keyFrameInterval: 3 },
      });
      const stream = await outputStream(server, "small");
      assert.deepEqual([stream.width, stream.height], [320, 180]);
      assert.equal(stream.videoCodec, "H264");
      const [record] = await transcoders(server);
      assert.equal(record.status, "PROCESSED_LOCAL");
      assert.equal(record.localMediaSessionId, stream.mediaSessionId);
      assert.equal(record.hasVideo, true);
      assert.equal(record.hasAudio, true);
      assert.equal(typeof record.droppedFrames, "number");
      const [withMetrics] = await (await server.post("/stream/find", {
        name: "small",
        display: ["metrics"],
      })).json() as StreamRecord[];
      assert.equal(withMetrics.metrics?.VIDEO_LOST, record.droppedFrames);

      const snapshot = await snapshotPixels(server, "small");
      assert.deepEqual([snapshot.width, snapshot.height], [320, 180]);

      // ffmpeg.wasm delivers a second at a time, after a start-up it catches up from: let it
      // settle, and record longer so one chunk's burst weighs less.
      if (engine === "wasm") await new Promise((r) => setTimeout(r, 4000));
      const recordMs = engine === "wasm" ? 12_000 : 10_000;
      const started = performance.now();
      await ok(server, "/stream/startRecording", { mediaSessionId: stream.mediaSessionId });
      await new Promise((r) => setTimeout(r, recordMs));
      await ok(server, "/stream/stopRecording", { mediaSessionId: stream.mediaSessionId });
      const wallSec = (performance.now() - started) / 1000;
      const [file] = [...Deno.readDirSync(config.folders.records)].map((e) => e.name);
      const info = await probe(`${config.folders.records}/${file}`);

      const video = info.streams.find((s) => s.codec_type === "video")!;
      assert.deepEqual(
        info.streams.map((s) => s.codec_name).sort(),
        ["aac", "h264"],
      );
      assert.deepEqual([video.width, video.height], [320, 180]);
      assert.ok(
        // The chunked engine delivers a second's run at once: the recording's ends may fall
        // anywhere within one.
        Math.abs(info.duration - wallSec) <= wallSec * 0.05 + (engine === "wasm" ? 1 : 0),
        `duration ${info.duration} s for ${wallSec.toFixed(2)} s recorded`,
      );
      const fps = Number(video.nb_read_frames) / info.duration;
      assert.ok(Math.abs(fps - 15) <= 1, `${fps.toFixed(1)} fps`);
    }, config);
  });
}

Deno.test("watermark: stamped where asked, moved by set_watermark, removed by an empty name", async () => {
  const config = testConfig();
  await clip(config.folders.media, "blue.mp4", {
    seconds: 30,
    size: "320x240",
    fps: 25,
    video: "color=c=blue",
  });
  await run("ffmpeg", [
    ...["-v", "error", "-y", "-f", "lavfi", "-i", "color=c=red:size=40x40", "-frames:v", "1"],
    `${config.folders.media}/mark.png`,
  ]);
  await withServer(async (server) => {
    await ok(server, "/vod/startup", { uri: "vod-live://blue.mp4", localStreamName: "blue" });
    await ok(server, "/transcoder/startup", {
      uri: "transcoder://marked",
      remoteStreamName: "blue",
      localStreamName: "marked",
      encoder: { width: 320, height: 240, fps: 25, keyFrameInterval: 5, watermark: "mark.png" },
    });
    await outputStream(server, "marked");
    const isRed = ([r, g, b]: number[]) => r > 180 && g < 80 && b < 80;
    const isBlue = ([r, g, b]: number[]) => b > 180 && r < 80 && g < 80;
    const first = await snapshotPixels(server, "marked");
    assert.ok(isRed(meanRgb(first, 4, 4, 32, 32)), `${meanRgb(first, 4, 4, 32, 32)} at (0, 0)`);
    assert.ok(isBlue(meanRgb(first, 100, 100, 100, 100)), "blue elsewhere");

    await ok(server, "/transcoder/set_watermark", {
      uri: "transcoder://marked",
      watermark: "mark.png",
      x: 200,
      y: 120,
    });
    const moved = await waitFor("the watermark to move", async () => {
      const pixels = await snapshotPixels(server, "marked");
      return isRed(meanRgb(pixels, 204, 124, 32, 32)) ? pixels : undefined;
    });
    assert.ok(isBlue(meanRgb(moved, 4, 4, 32, 32)), `${meanRgb(moved, 4, 4, 32, 32)} at (0, 0)`);
    const [record] = await transcoders(server);
    assert.equal(record.encoder.watermark, "mark.png");

    await ok(server, "/transcoder/set_watermark", {
      uri: "transcoder://marked",
      watermark: "",
      x: 0,
      y: 0,
    });
    await waitFor("the watermark to go", async () => {
      const pixels = await snapshotPixels(server, "marked");
      return isBlue(meanRgb(pixels, 204, 124, 32, 32)) || undefined;
    });
  }, config);
});

Deno.test("two transcoders of one source share one decoder; terminate ends every process and Worker", async () => {
  const config = testConfig({ media: { engine: "native" } });
  await clip(config.folders.media, "clip.mp4", { seconds: 30, size: "320x240", fps: 25 });
  const workersBefore = WorkerRunner.liveWorkers;
  await withServer(async (server) => {
    await ok(server, "/vod/startup", { uri: "vod-live://clip.mp4", localStreamName: "cam" });
    for (const [name, width] of [["a", 160], ["b", 240]] as const) {
      await ok(server, "/transcoder2/startup", {
        uri: `transcoder2://${name}`,
        remoteStreamName: "cam",
        localStreamName: name,
        encoder: { width, height: 0, fps: 15, keyFrameInterval: 30, videoCodec: "H264" },
      });
    }
    assert.equal((await outputStream(server, "a")).height, 120);
    assert.equal((await outputStream(server, "b")).height, 180);
    assert.equal(server.services.decoders.decoders, 1);
    // One ffmpeg decodes the source once and encodes both (fused renditions), once the one
    // started for the first has handed over; the source's AAC passes through; no kernel
    // Worker.
    await waitFor("one ffmpeg", () => childrenNamed("ffmpeg") === 1 || undefined);
    assert.equal(WorkerRunner.liveWorkers, workersBefore);

    await ok(server, "/transcoder2/terminate", { uri: "transcoder2://a" });
    await waitFor("one ffmpeg, for b", () => childrenNamed("ffmpeg") === 1 || undefined);
    assert.equal(server.services.decoders.decoders, 1);
    await ok(server, "/transcoder2/terminate", { uri: "transcoder2://b" });
    await waitFor("every ffmpeg to exit", () => childrenNamed("ffmpeg") === 0 || undefined);
    assert.equal(server.services.decoders.decoders, 0);
    assert.equal(WorkerRunner.liveWorkers, workersBefore);
    assert.deepEqual(await transcoders(server, "transcoder2"), []);
    const names = (await (await server.post("/stream/find_all")).json() as StreamRecord[])
      .map((s) => s.name);
    assert.deepEqual(names, ["cam"]);
  }, config);
});

Deno.test("a transcoder waits for its source, and ends with it", async () => {
  const config = testConfig({ media: { engine: "native" } });
  const workersBefore = WorkerRunner.liveWorkers;
  await clip(config.folders.media, "short.mp4", { seconds: 3, size: "320x240", fps: 25 });
  await withServer(async (server) => {
    await ok(server, "/transcoder/startup", {
      uri: "transcoder://later",
      remoteStreamName: "cam",
      localStreamName: "later",
      encoder: { width: 160, height: 120, fps: 10, keyFrameInterval: 10 },
    });
    const [waiting] = await transcoders(server);
    assert.equal(waiting.status, "WAITING");
    assert.equal(waiting.hasVideo, false);
    await ok(server, "/vod/startup", { uri: "vod-live://short.mp4", localStreamName: "cam" });
    const stream = await outputStream(server, "later");
    assert.deepEqual([stream.width, stream.height], [160, 120]);
    assert.equal((await transcoders(server))[0].status, "PROCESSED_LOCAL");
    await waitFor("the transcoder to end with its source", async () => {
      return (await transcoders(server)).length === 0 || undefined;
    }, 15_000);
    const names = (await (await server.post("/stream/find_all")).json() as StreamRecord[])
      .map((s) => s.name);
    assert.deepEqual(names, []);
    assert.equal(server.services.decoders.decoders, 0);
    await waitFor("every ffmpeg to exit", () => childrenNamed("ffmpeg") === 0 || undefined);
    assert.equal(WorkerRunner.liveWorkers, workersBefore);
  }, config);
});

Deno.test("server stop ends running transcoders with their processes and Workers", async () => {
  const config = testConfig({ media: { engine: "native" } });
  await clip(config.folders.media, "clip.mp4", { seconds: 30, size: "320x240", fps: 25 });
  const workersBefore = WorkerRunner.liveWorkers;
  const server = await startTestServer(config);
  try {
    await ok(server, "/vod/startup", { uri: "vod-live://clip.mp4", localStreamName: "cam" });
    await ok(server, "/transcoder2/startup", {
      uri: "transcoder2://t",
      remoteStreamName: "cam",
      localStreamName: "t",
      encoder: { width: 160, height: 120, fps: 15, keyFrameInterval: 15, audioCodec: "opus" },
    });
    await outputStream(server, "t");
    // The fused decoder and encoder, and the AAC to Opus conversion.
    assert.equal(childrenNamed("ffmpeg"), 2);
  } finally {
    await server.stop();
  }
  assert.equal(childrenNamed("ffmpeg"), 0);
  assert.equal(WorkerRunner.liveWorkers, workersBefore);
});

Deno.test("a source with B-frames gives an output that decodes cleanly with rising dts", async () => {
  const config = testConfig();
  await clip(config.folders.media, "bframes.mp4", {
    seconds: 30,
    size: "320x240",
    fps: 25,
    // x264's defaults: 3 B-frames, weighted prediction, a GOP of 250.
    x264: ["-c:v", "libx264", "-preset", "medium"],
  });
  await withServer(async (server) => {
    await ok(server, "/vod/startup", { uri: "vod-live://bframes.mp4", localStreamName: "cam" });
    await ok(server, "/transcoder/startup", {
      uri: "transcoder://b",
      remoteStreamName: "cam",
      localStreamName: "out",
      encoder: { width: 0, height: 0, fps: 25, keyFrameInterval: 25 },
    });
    const stream = await outputStream(server, "out");
    assert.deepEqual([stream.width, stream.height], [320, 240]);
    await ok(server, "/stream/startRecording", { mediaSessionId: stream.mediaSessionId });
    await new Promise((r) => setTimeout(r, 3000));
    await ok(server, "/stream/stopRecording", { mediaSessionId: stream.mediaSessionId });
    const [file] = [...Deno.readDirSync(config.folders.records)].map((e) => e.name);
    const path = `${config.folders.records}/${file}`;
    const decoded = await decode(path);
    assert.equal(decoded.errors, "");
    assert.ok(decoded.video >= 60, `${decoded.video} frames decoded`);
    const { out } = await run("ffprobe", [
      ...["-v", "error", "-select_streams", "v", "-show_entries", "packet=dts"],
      ...["-of", "csv=p=0", path],
    ]);
    const dts = out.trim().split("\n").map(Number);
    for (let i = 1; i < dts.length; i++) assert.ok(dts[i] > dts[i - 1], `dts ${dts[i]} at ${i}`);
  }, config);
});

Deno.test("transcoder refusals: 400 naming the field, 404, 409", async () => {
  const config = testConfig();
  await Deno.mkdir(config.folders.media, { recursive: true });
  const body = (encoder: Record<string, unknown>, uri = "transcoder://t") => ({
    uri,
    remoteStreamName: "cam",
    localStreamName: "out",
    encoder: { width: 320, height: 240, fps: 15, keyFrameInterval: 30, ...encoder },
  });
  await withServer(async (server) => {
    await refused(server, "/transcoder/startup", { ...body({}), uri: "rtmp://x" }, 400, /uri/);
    await refused(server, "/transcoder/startup", body({ width: 321 }), 400, /encoder\.width/);
    await refused(server, "/transcoder/startup", body({ height: 4098 }), 400, /encoder\.height/);
    await refused(server, "/transcoder/startup", body({ watermark: "none.png" }), 404);
    await refused(
      server,
      "/transcoder/startup",
      body({ watermark: "../etc/passwd" }),
      400,
      /watermark/,
    );
    await refused(
      server,
      "/transcoder2/startup",
      body({ videoCodec: "AV1" }, "transcoder2://t"),
      400,
      /encoder\.videoCodec.*H264, VP8/,
    );
    await refused(
      server,
      "/transcoder2/startup",
      body({ audioCodec: "mp3" }, "transcoder2://t"),
      400,
      /encoder\.audioCodec/,
    );
    await refused(
      server,
      "/transcoder/startup",
      { ...body({}), localStreamName: "cam" },
      400,
      /localStreamName/,
    );
    assert.deepEqual(await transcoders(server), []);

    await ok(server, "/transcoder/startup", body({}));
    await refused(server, "/transcoder/startup", body({}), 409);
    await refused(server, "/transcoder/startup", { ...body({}), uri: "transcoder://u" }, 409);
    await refused(server, "/transcoder/terminate", { uri: "transcoder://nobody" }, 404);
    await refused(server, "/transcoder2/terminate", { uri: "transcoder2://t" }, 404);
    await refused(
      server,
      "/transcoder/set_watermark",
      { uri: "transcoder://t", watermark: "none.png", x: 0, y: 0 },
      404,
    );
    assert.equal((await transcoders(server)).length, 1);
    await ok(server, "/transcoder/terminate", { uri: "transcoder://t" });
    assert.deepEqual(await transcoders(server), []);
  }, config);
});

Deno.test("players asking the same size share one rendition; it stops with its last reader", async () => {
  const config = testConfig({ media: { engine: "native" } });
  await clip(config.folders.media, "clip.mp4", { seconds: 30, size: "640x360", fps: 25 });
  await withServer(async (server) => {
    await ok(server, "/vod/startup", { uri: "vod-live://clip.mp4", localStreamName: "cam" });
    const source = server.services.streams.published("cam");
    assert.ok(source instanceof Stream);
    const renditions = server.services.playRenditions;
    const small = { width: 320, height: 180, maxBitrateKbps: 0 };
    assert.equal(PlayRenditions.wanted(source, small), true);
    assert.equal(
      PlayRenditions.wanted(source, { width: 640, height: 0, maxBitrateKbps: 0 }),
      false,
    );
    const a = renditions.get(source, small, "H264");
    const b = renditions.get(source, small, "H264");
    assert.equal(a, b);
    const c = renditions.get(source, { ...small, maxBitrateKbps: 300 }, "VP8");
    assert.notEqual(a, c);
    const readers = [a.reader(), b.reader(), c.reader()];
    // Read with next(): leaving a for-await loop would close the reader.
    const firstVideo = async (reader: (typeof readers)[number], stream: Stream) => {
      for (let frame = await reader.next(); frame; frame = await reader.next()) {
        if (stream.tracks[frame.trackId].kind === "video") return frame;
      }
    };
    const [fa, fc] = await Promise.all([firstVideo(readers[0], a), firstVideo(readers[2], c)]);
    assert.deepEqual([fa?.codec, fa?.keyframe, fc?.codec], ["H264", true, "VP8"]);
    assert.deepEqual([a.videoTrack?.width, a.videoTrack?.height], [320, 180]);
    // The source's AAC becomes Opus for WebRTC, once per rendition.
    assert.equal(a.tracks.find((t) => t.kind === "audio")?.codec, "OPUS");
    assert.equal(renditions.size, 2);
    assert.equal(server.services.decoders.decoders, 1);
    // One decoder, and per rendition one video encoder and one audio conversion.
    assert.equal(childrenNamed("ffmpeg"), 5);
    for (const reader of readers) reader.close();
    await waitFor(
      "the renditions to stop",
      () => renditions.size === 0 && childrenNamed("ffmpeg") === 0 || undefined,
    );
    assert.equal(server.services.decoders.decoders, 0);
  }, config);
});
