/**
 * The WebRTC fan-out fast path (issue 19) with the real Web SDK in headless Chromium: page A
 * publishes (fake camera and microphone, H.264 or VP8), page B plays it through the send
 * engine (FFI SRTP and sendmmsg on the ICE mux socket), then keeps decoding while nftables
 * drops 5% of the server's media datagrams to players (the engine's retransmissions answer
 * Chromium's NACKs), and page C joining 5 s late decodes its first frame within 1.5 s (its
 * PLI reached the publisher, the keyframe came back through the engine). The same scenarios
 * run once on werift's send path (`media.sendEngine: werift`). Runs inside a loopback-only
 * network namespace as root (`fastpath_test.ts` re-executes this file there); the loss needs
 * `nft` (Debian package nftables): the kernel has no sch_netem, but nf_tables with numgen.
 */
import assert from "node:assert/strict";
import type { Page } from "playwright-core";
import { openPeerCount } from "../../media/protocols/webrtc/peer.ts";
import { EngineSendPath } from "../../media/protocols/webrtc/engine_send_path.ts";
import { WebRtcPublisher } from "../../media/providers/webrtc_publisher.ts";
import { SendEngine } from "../../media/send_engine/send_engine.ts";
import { startTestServer, testConfig, type TestServer } from "../helpers/test_server.ts";
import { startBrowser } from "./browser.ts";
import { netnsEnv } from "./netns.ts";
import { nft } from "./nft.ts";
import { call, type InboundStats, type VideoStats } from "./webrtc_driver.ts";

/** Longest wait for a state in a page, in ms. */
const pageWaitMs = 15_000;
/** Share of the server's media datagrams to players that nftables drops, in percent. */
const lossPercent = 5;
/**
 * Datagrams from the server's ICE mux port longer than this (bytes, IP header included) are
 * media to players; the server's packets to a publisher are RTCP and STUN, all shorter.
 */
const mediaMinLength = 600;
/** How late page C joins after page B started playing, in ms. */
const lateJoinMs = 5000;
/** Longest time from page C's PLAYING to its first decoded frame, in ms. */
const lateFirstFrameMs = 1500;
/** The nftables table holding the loss rule. */
const lossTable = "fastpath_loss";

async function waitUntil(what: string, check: () => Promise<boolean>, timeoutMs = pageWaitMs) {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Drops `lossPercent`% of the media datagrams sent from UDP port `port` until `stopLoss`. */
async function startLoss(port: number): Promise<void> {
  await nft("add", "table", "inet", lossTable);
  await nft(
    ...["add", "chain", "inet", lossTable, "out"],
    "{ type filter hook output priority 0; }",
  );
  await nft(
    ...["add", "rule", "inet", lossTable, "out", "udp", "sport", String(port)],
    ...["meta", "length", "gt", String(mediaMinLength)],
    ...["numgen", "random", "mod", "100", "lt", String(lossPercent), "counter", "drop"],
  );
}

/** Removes the loss rule; answers how many datagrams it dropped. */
async function stopLoss(): Promise<number> {
  const listing = await nft("list", "table", "inet", lossTable);
  await nft("delete", "table", "inet", lossTable);
  return Number(/counter packets (\d+)/.exec(listing)?.[1] ?? NaN);
}

/** Retransmissions handed to the send engine (EngineSendPath.send), by subscriber id. */
const engineResends = new Map<string, number>();

/** Counts EngineSendPath.send calls until the returned function restores it. */
function countEngineResends(): () => void {
  const send = EngineSendPath.prototype.send;
  EngineSendPath.prototype.send = function (this: EngineSendPath, packet) {
    engineResends.set(this.id, (engineResends.get(this.id) ?? 0) + 1);
    send.call(this, packet);
  };
  return () => {
    EngineSendPath.prototype.send = send;
  };
}

async function find(server: TestServer, filter: Record<string, unknown>) {
  const res = await server.post("/stream/find", filter);
  assert.equal(res.status, 200);
  return await res.json() as Record<string, unknown>[];
}

/** Datagrams the engine sent so far, by subscriber id (empty on the werift path). */
async function engineSent(server: TestServer): Promise<Map<string, number>> {
  const engine = server.services.sendPaths.engine;
  if (!engine) return new Map();
  return new Map([...(await engine.stats())].map(([id, s]) => [id, s.sent]));
}

/** Starts `name` on `page` (publish or play) and asserts it reached `expected`. */
async function start(
  page: Page,
  name: string,
  kind: "publish" | "play",
  options: Record<string, unknown>,
) {
  const expected = kind === "publish" ? "PUBLISHING" : "PLAYING";
  const result = await call<{ status: string; info: string }>(
    page,
    "startStream",
    "s",
    name,
    kind,
    { name, ...options },
    [expected, "FAILED", "STOPPED", "UNPUBLISHED"],
  );
  assert.equal(result.status, expected, `${kind} ${name}: ${result.info}`);
}

/** Page `page` decodes frames of `name` and receives audio over `spanMs`; answers the end stats. */
async function assertPlaying(page: Page, name: string, spanMs: number, label: string) {
  const before = await call<InboundStats>(page, "inboundStats", name);
  await sleep(spanMs);
  const after = await call<InboundStats>(page, "inboundStats", name);
  const video = await call<VideoStats>(page, "videoStats", name);
  const figures = JSON.stringify({ label, before, after, video });
  const frames = after.framesDecoded - before.framesDecoded;
  assert.ok(frames > (spanMs / 1000) * 5, `frames advance: ${figures}`);
  assert.ok(after.audioPackets > before.audioPackets + (spanMs / 1000) * 25, figures);
  assert.deepEqual([after.frameWidth, after.frameHeight], [640, 480], figures);
  assert.ok(video.found && video.width > 0, figures);
  return after;
}

Deno.test("WebRTC fan-out fast path with the Web SDK in Chromium", async (t) => {
  if (Deno.env.get(netnsEnv) !== "1") {
    throw new Error(`run through tests/e2e/fastpath_test.ts (needs a loopback-only netns)`);
  }
  const restoreSend = countEngineResends();
  const browser = await startBrowser(
    "fastpath-chromium-",
    new URL("./webrtc_page.html", import.meta.url),
  );
  try {
    const cases = [
      { codec: "H264", sendEngine: "ffi" },
      { codec: "VP8", sendEngine: "ffi" },
      { codec: "H264", sendEngine: "werift" },
    ] as const;
    for (const { codec, sendEngine } of cases) {
      const onEngine = sendEngine === "ffi";
      const label = `${codec} on ${sendEngine}`;
      const name = `fp-${codec}-${sendEngine}`;
      const server = await startTestServer(testConfig({ media: { sendEngine } }));
      const pages: Page[] = [];
      try {
        const mux = server.services.iceMux;
        assert.ok(mux, "the ICE mux is open (the engine sends on its socket)");
        assert.equal(server.services.sendPaths.engine !== undefined, onEngine);
        for (let i = 0; i < 3; i++) {
          const page = await browser.open();
          await call(page, "openSession", "s", server.wsUrl);
          pages.push(page);
        }
        const [a, b, c] = pages;
        let playerIds: string[] = [];
        let playingAtMs = 0;
        const publisher = () =>
          server.services.streams.list().find((s) =>
            s instanceof WebRtcPublisher && s.name === name
          ) as WebRtcPublisher;

        await t.step(`${label}: page B decodes page A's stream through the send path`, async () => {
          await start(a, name, "publish", {
            stripCodecs: codec === "VP8" ? "H264" : "",
            constraints: { audio: true, video: { width: 640, height: 480 } },
          });
          const [record] = await find(server, { name, published: true });
          assert.equal(record.videoCodec, codec);
          const idsBefore = new Set((await engineSent(server)).keys());
          await start(b, name, "play", {});
          playingAtMs = Date.now();
          await waitUntil(
            "page B's first decoded frame",
            async () => (await call<InboundStats>(b, "inboundStats", name)).framesDecoded > 0,
          );
          const sentBefore = await engineSent(server);
          await assertPlaying(b, name, 2000, label);
          const sentAfter = await engineSent(server);
          playerIds = [...sentAfter.keys()].filter((id) => !idsBefore.has(id));
          if (onEngine) {
            // One engine subscriber per track (audio, video), each sending more and more.
            assert.equal(playerIds.length, 2, JSON.stringify([...sentAfter]));
            assert.equal(server.services.sendPaths.size, 2);
            for (const id of playerIds) {
              assert.ok(
                sentAfter.get(id)! > (sentBefore.get(id) ?? 0) + 50,
                `engine subscriber ${id} sends: ${sentBefore.get(id)} -> ${sentAfter.get(id)}`,
              );
            }
          } else {
            assert.equal(server.services.sendPaths.size, 0);
            assert.equal(server.services.sendPaths.engine, undefined);
          }
        });

        await t.step(
          `${label}: ${lossPercent}% loss to players is recovered by NACK retransmissions`,
          async () => {
            const statsBefore = await call<InboundStats>(b, "inboundStats", name);
            const resentBefore = publisher().retransmittedPackets;
            const engineResentBefore = playerIds.reduce(
              (n, id) => n + (engineResends.get(id) ?? 0),
              0,
            );
            await startLoss(mux.port);
            let dropped: number;
            try {
              await waitUntil(
                "a NACK from page B answered by a retransmission",
                async () =>
                  (await call<InboundStats>(b, "inboundStats", name)).videoNacks >
                    statsBefore.videoNacks &&
                  publisher().retransmittedPackets > resentBefore,
                10_000,
              );
              // Decoding goes on while packets are still being dropped.
              await assertPlaying(b, name, 2000, `${label} under loss`);
            } finally {
              dropped = await stopLoss();
            }
            const statsAfter = await call<InboundStats>(b, "inboundStats", name);
            const resent = publisher().retransmittedPackets - resentBefore;
            const engineResent = playerIds.reduce((n, id) => n + (engineResends.get(id) ?? 0), 0) -
              engineResentBefore;
            console.log(
              `bench: ${label}: ${dropped} datagrams dropped, page B sent ` +
                `${statsAfter.videoNacks - statsBefore.videoNacks} NACKs, the server resent ` +
                `${resent} packets (${engineResent} through the engine)`,
            );
            assert.ok(dropped > 0, "nftables dropped media datagrams");
            if (onEngine) assert.ok(engineResent > 0, "retransmissions went through the engine");
            else assert.equal(engineResent, 0);
          },
        );

        await t.step(
          `${label}: page C joining ${
            lateJoinMs / 1000
          } s late decodes within ${lateFirstFrameMs} ms`,
          async () => {
            await sleep(Math.max(0, playingAtMs + lateJoinMs - Date.now()));
            const [before] = await find(server, { name, published: true, display: ["metrics"] });
            const plisBefore = (before.metrics as Record<string, number>).VIDEO_PLI;
            const idsBefore = new Set((await engineSent(server)).keys());
            await start(c, name, "play", {});
            const playingMs = Date.now();
            await waitUntil(
              "page C's first decoded frame",
              async () => (await call<InboundStats>(c, "inboundStats", name)).framesDecoded > 0,
            );
            const firstFrameMs = Date.now() - playingMs;
            console.log(
              `bench: ${label}: late joiner's first frame ${firstFrameMs} ms after PLAYING`,
            );
            assert.ok(
              firstFrameMs < lateFirstFrameMs,
              `first frame ${firstFrameMs} ms after PLAYING`,
            );
            const [after] = await find(server, { name, published: true, display: ["metrics"] });
            assert.ok(
              (after.metrics as Record<string, number>).VIDEO_PLI > plisBefore,
              "a keyframe request went to the publisher",
            );
            await assertPlaying(c, name, 1000, `${label} late joiner`);
            const sent = await engineSent(server);
            const lateIds = [...sent.keys()].filter((id) => !idsBefore.has(id));
            if (onEngine) {
              assert.equal(lateIds.length, 2, JSON.stringify([...sent]));
              for (const id of lateIds) assert.ok(sent.get(id)! > 0, `engine sends to ${id}`);
            } else assert.deepEqual(lateIds, []);
            const [record] = await find(server, { name, published: true });
            await server.post("/stream/terminate", { mediaSessionId: record.mediaSessionId })
              .then((res) => res.body?.cancel());
            await waitUntil(
              "the players to leave",
              async () => (await find(server, {})).length === 0,
            );
            assert.equal(server.services.sendPaths.size, 0, "players left the engine");
          },
        );
      } finally {
        for (const page of pages) await page.close();
        await server.stop();
      }
      assert.equal(openPeerCount(), 0);
      assert.equal(SendEngine.liveWorkers, 0, "the engine's Workers ended with the server");
    }
  } finally {
    restoreSend();
    await browser.close();
  }
});
