/**
 * The mixer seen from a browser: the real `@flashphoner/websdk` 2.0.276 in headless Chromium
 * plays a mixer's output as WCS's demo pages do (`session.createStream({name, display}).play()`)
 * and publishes `<login>#<room>` streams from the fake camera for auto-mixing. Runs inside a
 * loopback-only network namespace as root; `mixer_test.ts` re-executes this file there.
 */
import assert from "node:assert/strict";
import type { Page } from "playwright-core";
// Importing the package's manifest makes Deno install the package (and so its bundle).
import websdkPackage from "@flashphoner/websdk/package.json" with { type: "json" };
import type { MixerRecord, StreamRecord } from "../../core/records.ts";
import { createLogger } from "../../core/log.ts";
import { openPeerCount } from "../../media/protocols/webrtc/peer.ts";
import { childrenNamed } from "../helpers/children.ts";
import { makeClip, waitFor } from "../helpers/media_fixtures.ts";
import { ok } from "../helpers/rest_checks.ts";
import { startTestServer, testConfig, type TestServer } from "../helpers/test_server.ts";
import { startBrowser } from "./browser.ts";
import { netnsEnv } from "./netns.ts";
import { call, type InboundStats, type VideoStats } from "./webrtc_driver.ts";

/** Longest wait for a state in a page or on the server, in ms (the machine is loaded). */
const waitMs = 40_000;
/** How long a played mix is watched for rising counters, in ms. */
const watchMs = 2000;

/** The VOD inputs of the REST mixer: a solid colour and a tone each. */
const clips = [
  { name: "red", colour: "red", toneHz: 300, rgb: [255, 0, 0] },
  { name: "blue", colour: "blue", toneHz: 800, rgb: [0, 0, 255] },
] as const;

/**
 * The mix's size: a quarter of the default's pixels, so the mix keeps its rate inside the
 * full suite (at 1280x720 it fell to 2.5 frames/s there once).
 */
const mix = { width: 640, height: 360 } as const;
/** Two inputs in the grid layout: the centres of the left and right cells. */
const twoTiles = [[160, 180], [480, 180]] as const;

async function mixers(server: TestServer): Promise<MixerRecord[]> {
  return await (await server.post("/mixer/find_all")).json();
}

async function streamsNamed(server: TestServer, name: string): Promise<StreamRecord[]> {
  return await (await server.post("/stream/find", { name })).json();
}

/** The status a page's stream reached, as webrtc_page.html recorded it. */
function statuses(page: Page, key: string): Promise<string[]> {
  return page.evaluate(
    (key) =>
      (globalThis as unknown as { streams: Record<string, { statuses: string[] }> })
        .streams[key].statuses,
    key,
  );
}

/** Largest per-channel distance between two colours. */
function colourDistance(a: readonly number[], b: readonly number[]): number {
  return Math.max(...a.map((v, i) => Math.abs(v - b[i])));
}

/**
 * Plays `name` on `page` through the SDK and asserts what a viewer gets: PLAYING, the
 * `<video>` at the mix's size with rising decoded and presented frame counts, inbound-rtp
 * frames decoded at that size and Opus audio above silence. Returns the stats seen at the end.
 */
async function playMix(page: Page, name: string): Promise<{ after: InboundStats }> {
  const played = await call<{ status: string; info: string }>(
    page,
    "startStream",
    "s",
    name,
    "play",
    { name },
    ["PLAYING", "FAILED", "STOPPED"],
  );
  assert.equal(played.status, "PLAYING", played.info);
  await waitFor("the first decoded frame at the mix's size", async () => {
    const video = await call<VideoStats>(page, "videoStats", name);
    return video.found && video.width === mix.width && video.height === mix.height &&
        video.totalFrames > 0
      ? true
      : undefined;
  }, waitMs);
  const before = await call<InboundStats>(page, "inboundStats", name);
  const videoBefore = await call<VideoStats>(page, "videoStats", name);
  await new Promise((r) => setTimeout(r, watchMs));
  const after = await call<InboundStats>(page, "inboundStats", name);
  const videoAfter = await call<VideoStats>(page, "videoStats", name);
  const seen = JSON.stringify({ before, after, videoBefore, videoAfter });
  const perSecond = (a: number, b: number) => ((a - b) * 1000 / watchMs).toFixed(1);
  // RMS over the window (W3C webrtc-stats: energy is the sum of level^2 x duration): the
  // level at one moment may fall between the fake microphone's beeps.
  const meanLevel = Math.sqrt(
    (after.audioEnergy - before.audioEnergy) /
      Math.max(after.audioDurationSec - before.audioDurationSec, 1e-9),
  );
  console.log(
    `bench: ${name} in Chromium: ${
      perSecond(after.framesDecoded, before.framesDecoded)
    } frames/s decoded, ${
      perSecond(videoAfter.presentedFrames, videoBefore.presentedFrames)
    } presented, ${videoAfter.droppedFrames} dropped in all, ${
      perSecond(after.audioPackets, before.audioPackets)
    } audio packets/s, audio level ${meanLevel.toFixed(3)} (mean over the window)`,
  );
  // 10 fps for 2 s is 20 frames; the full suite's load leaves fewer, a stalled mix none.
  assert.ok(after.framesDecoded > before.framesDecoded + 6, seen);
  assert.deepEqual([after.frameWidth, after.frameHeight], [mix.width, mix.height], seen);
  assert.deepEqual([videoAfter.width, videoAfter.height, videoAfter.paused], [
    mix.width,
    mix.height,
    false,
  ]);
  assert.ok(videoAfter.totalFrames > videoBefore.totalFrames + 6, seen);
  assert.ok(videoAfter.presentedFrames > videoBefore.presentedFrames + 6, seen);
  assert.equal(after.audioMime, "audio/opus", seen);
  // Opus in 20 ms packets: 100 in 2 s.
  assert.ok(after.audioPackets > before.audioPackets + 50, seen);
  assert.ok(after.audioSamples > before.audioSamples + 48_000 * 1.5, seen);
  assert.ok(meanLevel > 0.01, `mean level ${meanLevel}: ${seen}`);
  return { after };
}

/** Waits until no mixer, decoder, ffmpeg child or WebRTC peer of a scenario is left. */
async function assertAllReleased(server: TestServer): Promise<void> {
  const left = () => ({
    mixers: server.services.mixers.list().length,
    decoders: server.services.decoders.decoders,
    ffmpeg: childrenNamed("ffmpeg"),
    peers: openPeerCount(),
  });
  try {
    await waitFor("every mixer resource released", () => {
      const now = left();
      return Object.values(now).every((n) => n === 0) ? true : undefined;
    }, waitMs);
  } catch (err) {
    throw new Error(`${(err as Error).message}: ${JSON.stringify(left())}`);
  }
}

Deno.test("the mixer in Chromium with the Web SDK", async (t) => {
  if (Deno.env.get(netnsEnv) !== "1") {
    throw new Error(`run through tests/e2e/mixer_test.ts (needs a loopback-only netns)`);
  }
  assert.equal(websdkPackage.version, "2.0.276");
  // 10 fps: a third of the default's encoding, so the mix keeps up inside the full suite.
  const config = testConfig({ mixer: { autoMixing: true, fps: 10, ...mix } });
  await Deno.mkdir(config.folders.media, { recursive: true });
  await Promise.all(clips.map((clip) =>
    makeClip(`${config.folders.media}/${clip.name}.mp4`, {
      seconds: 60,
      width: 320,
      height: 180,
      source: `color=c=${clip.colour}`,
      audio: "aac",
      toneHz: clip.toneHz,
    })
  ));
  // Warnings and errors of the server, shown with the output of a failed run.
  const server = await startTestServer(
    config,
    createLogger({ level: "warn", write: (line) => console.error(`server: ${line}`) }),
  );
  const browser = await startBrowser(
    "mixer-chromium-",
    new URL("./webrtc_page.html", import.meta.url),
  );
  try {
    // Page A publishes, page B plays.
    const [a, b] = [await browser.open(), await browser.open()];
    for (const page of [a, b]) await call(page, "openSession", "s", server.wsUrl);

    await t.step("a mixer of two VOD inputs plays at 640x360 with both tiles", async () => {
      await ok(server, "/mixer/startup", { uri: "mixer://m1", localStreamName: "mix" });
      for (const clip of clips) {
        await ok(server, "/vod/startup", {
          uri: `vod-live://${clip.name}.mp4`,
          localStreamName: clip.name,
        });
        await ok(server, "/mixer/add", { uri: "mixer://m1", remoteStreamName: clip.name });
      }
      await waitFor("the mix flowing", async () => {
        const [mix] = await streamsNamed(server, "mix");
        return mix && mix.fps > 0 ? true : undefined;
      }, waitMs);
      await playMix(b, "mix");
      // Each input's colour where the grid puts it, in the picture the browser decoded.
      let colours: number[][] = [];
      try {
        await waitFor("red and blue tiles in the played picture", async () => {
          colours = await call<number[][]>(b, "videoColours", "mix", twoTiles);
          return clips.every((clip, i) => colourDistance(colours[i], clip.rgb) < 40)
            ? true
            : undefined;
        }, waitMs);
      } catch (err) {
        throw new Error(`${(err as Error).message}: ${JSON.stringify(colours)}`);
      }
      const [player] = (await streamsNamed(server, "mix")).filter((s) => !s.published);
      assert.deepEqual([player?.status, player?.mediaType], ["PLAYING", "play"]);

      await ok(server, "/mixer/terminate", { uri: "mixer://m1" });
      await waitFor(
        "the player STOPPED",
        async () => (await statuses(b, "mix")).includes("STOPPED") ? true : undefined,
        waitMs,
      );
      for (const clip of clips) {
        const [vod] = await streamsNamed(server, clip.name);
        await ok(server, "/stream/terminate", { mediaSessionId: vod.mediaSessionId });
      }
      await assertAllReleased(server);
    });

    await t.step(
      "auto-mixing: alice#room1 and bob#room1 from Chromium make room1, which ends with them",
      async () => {
        const logins = ["alice", "bob"];
        for (const login of logins) {
          const key = `${login}#room1`;
          const published = await call<{ status: string; info: string }>(
            a,
            "startStream",
            "s",
            key,
            "publish",
            { name: key, constraints: { audio: true, video: { width: 640, height: 480 } } },
            ["PUBLISHING", "FAILED", "UNPUBLISHED"],
          );
          assert.equal(published.status, "PUBLISHING", `${key}: ${published.info}`);
        }
        const record = await waitFor("mixer://room1 with two inputs", async () => {
          const found = (await mixers(server)).find((m) => m.uri === "mixer://room1");
          return found?.mediaSessions.length === 2 ? found : undefined;
        }, waitMs);
        assert.equal(record.localStreamName, "room1");
        assert.deepEqual(
          record.mediaSessions.map((s) => s.localStreamName).sort(),
          ["alice#room1", "bob#room1"],
        );
        await waitFor("room1 flowing", async () => {
          const [room] = await streamsNamed(server, "room1");
          return room && room.fps > 0 ? true : undefined;
        }, waitMs);
        await playMix(b, "room1");
        // Two 320x360 cells, each with a 320x240 camera picture in its middle: the pictures
        // are not black, the letterbox above them is.
        let colours: number[][] = [];
        const points = [...twoTiles, [160, 20], [480, 20]] as const;
        try {
          await waitFor("two camera tiles in the played picture", async () => {
            colours = await call<number[][]>(b, "videoColours", "room1", points);
            const lit = colours.map((c) => Math.max(...c) > 60);
            return lit.join() === "true,true,false,false" ? true : undefined;
          }, waitMs);
        } catch (err) {
          throw new Error(`${(err as Error).message}: ${JSON.stringify(colours)}`);
        }

        const stoppedMs = Date.now();
        for (const login of logins) await call(a, "callStream", `${login}#room1`, "stop");
        await waitFor("room1 ended", async () => {
          const left = await mixers(server);
          return left.length === 0 && (await streamsNamed(server, "room1")).length === 0
            ? true
            : undefined;
        }, waitMs);
        const endedMs = Date.now() - stoppedMs;
        console.log(`bench: room1 ended ${endedMs} ms after both publishers stopped`);
        assert.ok(endedMs < 5000, `room1 ended ${endedMs} ms after its publishers stopped`);
        await waitFor(
          "the room1 player STOPPED",
          async () => (await statuses(b, "room1")).includes("STOPPED") ? true : undefined,
          waitMs,
        );
        await assertAllReleased(server);
      },
    );
  } finally {
    await browser.close();
    await server.stop();
  }
});
