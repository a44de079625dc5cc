/**
 * WebRTC publish and play with the real Web SDK in Chromium (webrtc_scenarios.ts) in a
 * loopback-only network namespace; the scenarios also need ffprobe, GStreamer and ffmpeg.
 */
import { runInNetns } from "./netns.ts";

Deno.test("WebRTC e2e with the Web SDK in a loopback-only network namespace", async () => {
  await runInNetns("tests/e2e/webrtc_scenarios.ts");
});
