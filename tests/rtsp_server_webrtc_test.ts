/**
 * The RTSP server with a WebRTC source: a werift WHIP publisher sends real H.264 + Opus, and
 * ffprobe, ffmpeg (over TCP and UDP) and GStreamer's rtspsrc read it from the RTSP port. The
 * stream goes out as it came in (H.264 and Opus, no conversion) and decodes without errors,
 * also for a player that comes after the others left (when the server makes frames afresh).
 */
import assert from "node:assert/strict";
import { framesLingerMs } from "../media/providers/webrtc_publisher.ts";
import { assertDecodesOverTcpAndUdp, decodeWithFfmpeg, probeRtsp } from "./helpers/rtsp_players.ts";
import { startTestServer } from "./helpers/test_server.ts";
import { ClipPublisher, makeH264OpusClip } from "./helpers/webrtc_clip_publisher.ts";
import { waitFor, weriftSanitizers } from "./webrtc_helpers.ts";

/** Seconds each player decodes. */
const decodeSeconds = 3;

Deno.test({
  name:
    "RTSP server: a WebRTC (WHIP) H.264 + Opus stream is read by ffprobe, ffmpeg over TCP and UDP, and GStreamer rtspsrc without errors",
  ...weriftSanitizers,
  fn: async (t) => {
    const clip = await makeH264OpusClip({ seconds: 4, width: 640, height: 360, videoKbps: 800 });
    const server = await startTestServer();
    const publisher = new ClipPublisher(clip);
    try {
      await publisher.publish(server.restUrl, "webcam");
      await waitFor(() => publisher.pc.connectionState === "connected", 10_000, "connected");
      const url = `${server.rtspUrl}/webcam`;

      await t.step("ffprobe: h264 640x360 and opus", async () => {
        const streams = await probeRtsp(url);
        assert.deepEqual(streams.map((s) => [s.codec_type, s.codec_name, s.width, s.height]), [
          ["video", "h264", 640, 360],
          ["audio", "opus", undefined, undefined],
        ]);
      });

      // ffprobe's reader has just left: the players start from the cached GOP, on its timeline.
      await t.step("ffmpeg over TCP and UDP decodes 3 s without errors", async () => {
        // 25 fps and 20 ms Opus packets over 3 s.
        await assertDecodesOverTcpAndUdp("ffmpeg", url, decodeSeconds, {
          video: [70, 80],
          audio: [140, 160],
        });
      });

      await t.step(
        "a player coming after the last one left a while ago decodes as well",
        async () => {
          // The server stops making frames from the RTP some time after its last reader left;
          // the next reader starts on a new timeline, not at the old cached pictures.
          await new Promise((r) => setTimeout(r, framesLingerMs + 1000));
          const d = await decodeWithFfmpeg(url, "tcp", decodeSeconds);
          assert.equal(d.errors, "");
          assert.ok(d.video >= 70 && d.video <= 80, `${d.video} pictures`);
          assert.ok(d.audio >= 140 && d.audio <= 160, `${d.audio} audio frames`);
        },
      );

      await t.step("GStreamer rtspsrc over TCP and UDP decodes both tracks", async () => {
        await assertDecodesOverTcpAndUdp("gstreamer", url, decodeSeconds + 1, {
          video: [50, Infinity],
          audio: [100, Infinity],
        }, "opus");
      });
    } finally {
      await publisher.close();
      await server.stop();
    }
  },
});
