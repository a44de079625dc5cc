/**
 * WHIP and WHEP with real clients: headless Chromium with npm `whip-whep` 1.2.0 (publish and
 * play, cross-origin, so CORS and the exposed `Location` are exercised), the Web SDK playing
 * the WHIP stream, aiortc (Debian python3-aiortc) publishing, and Chromium publishing and
 * playing with `?transport=tcp` (ICE-TCP) while nftables drops every UDP packet (needs `nft`).
 * Meant to run inside a loopback-only network namespace as root; `whip_test.ts` re-executes
 * this file there.
 */
import assert from "node:assert/strict";
import { createSocket } from "node:dgram";
import { createRequire } from "node:module";
import type { Page } from "playwright-core";
// Importing the manifests makes Deno install the packages (and so the browser modules).
import whipWhepPackage from "whip-whep/package.json" with { type: "json" };
import websdkPackage from "@flashphoner/websdk/package.json" with { type: "json" };
import type { StreamRecord } from "../../core/records.ts";
import { makeClip } from "../helpers/media_fixtures.ts";
import { startTestServer, testConfig, type TestServer } from "../helpers/test_server.ts";
import { startBrowser } from "./browser.ts";
import { netnsEnv } from "./netns.ts";
import { nft } from "./nft.ts";

/** The nftables table that drops UDP during the ICE-TCP step. */
const udpBlockTable = "whip_udp_block";

/** Longest wait for a state in the page or the server, in ms. */
const waitMs = 15_000;

interface PlayStats {
  state: string;
  width: number;
  height: number;
  framesDecoded: number;
  audioPackets: number;
}

type PageGlobals = {
  whipPublish(url: string): Promise<string>;
  whipStop(): Promise<void>;
  whepPlay(key: string, url: string): Promise<string>;
  playStats(key: string): Promise<PlayStats>;
  sdkPlay(wsUrl: string, name: string): Promise<{ status: string; info: string }>;
  sdkFrames(): number;
  pageReady: boolean;
};
const g = globalThis as unknown as PageGlobals;

async function until<T>(read: () => Promise<T>, ok: (value: T) => boolean, what: string) {
  const deadline = Date.now() + waitMs;
  for (;;) {
    const value = await read();
    if (ok(value)) return value;
    if (Date.now() > deadline) {
      throw new Error(`timed out waiting for ${what}: ${JSON.stringify(value)}`);
    }
    await new Promise((r) => setTimeout(r, 200));
  }
}

async function streams(server: TestServer): Promise<StreamRecord[]> {
  return await (await server.post("/stream/find_all")).json();
}

/** Waits until the WHEP player `key` decoded `frames` frames of a picture and got audio. */
function decoding(page: Page, key: string, frames: number): Promise<PlayStats> {
  return until(
    () => page.evaluate((key) => g.playStats(key), key),
    (s) => s.framesDecoded >= frames && s.width > 0 && s.audioPackets > 20,
    `WHEP player ${key} decoding`,
  );
}

Deno.test("WHIP/WHEP with whip-whep in Chromium, the Web SDK and aiortc", async (t) => {
  if (Deno.env.get(netnsEnv) !== "1") {
    throw new Error(`run through tests/e2e/whip_test.ts (needs a loopback-only netns)`);
  }
  assert.equal(whipWhepPackage.version, "1.2.0");
  assert.equal(websdkPackage.version, "2.0.276");
  const require = createRequire(import.meta.url);
  const files = {
    "/whip.js": await Deno.readFile(require.resolve("whip-whep/whip.js")),
    "/whep.js": await Deno.readFile(require.resolve("whip-whep/whep.js")),
  };
  const config = testConfig();
  await Deno.mkdir(config.folders.media, { recursive: true });
  await makeClip(`${config.folders.media}/clip.mp4`, { seconds: 20, audio: "aac" });
  const server = await startTestServer(config);
  const browser = await startBrowser(
    "whip-chromium-",
    new URL("./whip_page.html", import.meta.url),
    files,
  );
  try {
    // Opened here rather than by `browser.open`: the listeners must be on before it loads.
    const page = await browser.context.newPage();
    // whip-whep trickles candidates in the background; a refused PATCH surfaces here.
    const pageErrors: string[] = [];
    const patches: number[] = [];
    page.on("pageerror", (err) => pageErrors.push(err.message));
    page.on("response", (res) => {
      const path = new URL(res.url()).pathname;
      if (res.request().method() === "PATCH") patches.push(res.status());
      if (res.status() >= 400 && path !== "/favicon.ico") {
        pageErrors.push(`${res.request().method()} ${path}: ${res.status()}`);
      }
    });
    await page.goto(`${browser.origin}/`);
    await page.waitForFunction(() => g.pageReady === true);

    await t.step("Chromium publishes over WHIP (whip-whep): a stream with its codecs", async () => {
      const state = await page.evaluate((url) => g.whipPublish(url), `${server.restUrl}/whip/cam`);
      assert.equal(state, "connected");
      const list = await until(
        () => streams(server),
        (list) => list.some((s) => s.name === "cam" && s.status === "PUBLISHING"),
        "cam PUBLISHING",
      );
      const cam = list.find((s) => s.name === "cam")!;
      assert.equal(cam.mediaProvider, "WebRTC");
      assert.ok(["VP8", "H264"].includes(cam.videoCodec), cam.videoCodec);
      assert.equal(cam.audioCodec, "OPUS");
    });

    await t.step("Chromium plays the WHIP stream over WHEP: frames decode", async () => {
      const state = await page.evaluate(
        (url) => g.whepPlay("w1", url),
        `${server.restUrl}/whep/cam`,
      );
      assert.equal(state, "connected");
      const stats = await decoding(page, "w1", 30);
      assert.deepEqual([stats.width, stats.height], [640, 360]);
      console.log(`bench: WHIP->WHEP in Chromium: ${JSON.stringify(stats)}`);
    });

    await t.step("the Web SDK plays the WHIP stream", async () => {
      const result = await page.evaluate((url) => g.sdkPlay(url, "cam"), server.wsUrl);
      assert.equal(result.status, "PLAYING", result.info);
      await until(() => page.evaluate(() => g.sdkFrames()), (n) => n > 10, "SDK video frames");
    });

    await t.step("DELETE (whipClient.stop) ends the stream and its players", async () => {
      await page.evaluate(() => g.whipStop());
      await until(() => streams(server), (list) => list.length === 0, "no streams left");
      await until(
        () => Promise.resolve(server.services.whip.size),
        (n) => n === 0,
        "WHEP session gone",
      );
    });

    await t.step("no page errors: every trickle PATCH of whip-whep was taken", () => {
      assert.deepEqual(pageErrors, []);
      assert.ok(patches.length > 0 && patches.every((s) => s === 204), `PATCH ${patches}`);
    });

    await t.step("Chromium plays a VOD file (H.264 + AAC as Opus) over WHEP", async () => {
      const started = await server.post("/vod/startup", {
        uri: "vod-live://clip.mp4",
        localStreamName: "film",
      });
      assert.equal(started.status, 200);
      await started.body?.cancel();
      const state = await page.evaluate(
        (url) => g.whepPlay("v", url),
        `${server.restUrl}/whep/film`,
      );
      assert.equal(state, "connected");
      const stats = await decoding(page, "v", 30);
      assert.deepEqual([stats.width, stats.height], [320, 240]);
      await (await server.post("/vod/terminate", {
        uri: "vod-live://clip.mp4",
        localStreamName: "film",
      }))
        .body?.cancel();
      await until(() => streams(server), (list) => list.length === 0, "no streams left");
    });

    await t.step("aiortc publishes over WHIP; Chromium plays it over WHEP", async () => {
      const child = new Deno.Command("/usr/bin/python3", {
        args: [
          new URL("../peers/whip_aiortc.py", import.meta.url).pathname,
          `${server.restUrl}/whip/py`,
          "6",
        ],
        stdout: "piped",
        stderr: "piped",
      }).spawn();
      const output = child.output();
      try {
        const list = await until(
          () => streams(server),
          (list) => list.some((s) => s.name === "py" && s.status === "PUBLISHING"),
          "py PUBLISHING",
        );
        const py = list.find((s) => s.name === "py")!;
        assert.equal(py.mediaProvider, "WebRTC");
        assert.equal(py.videoCodec, "VP8");
        const state = await page.evaluate(
          (url) => g.whepPlay("w2", url),
          `${server.restUrl}/whep/py`,
        );
        assert.equal(state, "connected");
        const stats = await decoding(page, "w2", 30);
        assert.deepEqual([stats.width, stats.height], [320, 240]);
      } finally {
        const { code, stdout, stderr } = await output;
        const text = new TextDecoder().decode(stdout);
        assert.equal(code, 0, `${text}\n${new TextDecoder().decode(stderr).slice(-2000)}`);
        const lines = text.trim().split("\n").map((l) => JSON.parse(l));
        assert.equal(lines[0].post, 201, text);
        assert.deepEqual(lines[1], { delete: 200 });
      }
      await until(() => streams(server), (list) => list.length === 0, "no streams left");
    });

    await t.step(
      "?transport=tcp: Chromium publishes over WHIP and plays over WHEP on ICE-TCP with UDP dropped by nftables",
      async () => {
        // A page of its own: the earlier players' peer connections, left open, would go on
        // sending their consent checks over UDP.
        await page.close();
        const tcpPage = await browser.context.newPage();
        await tcpPage.goto(`${browser.origin}/`);
        await tcpPage.waitForFunction(() => g.pageReady === true);
        // Every UDP packet in the namespace is dropped while the step runs: a candidate pair
        // on UDP could not carry a byte.
        await nft("add", "table", "inet", udpBlockTable);
        await nft(
          ...["add", "chain", "inet", udpBlockTable, "out"],
          "{ type filter hook output priority 0; }",
        );
        await nft(
          ...["add", "rule", "inet", udpBlockTable, "out"],
          ...["meta", "l4proto", "udp", "counter", "drop"],
        );
        let udpDropped = NaN;
        try {
          // One datagram of our own proves the rule drops.
          const probe = createSocket("udp4");
          await new Promise<void>((resolve) =>
            probe.send(new Uint8Array(4), 9, "127.0.0.1", () => resolve())
          );
          await new Promise<void>((resolve) => probe.close(() => resolve()));
          const published = await tcpPage.evaluate(
            (url) => g.whipPublish(url),
            `${server.restUrl}/whip/cam-tcp?transport=tcp`,
          );
          assert.equal(published, "connected");
          const played = await tcpPage.evaluate(
            (url) => g.whepPlay("t", url),
            `${server.restUrl}/whep/cam-tcp?transport=tcp`,
          );
          assert.equal(played, "connected");
          const stats = await decoding(tcpPage, "t", 30);
          assert.deepEqual([stats.width, stats.height], [640, 360]);
          const records = (await streams(server)).filter((r) => r.name === "cam-tcp");
          assert.deepEqual(records.map((r) => r.transport), ["TCP", "TCP"]);
          await tcpPage.evaluate(() => g.whipStop());
          await until(() => streams(server), (list) => list.length === 0, "no streams left");
        } finally {
          const listing = await nft("list", "table", "inet", udpBlockTable);
          await nft("delete", "table", "inet", udpBlockTable);
          udpDropped = Number(/counter packets (\d+)/.exec(listing)?.[1] ?? NaN);
        }
        // The probe only: neither Chromium nor the server sent a UDP packet.
        assert.equal(udpDropped, 1, "UDP packets dropped");
      },
    );
  } finally {
    await browser.close();
    await server.stop();
  }
});
