/**
 * RTSP cameras whose video has B-frames (GStreamer x264enc / x265enc, 2 B-frames, 25 fps):
 * RTP gives only presentation times, so the pull derives decode times. Checked the way a
 * user would: the recording decodes without a word from ffmpeg, holds every frame with
 * rising decode times, an RTMP player and a /push to nginx-rtmp get every frame, and
 * /stream/find tells 25 fps, GOP 25.
 */
import assert from "node:assert/strict";
import type { StreamRecord } from "../core/records.ts";
import { run } from "../media/formats/test_fixtures.ts";
import { startGstRtsp } from "./helpers/gst_rtsp.ts";
import { startNginxRtmp } from "./helpers/nginx_rtmp.ts";
import { probe, waitFor } from "./helpers/media_fixtures.ts";
import { testConfig, type TestServer, withServer } from "./helpers/test_server.ts";

/** Frame rate of the camera. */
const cameraFps = 25;

/** Decode and presentation times of a file's video packets, in decode order, in seconds. */
async function videoPackets(path: string): Promise<{ dts: number; pts: number }[]> {
  const { out } = await run("ffprobe", [
    ...["-v", "error", "-select_streams", "v:0", "-show_entries", "packet=dts_time,pts_time"],
    ...["-of", "json", path],
  ]);
  return (JSON.parse(out).packets as { dts_time: string; pts_time: string }[]).map((p) => ({
    dts: Number(p.dts_time),
    pts: Number(p.pts_time),
  }));
}

/** What ffmpeg prints at level error when it decodes the whole file (nothing when sound). */
async function decodeErrors(path: string): Promise<string> {
  const { err } = await run("ffmpeg", ["-v", "error", "-i", path, "-f", "null", "-"]);
  return err.trim();
}

/** Checks a file: a frame for every 1/25 s of its video, rising decode times, a clean decode. */
async function checkFile(path: string, what: string): Promise<void> {
  const info = await probe(path);
  const video = info.streams.find((s) => s.codec_type === "video")!;
  const frames = Number(video.nb_read_frames);
  const packets = await videoPackets(path);
  const pts = packets.map((p) => p.pts);
  const durationSec = Math.max(...pts) - Math.min(...pts) + 1 / cameraFps;
  const expected = durationSec * cameraFps;
  assert.ok(
    // Within 5%, or one frame of a short file (a loaded machine's x265 camera sends little).
    Math.abs(frames - expected) <= Math.max(1.01, 0.05 * expected),
    `${what}: ${frames} frames in ${durationSec.toFixed(3)} s of video, expected ${expected}`,
  );
  for (let i = 1; i < packets.length; i++) {
    assert.ok(packets[i].dts > packets[i - 1].dts, `${what}: dts rises at packet ${i}`);
  }
  assert.ok(packets.some((p, i) => i > 0 && p.pts < packets[i - 1].pts), `${what} has B-frames`);
  assert.equal(await decodeErrors(path), "", `${what}: ffmpeg decodes without error`);
}

/** Pushes the stream to nginx-rtmp and checks 3 s of what nginx relays. */
async function checkPush(server: TestServer, name: string, flv: string): Promise<void> {
  const nginx = await startNginxRtmp();
  try {
    const push = await server.post("/push/startup", { streamName: name, rtmpUrl: nginx.liveUrl });
    assert.equal(push.status, 200, await push.text());
    await run("ffmpeg", [
      ...["-v", "error", "-y", "-rw_timeout", "10000000", "-i", `${nginx.liveUrl}/${name}`],
      ...["-t", "3", "-c", "copy", flv],
    ]);
    await checkFile(flv, "push");
  } finally {
    await nginx.stop();
  }
}

/** Longest the test waits for the camera's second keyframe, in milliseconds. */
const gopWaitMs = 15_000;

async function findStream(server: TestServer, name: string): Promise<StreamRecord> {
  const [record] = await (await server.post("/stream/find", { name })).json() as StreamRecord[];
  return record;
}

for (const video of ["h264-bframes", "h265-bframes"] as const) {
  Deno.test(`RTSP ${video}: recording, RTMP play and /stream/find keep every frame`, async () => {
    const camera = await startGstRtsp({ video });
    const config = testConfig({ rtsp: { transport: "tcp" } });
    const flv = await Deno.makeTempFile({ suffix: ".flv" });
    try {
      await withServer(async (server) => {
        const name = "bcam";
        const start = await server.post("/rtsp/startup", {
          uri: camera.url,
          localStreamName: name,
        });
        assert.equal(start.status, 200, await start.text());
        // Rates are measured over whole windows of a second, once a GOP has gone by; a loaded
        // machine's camera may take longer to send its second keyframe.
        await waitFor(
          "a whole GOP",
          async () => (await findStream(server, name))?.gop || undefined,
          gopWaitMs,
        );
        await new Promise((r) => setTimeout(r, 1500));
        const record = await findStream(server, name);
        assert.ok(Math.abs(record.fps - cameraFps) <= 1, `fps ${record.fps}`);
        assert.equal(record.gop, 25);

        const id = record.mediaSessionId;
        const recorder = await server.post("/recorder/startup", { mediaSessionId: id });
        assert.equal(recorder.status, 200, await recorder.text());
        // H.265 does not go over (legacy) RTMP.
        const player = video === "h264-bframes"
          ? run("ffmpeg", [
            ...["-v", "error", "-y", "-rw_timeout", "10000000"],
            ...["-i", `rtmp://127.0.0.1:${server.rtmpPort}/live/${name}`],
            ...["-t", "4", "-c", "copy", flv],
          ])
          : undefined;
        await new Promise((r) => setTimeout(r, 4500));
        await player;
        const stop = await server.post("/recorder/terminate", { mediaSessionId: id });
        assert.equal(stop.status, 200, await stop.text());
        const files = [...Deno.readDirSync(config.folders.records)].map((e) => e.name);
        assert.equal(files.length, 1, files.join());
        await checkFile(`${config.folders.records}/${files[0]}`, "recording");
        if (player) await checkFile(flv, "RTMP play");
        if (video === "h264-bframes") await checkPush(server, name, flv);
      }, config);
    } finally {
      await camera.stop();
      await Deno.remove(flv);
    }
  });
}
