/**
 * The Web SDK's MSE player (`mediaProvider: "MSE"`) with the real `@flashphoner/websdk`
 * 2.0.276 in headless Chromium: a stream published over RTMP by ffmpeg (H.264 + AAC) and one
 * published over WebRTC by the page's fake camera (H.264 + Opus, played as AAC through the
 * shared conversion). Driven through webrtc_page.html; runs inside a loopback-only network
 * namespace as root (`mse_test.ts` re-executes this file there).
 */
import assert from "node:assert/strict";
import type { Page } from "playwright-core";
// Importing the package's manifest makes Deno install the package (and so its bundle).
import websdkPackage from "@flashphoner/websdk/package.json" with { type: "json" };
import { publishRtmp, stopPublisher } from "../helpers/ffmpeg_rtmp.ts";
import { startTestServer, type TestServer } from "../helpers/test_server.ts";
import { startBrowser } from "./browser.ts";
import { netnsEnv } from "./netns.ts";
import { call } from "./webrtc_driver.ts";

/** Longest wait for a state in the page, in ms. */
const pageWaitMs = 20_000;

/** What the MSE player's `<video>` shows: its clock, size and decoded bytes per kind. */
interface MseVideo {
  found: boolean;
  currentTime: number;
  width: number;
  height: number;
  /** Chromium's webkitAudioDecodedByteCount: audio reached the decoder. */
  audioBytes: number;
  videoBytes: number;
}

function mseVideo(page: Page, key: string): Promise<MseVideo> {
  return page.evaluate((key) => {
    /** The fields of an HTMLVideoElement read here (no DOM types in Deno). */
    type Video = {
      currentTime: number;
      videoWidth: number;
      videoHeight: number;
      webkitAudioDecodedByteCount?: number;
      webkitVideoDecodedByteCount?: number;
    };
    const streams = (globalThis as unknown as {
      streams: Record<string, { display: { querySelector(s: string): Video | null } }>;
    }).streams;
    const video = streams[key].display.querySelector("video");
    if (!video) {
      return { found: false, currentTime: 0, width: 0, height: 0, audioBytes: 0, videoBytes: 0 };
    }
    return {
      found: true,
      currentTime: video.currentTime,
      width: video.videoWidth,
      height: video.videoHeight,
      audioBytes: video.webkitAudioDecodedByteCount ?? 0,
      videoBytes: video.webkitVideoDecodedByteCount ?? 0,
    };
  }, key);
}

function lastStatus(page: Page, key: string): Promise<{ status: string; info: string }> {
  return page.evaluate((key) => {
    const r = (globalThis as unknown as {
      streams: Record<string, { lastStatus: { status: string; info: string } }>;
    }).streams[key];
    return r.lastStatus;
  }, key);
}

async function waitUntil(what: string, check: () => Promise<boolean>, timeoutMs = pageWaitMs) {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

async function find(server: TestServer, filter: Record<string, unknown>) {
  const res = await server.post("/stream/find", filter);
  assert.equal(res.status, 200);
  return await res.json() as Record<string, unknown>[];
}

/**
 * Plays `name` with the MSE provider as stream `key` and checks what a viewer sees: PLAYING,
 * the video's clock advancing 2 s, audio decoded, the picture's size; then stops it.
 */
async function playMse(
  page: Page,
  server: TestServer,
  name: string,
  key: string,
  size: [number, number],
): Promise<void> {
  const played = await call<{ status: string; info: string }>(
    page,
    "startStream",
    "s",
    key,
    "play",
    { name, mediaProvider: "MSE" },
    ["PLAYING", "FAILED", "STOPPED"],
  );
  assert.equal(played.status, "PLAYING", played.info);
  const [record] = await find(server, { name, published: false });
  assert.equal(record.mediaProvider, "MSE");
  assert.equal(record.status, "PLAYING");
  await waitUntil("the video's clock to start", async () => {
    const v = await mseVideo(page, key);
    return v.found && v.currentTime > 0;
  });
  const before = await mseVideo(page, key);
  await waitUntil(
    "2 s of playback",
    async () => (await mseVideo(page, key)).currentTime >= before.currentTime + 2,
  );
  const after = await mseVideo(page, key);
  assert.ok(after.audioBytes > 0, `audio decoded: ${JSON.stringify(after)}`);
  assert.ok(after.audioBytes > before.audioBytes, `audio goes on: ${JSON.stringify(after)}`);
  assert.ok(after.videoBytes > before.videoBytes, `video goes on: ${JSON.stringify(after)}`);
  assert.deepEqual([after.width, after.height], size);
  await call(page, "callStream", key, "stop");
  await waitUntil(
    `${key} STOPPED`,
    async () => (await lastStatus(page, key)).status === "STOPPED",
  );
  await waitUntil(
    "the MSE play's end",
    async () => (await find(server, { name, published: false })).length === 0,
  );
}

Deno.test("Web SDK MSE player in Chromium", async (t) => {
  if (Deno.env.get(netnsEnv) !== "1") {
    throw new Error(`run through tests/e2e/mse_test.ts (needs a loopback-only netns)`);
  }
  assert.equal(websdkPackage.version, "2.0.276");
  const server = await startTestServer();
  const browser = await startBrowser(
    "mse-chromium-",
    new URL("./webrtc_page.html", import.meta.url),
  );
  try {
    const page = await browser.open();
    await call(page, "openSession", "s", server.wsUrl);

    await t.step("an RTMP stream (ffmpeg, H.264 + AAC) plays with MSE", async () => {
      const publisher = publishRtmp(`rtmp://127.0.0.1:${server.rtmpPort}/live/msecam`, 60);
      try {
        await waitUntil(
          "the RTMP stream",
          async () => (await find(server, { name: "msecam" })).length > 0,
        );
        await playMse(page, server, "msecam", "mse-rtmp", [640, 360]);
      } finally {
        await stopPublisher(publisher);
      }
    });

    await t.step("a WebRTC stream (fake camera, H.264 + Opus) plays with MSE", async () => {
      const published = await call<{ status: string; info: string }>(
        page,
        "startStream",
        "s",
        "webcam",
        "publish",
        { name: "webcam", constraints: { audio: true, video: { width: 640, height: 480 } } },
        ["PUBLISHING", "FAILED", "UNPUBLISHED"],
      );
      assert.equal(published.status, "PUBLISHING", published.info);
      const [source] = await find(server, { name: "webcam", published: true });
      assert.equal(source.videoCodec, "H264");
      assert.equal(source.audioCodec, "OPUS");
      await playMse(page, server, "webcam", "mse-webrtc", [640, 480]);
      await call(page, "callStream", "webcam", "stop");
      await waitUntil(
        "the WebRTC stream's end",
        async () => (await find(server, {})).length === 0,
      );
    });
  } finally {
    await browser.close();
    await server.stop();
  }
});
