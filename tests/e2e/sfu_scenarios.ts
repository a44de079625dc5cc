/**
 * The SFU SDK (tests/peers/sfusdk/sfusdk.js, WCS's `@flashphoner/sfusdk`) in three
 * Chromium pages joining one room, each publishing the fake camera in three simulcast layers
 * and the microphone: each page decodes the other two participants' video (size known, frames
 * advancing) and audio (samples decoded); `/sfu/stats` lists the three, each with a composite
 * video of three live, measured layers; `changeQuality` of one subscriber moves its decoded
 * size to the low layer and back within 2 s (TRACK_QUALITY_STATE told it which layers are
 * alive); a wrong pin and a used nickname are refused; an evicted participant, a page closed
 * without leaving and a leave each take their tracks from the others; a Web SDK (defaultApp)
 * page publishes and plays a stream on the same server throughout. Runs inside a
 * loopback-only network namespace as root; `sfu_test.ts` re-executes this file there.
 */
import assert from "node:assert/strict";
import type { Page } from "playwright-core";
import { waitFor } from "../helpers/media_fixtures.ts";
import { startTestServer, testConfig } from "../helpers/test_server.ts";
import { call, startBrowser } from "./browser.ts";
import { netnsEnv } from "./netns.ts";
import { call as callWebSdk, type InboundStats } from "./webrtc_driver.ts";

/** Longest wait for a state in a page or on the server, in ms (the machine is loaded). */
const waitMs = 30_000;
/** How long received media is watched for advancing frames and samples, in ms. */
const watchMs = 1500;
const room = "sfu-room";
const pin = "1234";

/** What sfu_page.html's `received` resolves with, by "<nickname> <VIDEO|AUDIO>". */
type Received = Record<
  string,
  { content: string; width?: number; frames?: number; samples?: number }
>;

/** True when `r` has a decoded picture or decoded audio samples. */
function decoding(r: Received[string] | undefined): boolean {
  if (!r) return false;
  return r.width !== undefined ? r.width > 0 && (r.frames ?? 0) > 0 : (r.samples ?? 0) > 0;
}

/**
 * Waits until `page` decodes the camera and mic of every one of `from`, then asserts that the
 * frames and samples advance.
 */
async function assertReceives(page: Page, key: string, from: string[]): Promise<void> {
  const keys = from.flatMap((n) => [`${n} VIDEO`, `${n} AUDIO`]);
  let last: Received = {};
  const before = await waitFor(`${key} decoding ${keys.join(", ")}`, async () => {
    last = await call<Received>(page, "received");
    return keys.every((k) => decoding(last[k])) ? last : undefined;
  }, waitMs).catch((err) => {
    throw new Error(`${err.message}; received ${JSON.stringify(last)}`);
  });
  assert.deepEqual(Object.keys(before).sort(), keys.sort(), `${key} receives only the others`);
  await new Promise((r) => setTimeout(r, watchMs));
  const after = await call<Received>(page, "received");
  for (const n of from) {
    const video = `${n} VIDEO`;
    const audio = `${n} AUDIO`;
    assert.equal(after[video].content, "camera");
    assert.equal(after[audio].content, "mic");
    assert.ok(after[video].frames! > before[video].frames!, `${key}: ${n}'s video stands`);
    assert.ok(after[audio].samples! > before[audio].samples!, `${key}: ${n}'s audio stands`);
  }
}

/** The fake camera as every SFU page opens it: small, so three pages encode three layers each. */
const capture = { width: 640, height: 360, frameRate: 15 };
/**
 * Each page's simulcast layers (640x360, 320x180, 160x90), above Chromium's starting bandwidth
 * estimate (300 kbit/s): the server's REMB (sfu.maxPublishBitrateKbps) lets it rise.
 */
const simulcast = [
  { rid: "h", maxBitrate: 900_000 },
  { rid: "m", maxBitrate: 300_000, scaleResolutionDownBy: 2 },
  { rid: "l", maxBitrate: 100_000, scaleResolutionDownBy: 4 },
];
/**
 * Chromium limits the simulcast layers by the input size (three from 960x540 up); this field
 * trial lifts the limit so a 640x360 camera sends all three.
 */
const chromiumSimulcastArgs = ["--force-fieldtrials=WebRTC-LegacySimulcastLayerLimit/Disabled/"];
/** The server's pings: a participant whose connection goes silent leaves after 3 missed. */
const keepAlive = { intervalMs: 2000, probes: 3 };
const pingTimeoutMs = keepAlive.intervalMs * keepAlive.probes;

type Track = Record<string, unknown>;
type Stats = {
  participants: {
    nickName: string;
    outgoingTracks: Track[];
    incomingTracks: Record<string, string | null>;
    incomingFeedbackStats: Record<
      string,
      { remb: number; transportCcFeedback: number; transportCcEstimate: number }
    >;
  }[];
};

/** Waits until none of `pages` receives a track of `nickname` (REMOVE_TRACKS came). */
async function untilRemoved(pages: Page[], names: string[], nickname: string): Promise<void> {
  for (let i = 0; i < pages.length; i++) {
    await waitFor(`${names[i]} told ${nickname}'s tracks left`, async () => {
      const r = await call<Received>(pages[i], "received");
      return Object.keys(r).some((k) => k.startsWith(`${nickname} `)) ? undefined : true;
    }, waitMs);
  }
}

Deno.test("SFU SDK in Chromium: three simulcast participants in one room", async (t) => {
  if (Deno.env.get(netnsEnv) !== "1") {
    throw new Error(`run through tests/e2e/sfu_test.ts (needs a loopback-only netns)`);
  }
  const bundle = new URL("../peers/sfusdk/sfusdk.js", import.meta.url);
  const server = await startTestServer(testConfig({ keepAlive }));
  const browser = await startBrowser(
    "sfu-chromium-",
    new URL("./sfu_page.html", import.meta.url),
    {
      "/sfusdk.js": await Deno.readFile(bundle),
      "/websdk.html": await Deno.readFile(new URL("./webrtc_page.html", import.meta.url)),
    },
    chromiumSimulcastArgs,
  );
  const stats = async (): Promise<Stats> => {
    const res = await server.post("/sfu/stats", { roomName: room });
    assert.equal(res.status, 200);
    return await res.json();
  };
  const nickNames = async () => (await stats()).participants.map((p) => p.nickName);
  try {
    const names = ["alice", "bob", "carol"];
    const pages = [await browser.open(), await browser.open(), await browser.open()];

    await t.step("three pages publish three layers each and decode the other two", async () => {
      for (let i = 0; i < 3; i++) {
        const joined = await call<{ owner: boolean }>(
          pages[i],
          "join",
          server.wsUrl,
          names[i],
          room,
          pin,
          simulcast,
          capture,
        );
        assert.equal(joined.owner, i === 0);
      }
      for (let i = 0; i < 3; i++) {
        await assertReceives(pages[i], names[i], names.filter((_, j) => j !== i));
      }
      // What the pages decode went out through the send engine: 3 pages x 2 others x 2 tracks.
      assert.equal(server.services.sendPaths.size, 12, "delivered tracks on the send engine");
    });

    // A Web SDK (defaultApp) session on the same server publishes and plays a stream meanwhile.
    const webSdk = await browser.open("/websdk.html");
    const webSdkFrames = async () =>
      (await callWebSdk<InboundStats>(webSdk, "inboundStats", "play")).framesDecoded;
    await t.step("a Web SDK stream publishes and plays next to the room", async () => {
      await callWebSdk(webSdk, "openSession", "s", server.wsUrl);
      const published = await callWebSdk<{ status: string }>(
        webSdk,
        "startStream",
        "s",
        "pub",
        "publish",
        { name: "websdk-cam" },
        ["PUBLISHING", "FAILED"],
      );
      assert.equal(published.status, "PUBLISHING");
      const played = await callWebSdk<{ status: string }>(
        webSdk,
        "startStream",
        "s",
        "play",
        "play",
        { name: "websdk-cam" },
        ["PLAYING", "FAILED"],
      );
      assert.equal(played.status, "PLAYING");
      await waitFor("the Web SDK player decoding", async () => {
        const s = await callWebSdk<InboundStats>(webSdk, "inboundStats", "play");
        return s.framesDecoded > 10 && s.audioPackets > 10 ? true : undefined;
      }, waitMs);
    });
    const webSdkFramesBefore = await webSdkFrames();

    await t.step(
      "/sfu/stats: three participants, each a composite of three live layers",
      async () => {
        const body = await waitFor("every layer alive and measured", async () => {
          const body = await stats();
          const measured = body.participants.length === 3 && body.participants.every((p) => {
            const composite = p.outgoingTracks.find((t) => t.composite === true);
            const layers = Object.values((composite?.tracks ?? {}) as Record<string, Track>);
            return layers.length === 3 &&
              layers.every((l) =>
                l.alive === true && (l.fps as number) > 0 && (l.width as number) > 0
              );
          });
          return measured ? body : undefined;
        }, waitMs).catch(async (err) => {
          const sent = await Promise.all(pages.map((p) => call(p, "outbound")));
          throw new Error(
            `${err.message}: ${JSON.stringify(await stats())}; sent ${JSON.stringify(sent)}`,
          );
        });
        assert.deepEqual(body.participants.map((p) => p.nickName), names);
        const videoIds = new Set<string>();
        for (const p of body.participants) {
          const composite = p.outgoingTracks.find((t) => t.composite === true)!;
          videoIds.add(composite.id as string);
          const layers = composite.tracks as Record<string, Track>;
          assert.deepEqual(Object.keys(layers), ["l send", "m send", "h send"], p.nickName);
          const widths = Object.values(layers).map((l) => l.width as number);
          assert.ok(widths[0] < widths[1] && widths[1] < widths[2], `${p.nickName}: ${widths}`);
          for (const layer of Object.values(layers)) {
            assert.ok((layer.height as number) > 0 && (layer.bitrate as number) > 0, p.nickName);
          }
          console.log(
            `bench: ${p.nickName} layers ` +
              Object.entries(layers).map(([rid, l]) =>
                `${rid.split(" ")[0]} ${l.width}x${l.height} ${l.fps} fps ${
                  Math.round((l.bitrate as number) / 1000)
                } kbps`
              ).join(", "),
          );
          const audio = p.outgoingTracks.find((t) => t.type === "AUDIO")!;
          assert.equal(audio.codec, "OPUS");
          assert.ok((audio.bitrate as number) > 0, p.nickName);
        }
        const sent = await Promise.all(pages.map((p) => call<{ out: string[] }>(p, "outbound")));
        for (const [i, p] of body.participants.entries()) {
          const feedback = Object.values(p.incomingFeedbackStats);
          const remb = feedback.map((f) => f.remb);
          const estimate = sent[i].out.find((s) => /^\d+$/.test(s)) ?? "?";
          const tcc = Math.max(...feedback.map((f) => f.transportCcFeedback));
          const tccKbps = Math.max(...feedback.map((f) => f.transportCcEstimate)) / 1000;
          console.log(
            `bench: ${p.nickName} send estimate ${Math.round(Number(estimate) / 1000)} kbps, ` +
              `its REMB ${Math.round(Math.max(...remb) / 1000)} kbps, ` +
              `its transport-cc feedback ${tcc} packets, estimate from it ${
                Math.round(tccKbps)
              } kbps`,
          );
          // Chromium answers the server's transport-wide numbers with transport feedback.
          assert.ok(tcc > 0 && tccKbps > 0, `${p.nickName}: no transport-cc feedback`);
        }
        for (const p of body.participants) {
          const incoming = Object.entries(p.incomingTracks);
          assert.equal(incoming.length, 4, `${p.nickName} receives 4 tracks`);
          for (const [id, layer] of incoming) {
            if (videoIds.has(id)) assert.match(layer ?? "", /^[lmh] send$/, p.nickName);
            else assert.equal(layer, null, p.nickName);
          }
        }
      },
    );

    await t.step("changeQuality moves one subscriber to the low layer and back", async () => {
      const quality = await call<Record<string, string[]>>(pages[0], "qualityState");
      assert.deepEqual(quality.carol?.map((q) => q.split(":")[0]), ["l", "m", "h"]);
      type Layer = { width: number; alive: boolean };
      const carolStats = async () => {
        const body = await stats();
        const video = body.participants[2].outgoingTracks.find((t) => t.composite)!;
        const layers = video.tracks as Record<string, Layer>;
        return { layers, alice: body.participants[0].incomingTracks[video.id as string] };
      };
      const { layers } = await carolStats();
      const high = layers["h send"].width;
      const low = layers["l send"].width;
      const widthAt = async () =>
        (await call<Received>(pages[0], "received"))["carol VIDEO"]?.width ?? 0;
      await waitFor(
        `alice decoding carol at ${high}`,
        async () => await widthAt() === high ? true : undefined,
        waitMs,
      );
      const switchTo = async (rid: string, width: number) => {
        const startMs = performance.now();
        assert.equal(await call(pages[0], "changeQuality", "carol", rid), true);
        await waitFor(
          `alice decoding carol at ${width}`,
          async () => await widthAt() === width ? true : undefined,
          waitMs,
        );
        const ms = Math.round(performance.now() - startMs);
        assert.equal((await carolStats()).alice, `${rid} send`);
        return ms;
      };
      const downMs = await switchTo("l", low);
      const upMs = await switchTo("h", high);
      console.log(
        `bench: changeQuality to l ${downMs} ms (${high} -> ${low} wide), back to h ${upMs} ms`,
      );
      assert.ok(downMs <= 2000, `switch to l took ${downMs} ms`);
      // Bob was not asked to change: he keeps a layer above l (the top one unless loss lowered it).
      const bob = await call<Received>(pages[1], "received");
      assert.ok((bob["carol VIDEO"].width ?? 0) > low, JSON.stringify(bob));
    });

    const dave = await browser.open();
    await t.step("a wrong pin and a used nickname are refused, the room unchanged", async () => {
      const wrongPin = await call<{ error: string }>(
        dave,
        "tryJoin",
        server.wsUrl,
        "dave",
        room,
        "0000",
      );
      assert.equal(wrongPin.error, "Wrong pin");
      const taken = await call<{ error: string }>(dave, "tryJoin", server.wsUrl, "bob", room, pin);
      assert.equal(taken.error, "Nickname unavailable");
      assert.deepEqual(await nickNames(), names);
    });

    /** Dave joins with the right pin, and alice decodes his mic. */
    const daveJoinsHeard = async () => {
      const joined = await call<{ error: string | null }>(
        dave,
        "tryJoin",
        server.wsUrl,
        "dave",
        room,
        pin,
      );
      assert.equal(joined.error, null);
      await waitFor(
        "alice receiving dave's mic",
        async () =>
          decoding((await call<Received>(pages[0], "received"))["dave AUDIO"]) ? true : undefined,
        waitMs,
      );
    };

    await t.step("the owner evicts a participant: the others lose its tracks", async () => {
      await daveJoinsHeard();
      assert.equal(await call(pages[0], "evict", "dave"), true);
      await untilRemoved(pages, names, "dave");
      const events = await call<string[]>(dave, "events");
      assert.ok(events.includes("LEFT dave"), JSON.stringify(events));
      assert.deepEqual(await nickNames(), names);
    });

    await t.step("a participant gone silent leaves within the ping timeout", async () => {
      await daveJoinsHeard();
      const startMs = performance.now();
      assert.equal(await call(dave, "silence"), true);
      await untilRemoved(pages, names, "dave");
      const ms = Math.round(performance.now() - startMs);
      console.log(`bench: silent participant's tracks removed after ${ms} ms`);
      // Missed pongs are counted at the pings: the last one may come an interval late; the
      // pages are then polled one after another (up to 1.5 s on a loaded machine).
      assert.ok(ms <= pingTimeoutMs + keepAlive.intervalMs + 1500, `${ms} ms`);
      assert.deepEqual(await nickNames(), names);
    });

    await t.step("a page closed without leaving: the others lose its tracks at once", async () => {
      const startMs = performance.now();
      await pages[2].close();
      await untilRemoved(pages.slice(0, 2), names, "carol");
      const ms = Math.round(performance.now() - startMs);
      console.log(`bench: closed page's tracks removed after ${ms} ms`);
      // Its WebSocket closed with it: no ping timeout to wait for.
      assert.ok(ms <= keepAlive.intervalMs, `${ms} ms`);
      assert.deepEqual(await nickNames(), ["alice", "bob"]);
    });

    await t.step("a leave removes the leaver's tracks from the others", async () => {
      assert.equal(await call(pages[1], "leave"), true);
      await untilRemoved(pages.slice(0, 1), names, "bob");
      assert.deepEqual(await nickNames(), ["alice"]);
      // Alice still decodes nothing stale and the room goes on.
      assert.deepEqual(await call<Received>(pages[0], "received"), {});
    });

    await t.step("the Web SDK stream played on undisturbed", async () => {
      const before = await webSdkFrames();
      await new Promise((r) => setTimeout(r, watchMs));
      const after = await webSdkFrames();
      assert.ok(after > before, `Web SDK frames ${before} -> ${after}`);
      assert.ok(before > webSdkFramesBefore, `Web SDK frames ${webSdkFramesBefore} -> ${before}`);
    });
  } finally {
    await browser.close();
    await server.stop();
  }
});
