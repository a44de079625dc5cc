/**
 * hls.js (npm `hls.js`) in headless Chromium playing our HLS server: a VOD stream over plain
 * HLS, the same over LL-HLS in MPEG-TS and in fMP4 (hls.js in low-latency mode, its latency
 * printed as a `bench:` line), and ABR (the page's network throttled through the DevTools
 * protocol makes hls.js switch to a lower profile, and `/hls/subscribers` shows the
 * switch), and an audio group (video-only variants and an AAC rendition, `#EXT-X-MEDIA`:
 * hls.js has the audio track and decodes audio from it). Meant to run inside a
 * loopback-only network namespace as root; `hls_test.ts` re-executes this file there
 * (`deno test -A tests/e2e/hls_scenarios.ts`). One Chromium for every step, one server each.
 */
import assert from "node:assert/strict";
import type { Config } from "../../config.ts";
import { makeClip, waitFor } from "../helpers/media_fixtures.ts";
import {
  type HlsBrowser,
  type HlsPlayer,
  percentile,
  type PlayerState,
  startHlsBrowser,
} from "../helpers/hls_player.ts";
import { startTestServer, testConfig, type TestServer } from "../helpers/test_server.ts";
import { netnsEnv } from "./netns.ts";

/** Longest wait for hls.js to start playing, in ms. */
const startTimeoutMs = 20_000;
/** Complete segments the first playlists list (the server holds them back until then). */
const startSegments = { plain: 3, lowLatency: 2 };
/** How long each stream is watched for stalls, in seconds. */
const watchSec = { vod: 30, lowLatency: { ts: 20, fmp4: 10 } };
/** Source clip: what /vod/startup publishes. */
const clip = { seconds: 60, width: 640, height: 360, fps: 25 };
/** ABR profiles offered next to the source. */
const profiles = [
  { name: "p360", width: 640, height: 360, bitrateKbps: 800 },
  { name: "p180", width: 320, height: 180, bitrateKbps: 200 },
];
/** The throttled network of the ABR step: below the source and p360, above p180. */
const throttledKbps = 450;
/** Longest wait for hls.js to switch down once throttled, in ms. */
const switchTimeoutMs = 30_000;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A server of `hls` settings publishing the clip (made once, in `clipPath`) as `name`. */
async function serveClip(
  clipPath: string,
  name: string,
  hls: Record<string, unknown>,
): Promise<{ server: TestServer; masterUrl: string }> {
  const config: Config = testConfig({ hls });
  await Deno.mkdir(config.folders.media, { recursive: true });
  await Deno.copyFile(clipPath, `${config.folders.media}/clip.mp4`);
  const server = await startTestServer(config);
  try {
    const vod = await server.post("/vod/startup", {
      uri: "vod-live://clip.mp4",
      localStreamName: name,
    });
    assert.equal(vod.status, 200, await vod.text());
    const hlsStart = await server.post("/hls/startup", { name });
    assert.equal(hlsStart.status, 200, await hlsStart.text());
    const masterUrl = `http://127.0.0.1:${server.hlsPort}/${name}/${name}.m3u8`;
    await assertStartSegments(
      masterUrl,
      hls.lowLatency ? startSegments.lowLatency : startSegments.plain,
    );
    return { server, masterUrl };
  } catch (err) {
    await server.stop();
    throw err;
  }
}

/**
 * Checks that the first playlists, asked for right after the start, already list `count`
 * complete segments: hls.js starts a live stream three target durations from its end (RFC
 * 8216 6.3.3); from a shorter playlist it starts at its first segment, too near the live
 * edge: plain HLS then stalls within 30 s, and LL-HLS from a single segment re-loads that
 * segment's parts in a loop (hls.js 1.7.4). So the server holds the first answer back.
 */
async function assertStartSegments(masterUrl: string, count: number): Promise<void> {
  const master = await (await fetch(masterUrl)).text();
  const variants = master.split("\n").filter((l) => l.trim() && !l.startsWith("#"));
  assert.ok(variants.length > 0, master);
  for (const variant of variants) {
    const res = await fetch(new URL(variant.trim(), masterUrl));
    const text = await res.text();
    assert.ok(res.ok && (text.match(/#EXTINF/g) ?? []).length >= count, text);
  }
}

/**
 * Watches `player` for `seconds`: every second its video must have moved on, with no
 * fatal hls.js error and at most `maxStalls` `waiting` events after playback began. Returns
 * the last state.
 */
async function watch(player: HlsPlayer, seconds: number, maxStalls = 0): Promise<PlayerState> {
  let last = await player.state();
  const first = last;
  for (let i = 0; i < seconds; i++) {
    await sleep(1000);
    const now = await player.state();
    assert.ok(
      now.currentTime > last.currentTime,
      `playback stopped at ${now.currentTime} s (second ${i + 1}): ${JSON.stringify(now)}`,
    );
    assert.deepEqual(now.errors.filter((e) => e.fatal), [], JSON.stringify(now.errors));
    assert.ok(now.waitingAfterStart <= maxStalls, `stalled: ${JSON.stringify(now)}`);
    last = now;
  }
  const advanced = last.currentTime - first.currentTime;
  assert.ok(advanced > seconds * 0.9, `played ${advanced} s of media in ${seconds} s`);
  const frames = last.totalVideoFrames - first.totalVideoFrames;
  assert.ok(frames >= advanced * clip.fps * 0.9, `${frames} frames decoded in ${advanced} s`);
  return last;
}

Deno.test("hls.js in Chromium plays our HLS, LL-HLS and ABR profiles", async (t) => {
  if (Deno.env.get(netnsEnv) !== "1") {
    throw new Error(`run through tests/e2e/hls_test.ts (needs a loopback-only netns)`);
  }
  const dir = await Deno.makeTempDir({ prefix: "hls-e2e-" });
  const clipPath = `${dir}/clip.mp4`;
  await makeClip(clipPath, { ...clip, audio: "aac", gop: clip.fps });
  let browser: HlsBrowser | undefined;
  try {
    browser = await startHlsBrowser();
    const b = browser;

    await t.step("VOD over HLS: hls.js decodes every frame, no stall over 30 s", async () => {
      const { server, masterUrl } = await serveClip(clipPath, "vod1", {});
      const player = await b.newPlayer();
      try {
        await withTimeout(player.play(masterUrl, { lowLatencyMode: false }), "playing");
        const state = await watch(player, watchSec.vod);
        assert.equal(state.videoWidth, clip.width);
        assert.equal(state.videoHeight, clip.height);
        assert.equal(state.partsLoaded, 0, "plain HLS has no parts");
        assert.ok(state.fragsLoaded >= 10, `${state.fragsLoaded} segments loaded`);
      } finally {
        await player.close();
        await server.stop();
      }
    });

    for (const container of ["ts", "fmp4"] as const) {
      await t.step(
        `LL-HLS (${container}): hls.js in low-latency mode, loads parts; latency`,
        async () => {
          const { server, masterUrl } = await serveClip(clipPath, `ll-${container}`, {
            lowLatency: true,
            container,
          });
          const player = await b.newPlayer();
          try {
            await withTimeout(player.play(masterUrl, { lowLatencyMode: true }), "playing");
            const latencies: number[] = [];
            const lags: number[] = [];
            let state = await player.state();
            for (let i = 0; i < watchSec.lowLatency[container]; i += 5) {
              state = await watch(player, 5);
              latencies.push(state.latency);
              lags.push(state.programDateLagMs);
            }
            assert.equal(state.lowLatencyMode, true);
            assert.ok(
              state.partsLoaded > 0,
              `hls.js loaded no LL-HLS part: ${JSON.stringify(state)}`,
            );
            assert.equal(state.videoWidth, clip.width);
            const latency = percentile(latencies, 50);
            console.log(
              `bench: LL-HLS (${container}) hls.js latency p50 ${latency.toFixed(2)} s (target ${
                state.targetLatency.toFixed(2)
              } s), wall clock - program date of the playhead p50 ${
                percentile(lags, 50).toFixed(0)
              } ms, ${state.partsLoaded} parts and ${state.fragsLoaded} segments loaded`,
            );
            // Sane: the live edge is neither behind nor more than a few part-segments away.
            assert.ok(latency > 0 && latency < 4, `hls.js latency ${latency} s`);
            assert.ok(state.targetLatency > 0 && state.targetLatency < 6, `${state.targetLatency}`);
          } finally {
            await player.close();
            await server.stop();
          }
        },
      );
    }

    await t.step(
      "ABR: throttled, hls.js switches to a lower profile; /hls/subscribers shows it",
      async () => {
        const { server, masterUrl } = await serveClip(clipPath, "abr1", { profiles });
        const player = await b.newPlayer();
        const cdp = await b.context.newCDPSession(player.page);
        try {
          // Start on the top level with a high estimate, so only the throttle brings it down.
          await withTimeout(
            player.play(masterUrl, {
              lowLatencyMode: false,
              startLevel: profiles.length,
              abrEwmaDefaultEstimate: 50_000_000,
            }),
            "playing",
          );
          // The step is about switching: with two profiles being encoded next to Chromium
          // on a loaded 2-core machine, one short stall at the start is tolerated here (the
          // VOD step allows none).
          const before = await watch(player, 6, 1);
          assert.equal(before.levels.length, profiles.length + 1, JSON.stringify(before.levels));
          const top = before.levels.length - 1;
          assert.equal(before.currentLevel, top, JSON.stringify(before));
          assert.equal(before.levels[top].height, clip.height);
          await cdp.send("Network.enable");
          await cdp.send("Network.emulateNetworkConditions", {
            offline: false,
            latency: 20,
            downloadThroughput: throttledKbps * 1000 / 8,
            uploadThroughput: throttledKbps * 1000 / 8,
          });
          const switched = await waitFor(
            "hls.js to switch down",
            async () => {
              const s = await player.state();
              return s.levelSwitches.some((l) => l.level < top) ? s : undefined;
            },
            switchTimeoutMs,
          );
          const lower = switched.levelSwitches.find((l) => l.level < top)!;
          assert.ok(lower.height < clip.height, JSON.stringify(switched.levelSwitches));

          const [record] = await (await server.post("/hls/find_all", { offset: 0, size: 10 }))
            .json() as { id: string; streamName: string }[];
          assert.equal(record.streamName, "abr1");
          const viewer = await waitFor("the switch in /hls/subscribers", async () => {
            const subscribers = await (await server.post("/hls/subscribers", { hlsId: record.id }))
              .json() as {
                userAgent: string;
                metrics: { profileSwitches: number; profileTime: Record<string, number> };
              }[];
            return subscribers.find((s) =>
              /Chrome/.test(s.userAgent) && s.metrics.profileSwitches >= 1
            );
          });
          assert.ok(
            Object.keys(viewer.metrics.profileTime).length >= 2,
            JSON.stringify(viewer.metrics),
          );
        } finally {
          await cdp.detach().catch(() => {});
          await player.close();
          await server.stop();
        }
      },
    );
    await t.step(
      "audio group: video-only variants and an AAC rendition; hls.js plays both",
      async () => {
        const { server, masterUrl } = await serveClip(clipPath, "group1", {
          profiles: [{ ...profiles[1], audioGroup: "aac" }],
          audioRenditions: [{ name: "aac96", group: "aac", bitrateKbps: 96 }],
          sourceAudioGroup: "aac",
        });
        const player = await b.newPlayer();
        try {
          await withTimeout(player.play(masterUrl, { lowLatencyMode: false }), "playing");
          // One stall at the start tolerated, as in the ABR step (a profile encodes beside).
          const state = await watch(player, 10, 1);
          assert.deepEqual(state.audioTracks, [{ name: "aac96", groupId: "aac" }]);
          assert.equal(state.audioTrack, 0);
          assert.ok(state.audioFragsLoaded >= 3, JSON.stringify(state));
          assert.ok(state.audioDecodedBytes > 0, `${state.audioDecodedBytes} audio bytes decoded`);
          assert.equal(state.videoWidth, clip.width);
        } finally {
          await player.close();
          await server.stop();
        }
      },
    );
  } finally {
    await browser?.close();
    await Deno.remove(dir, { recursive: true });
  }
});

/** `promise`, or a rejection naming `what` after startTimeoutMs. */
async function withTimeout<T>(promise: Promise<T>, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    return await Promise.race([
      promise,
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`hls.js not ${what} in time`)), startTimeoutMs);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}
