/**
 * The RTSP server read by third-party players: ffprobe, ffmpeg over TCP and UDP, and
 * GStreamer's rtspsrc, with a VOD (H.264 + AAC MP4) and an RTMP-published stream.
 * (VLC cannot take part: Debian builds it without live555, so it plays no rtsp:// at all.)
 */
import assert from "node:assert/strict";
import { publishRtmp, stopPublisher } from "./helpers/ffmpeg_rtmp.ts";
import { makeClip, waitFor } from "./helpers/media_fixtures.ts";
import { decodeWithFfmpeg, decodeWithGstreamer, probeRtsp } from "./helpers/rtsp_players.ts";
import { startTestServer, testConfig } from "./helpers/test_server.ts";

/** Seconds each player decodes. */
const decodeSeconds = 3;

Deno.test("RTSP server: a VOD (H.264 + AAC) read by ffprobe, ffmpeg over TCP and UDP, and GStreamer rtspsrc", async (t) => {
  const config = testConfig();
  await Deno.mkdir(config.folders.media, { recursive: true });
  await makeClip(`${config.folders.media}/clip.mp4`, { seconds: 60, audio: "aac" });
  const server = await startTestServer(config);
  try {
    const res = await server.post("/vod/startup", {
      uri: "vod-live://clip.mp4",
      localStreamName: "vod",
    });
    assert.equal(res.status, 200);
    const url = `${server.rtspUrl}/vod`;

    await t.step("ffprobe: h264 320x240 and aac", async () => {
      const streams = await probeRtsp(url);
      assert.deepEqual(streams.map((s) => [s.codec_type, s.codec_name, s.width, s.height]), [
        ["video", "h264", 320, 240],
        ["audio", "aac", undefined, undefined],
      ]);
    });

    await t.step("ffmpeg over TCP and UDP decodes 3 s without errors", async () => {
      const [tcp, udp] = await Promise.all([
        decodeWithFfmpeg(url, "tcp", decodeSeconds),
        decodeWithFfmpeg(url, "udp", decodeSeconds),
      ]);
      for (const [name, d] of [["tcp", tcp], ["udp", udp]] as const) {
        assert.equal(d.errors, "", `${name}: ${d.errors}`);
        // 25 fps and 48 kHz AAC (46.9 frames/s) over 3 s.
        assert.ok(d.video >= 70 && d.video <= 80, `${name}: ${d.video} pictures`);
        assert.ok(d.audio >= 130 && d.audio <= 150, `${name}: ${d.audio} audio frames`);
      }
    });

    await t.step("GStreamer rtspsrc over TCP and UDP decodes both tracks", async () => {
      const [tcp, udp] = await Promise.all([
        decodeWithGstreamer(url, "tcp", decodeSeconds + 1),
        decodeWithGstreamer(url, "udp", decodeSeconds + 1),
      ]);
      for (const [name, d] of [["tcp", tcp], ["udp", udp]] as const) {
        assert.equal(d.errors, "", `${name}: ${d.errors}`);
        assert.ok(d.video >= 50, `${name}: ${d.video} pictures`);
        assert.ok(d.audio >= 90, `${name}: ${d.audio} audio buffers`);
      }
    });
  } finally {
    await server.stop();
  }
});

Deno.test("RTSP server: an RTMP-published stream is played by ffmpeg over RTSP", async () => {
  const server = await startTestServer();
  const publisher = publishRtmp(`rtmp://127.0.0.1:${server.rtmpPort}/live/cam`, 30);
  try {
    await waitFor("the RTMP stream", async () => {
      const res = await server.post("/stream/find", { name: "cam" });
      const found = res.status === 200 ? await res.json() as unknown[] : [];
      return found.length > 0 ? true : undefined;
    });
    const decoded = await decodeWithFfmpeg(`${server.rtspUrl}/cam`, "tcp", decodeSeconds);
    assert.equal(decoded.errors, "");
    assert.ok(decoded.video >= 70, `${decoded.video} pictures`);
    assert.ok(decoded.audio >= 130, `${decoded.audio} audio frames`);
    const streams = await probeRtsp(`${server.rtspUrl}/cam`);
    assert.deepEqual(streams.map((s) => [s.codec_name, s.width]), [["h264", 640], [
      "aac",
      undefined,
    ]]);
  } finally {
    await stopPublisher(publisher);
    await server.stop();
  }
});
