/**
 * A plain transcoder (no watermark, decoder scaling to its size, source rate = output rate)
 * on the native engine takes its pictures through a picture link: the decoder ffmpeg writes
 * them into a FIFO its encoder ffmpeg reads, and the server reads none of their bytes. Its
 * output is checked as a user would (a recording ffprobed), a watermark set live cuts the
 * link with no output frame lost or repeated, and terminate leaves no process or FIFO.
 */
import assert from "node:assert/strict";
import { run } from "../media/formats/test_fixtures.ts";
import type { Stream } from "../media/stream.ts";
import { openPictureLinks } from "../media/transcoder/picture_link.ts";
import { decodedPictureBytesRead } from "../media/transcoder/video_decoder_streaming.ts";
import { childrenNamed } from "./helpers/children.ts";
import { probe, waitFor } from "./helpers/media_fixtures.ts";
import { ok } from "./helpers/rest_checks.ts";
import { testConfig, type TestServer, withServer } from "./helpers/test_server.ts";

/** Source and output frame rate. */
const fps = 30;
/** Output frame spacing on the pipeline's 90 kHz clock. */
const frameTicks = 90000 / fps;

/** Video pts of every frame `stream` gives from now, until `stop` is called. */
function collectVideoPts(stream: Stream): { pts: number[]; stop: () => Promise<void> } {
  const reader = stream.reader(600);
  const pts: number[] = [];
  const videoId = stream.videoTrack!.id;
  const reading = (async () => {
    for await (const frame of reader) if (frame.trackId === videoId) pts.push(frame.pts);
  })();
  return {
    pts,
    stop: async () => {
      reader.close();
      await reading;
    },
  };
}

/** Waits until the source "cam" has a measured frame rate: a link is made only then. */
async function sourceRateKnown(server: TestServer): Promise<void> {
  await waitFor("the source's frame rate", async () => {
    const [found] = await (await server.post("/stream/find", { name: "cam" })).json();
    return found?.fps === fps || undefined;
  }, 10_000);
}

/** Directories of picture links in the temporary directory. */
function linkDirs(): string[] {
  const tmp = Deno.env.get("TMPDIR") ?? "/tmp";
  return [...Deno.readDirSync(tmp)].map((e) => e.name).filter((n) => n.startsWith("picture-link-"));
}

Deno.test("a plain transcoder's pictures skip the server through a link; a watermark cuts it with no frame lost or repeated; terminate cleans up", async () => {
  const config = testConfig({ media: { engine: "native" } });
  await Deno.mkdir(config.folders.media, { recursive: true });
  // x264 veryfast: B-frames, so decode order is not presentation order.
  await run("ffmpeg", [
    ...["-v", "error", "-y", "-f", "lavfi", "-i", `testsrc2=size=640x360:rate=${fps}`],
    ...["-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000", "-t", "30"],
    ...["-pix_fmt", "yuv420p", "-c:v", "libx264", "-preset", "veryfast", "-g", "30"],
    ...["-threads", "1", "-c:a", "aac", "-b:a", "64k", `${config.folders.media}/clip.mp4`],
  ]);
  await run("ffmpeg", [
    ...["-v", "error", "-y", "-f", "lavfi", "-i", "color=c=red:size=40x40", "-frames:v", "1"],
    `${config.folders.media}/mark.png`,
  ]);
  const linksBefore = linkDirs().length;
  await withServer(async (server) => {
    await ok(server, "/vod/startup", { uri: "vod-live://clip.mp4", localStreamName: "cam" });
    await sourceRateKnown(server);
    const bytesBefore = decodedPictureBytesRead();
    await ok(server, "/transcoder/startup", {
      uri: "transcoder://small",
      remoteStreamName: "cam",
      localStreamName: "small",
      encoder: { width: 320, height: 180, fps, keyFrameInterval: 30 },
    });
    const output = await waitFor("the output stream", () => {
      const stream = server.services.streams.published("small") as Stream | undefined;
      return stream?.videoTrack?.width ? stream : undefined;
    }, 20_000);
    const collected = collectVideoPts(output);
    await waitFor("output frames", () => collected.pts.length >= 30 || undefined, 20_000);
    // One decoder and one encoder, joined by one FIFO; no picture byte read by the server.
    assert.equal(childrenNamed("ffmpeg"), 2);
    assert.equal(openPictureLinks(), 1);
    assert.equal(linkDirs().length, linksBefore + 1);

    const started = performance.now();
    const recording = await (await server.post("/stream/find", { name: "small" })).json();
    await ok(server, "/stream/startRecording", { mediaSessionId: recording[0].mediaSessionId });
    await new Promise((r) => setTimeout(r, 5000));
    await ok(server, "/stream/stopRecording", { mediaSessionId: recording[0].mediaSessionId });
    const wallSec = (performance.now() - started) / 1000;
    assert.equal(decodedPictureBytesRead() - bytesBefore, 0, "picture bytes read by the server");
    const [file] = [...Deno.readDirSync(config.folders.records)].map((e) => e.name);
    const info = await probe(`${config.folders.records}/${file}`);
    const video = info.streams.find((s) => s.codec_type === "video")!;
    assert.equal(video.codec_name, "h264");
    assert.deepEqual([video.width, video.height], [320, 180]);
    assert.ok(
      Math.abs(info.duration - wallSec) <= wallSec * 0.05,
      `duration ${info.duration} s for ${wallSec.toFixed(2)} s recorded`,
    );
    const recordedFps = Number(video.nb_read_frames) / info.duration;
    assert.ok(Math.abs(recordedFps - fps) <= 1, `${recordedFps.toFixed(1)} fps`);

    // A watermark needs the kernels: the link is cut at a keyframe, pictures come through
    // the server from there, and the output goes on frame after frame.
    await ok(server, "/transcoder/set_watermark", {
      uri: "transcoder://small",
      watermark: "mark.png",
      x: 10,
      y: 10,
    });
    await waitFor("pictures through the server", () => {
      return decodedPictureBytesRead() > bytesBefore && openPictureLinks() === 0 || undefined;
    }, 10_000);
    const cutAt = collected.pts.length;
    await waitFor("frames after the cut", () => collected.pts.length >= cutAt + 60 || undefined);
    await collected.stop();
    const steps = collected.pts.slice(1).map((pts, i) => pts - collected.pts[i]);
    const odd = steps.map((step, i) => ({ step, at: i })).filter(({ step }) => step !== frameTicks);
    assert.deepEqual(odd, [], `every output frame one tick after the last (${steps.length})`);
    // The decoder now feeds the server, the encoder is a new one: still two processes.
    assert.equal(childrenNamed("ffmpeg"), 2);

    await ok(server, "/transcoder/terminate", { uri: "transcoder://small" });
    await waitFor("every ffmpeg to exit", () => childrenNamed("ffmpeg") === 0 || undefined);
    assert.equal(openPictureLinks(), 0);
    assert.equal(linkDirs().length, linksBefore);
  }, config);
});

Deno.test("a link's FIFO and processes end with the transcoder while still linked", async () => {
  const config = testConfig({ media: { engine: "native" } });
  await Deno.mkdir(config.folders.media, { recursive: true });
  await run("ffmpeg", [
    ...["-v", "error", "-y", "-f", "lavfi", "-i", `testsrc2=size=320x240:rate=${fps}`],
    ...["-t", "20", "-pix_fmt", "yuv420p", "-c:v", "libx264", "-preset", "ultrafast"],
    ...["-g", "30", "-threads", "1", `${config.folders.media}/clip.mp4`],
  ]);
  const linksBefore = linkDirs().length;
  await withServer(async (server) => {
    await ok(server, "/vod/startup", { uri: "vod-live://clip.mp4", localStreamName: "cam" });
    await sourceRateKnown(server);
    await ok(server, "/transcoder/startup", {
      uri: "transcoder://t",
      remoteStreamName: "cam",
      localStreamName: "t",
      encoder: { width: 160, height: 120, fps, keyFrameInterval: 30 },
    });
    await waitFor("a linked output", () => {
      const stream = server.services.streams.published("t") as Stream | undefined;
      return (stream?.videoTrack?.config && openPictureLinks() === 1) || undefined;
    }, 20_000);
    assert.equal(linkDirs().length, linksBefore + 1);
    await ok(server, "/transcoder/terminate", { uri: "transcoder://t" });
    await waitFor("every ffmpeg to exit", () => childrenNamed("ffmpeg") === 0 || undefined);
    assert.equal(openPictureLinks(), 0);
    assert.equal(linkDirs().length, linksBefore);
  }, config);
});
