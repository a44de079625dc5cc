/**
 * WebRTC publish and play with the real `@flashphoner/websdk` 2.0.276 in headless Chromium
 * (fake camera and microphone) against our server, then WebRTC play of streams that did not
 * come over WebRTC: a GStreamer RTSP camera (H.264 + AAC, H.264 + PCMU) and ffmpeg publishing
 * RTMP (H.264 + AAC), both started inside the namespace; and `transport: "TCP"` publish and
 * play over ICE-TCP while nftables drops every UDP packet (needs `nft`). Runs inside a
 * loopback-only network namespace as root; `webrtc_test.ts` re-executes this file there. One
 * Chromium, two pages.
 */
import assert from "node:assert/strict";
import { createSocket } from "node:dgram";
import type { Page } from "playwright-core";
// Importing the package's manifest makes Deno install the package (and so its bundle).
import websdkPackage from "@flashphoner/websdk/package.json" with { type: "json" };
import { openPeerCount } from "../../media/protocols/webrtc/peer.ts";
import { publishRtmp, stopPublisher } from "../helpers/ffmpeg_rtmp.ts";
import { startGstRtsp } from "../helpers/gst_rtsp.ts";
import { startTestServer, type TestServer } from "../helpers/test_server.ts";
import { startBrowser } from "./browser.ts";
import { netnsEnv } from "./netns.ts";
import { nft } from "./nft.ts";
import { call, type InboundStats, type OutboundStats, type SelectedPair } from "./webrtc_driver.ts";

/** `page`'s inbound stats of stream `name` now and `watchMs` later, to see what advanced. */
async function statsOver(page: Page, name: string, watchMs = 2000) {
  const before = await call<InboundStats>(page, "inboundStats", name);
  await new Promise((r) => setTimeout(r, watchMs));
  const after = await call<InboundStats>(page, "inboundStats", name);
  return { before, after };
}

/** POSTs to the REST API and asserts 200 (reading the body, so no response is left open). */
async function postOk(server: TestServer, path: string, body: unknown): Promise<void> {
  const res = await server.post(path, body);
  const text = await res.text();
  assert.equal(res.status, 200, `${path}: ${text}`);
}

/** The nftables table that drops UDP during the ICE-TCP step. */
const udpBlockTable = "webrtc_udp_block";

/** Longest wait for a state in a page, in ms. */
const pageWaitMs = 15_000;

/** A stream's statuses, infos and events as the page recorded them. */
function streamState(page: Page, key: string) {
  return page.evaluate((key) => {
    const r = (globalThis as unknown as {
      streams: Record<
        string,
        { statuses: string[]; infos: string[]; events: unknown[]; lastStatus: unknown }
      >;
    }).streams[key];
    return { statuses: r.statuses, infos: r.infos, events: r.events, lastStatus: r.lastStatus };
  }, key) as Promise<{
    statuses: string[];
    infos: string[];
    events: { type: string; payload: Record<string, unknown> }[];
    lastStatus: {
      status: string;
      info: string;
      videoState?: { muted: boolean };
      recordInfo?: string | null;
    };
  }>;
}

async function waitUntil(what: string, check: () => Promise<boolean>, timeoutMs = pageWaitMs) {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** ffprobe's streams of a file, with decoded frame counts. */
async function probeStreams(path: string): Promise<Record<string, string | number>[]> {
  const probe = await new Deno.Command("ffprobe", {
    args: [
      ...["-v", "error", "-count_frames", "-show_entries"],
      ...["stream=codec_type,codec_name,width,height,nb_read_frames", "-of", "json", path],
    ],
  }).output();
  assert.ok(probe.success, new TextDecoder().decode(probe.stderr));
  return JSON.parse(new TextDecoder().decode(probe.stdout)).streams;
}

/** The video stream ffprobe finds in a file. */
async function probeVideo(path: string): Promise<Record<string, string | number>> {
  const video = (await probeStreams(path)).find((x) => x.codec_type === "video");
  assert.ok(video, `${path} has a video stream`);
  return video;
}

async function find(server: TestServer, filter: Record<string, unknown>) {
  const res = await server.post("/stream/find", filter);
  assert.equal(res.status, 200);
  return await res.json() as Record<string, unknown>[];
}

Deno.test("WebRTC publish and play with the Web SDK in Chromium", async (t) => {
  if (Deno.env.get(netnsEnv) !== "1") {
    throw new Error(`run through tests/e2e/webrtc_test.ts (needs a loopback-only netns)`);
  }
  assert.equal(websdkPackage.version, "2.0.276");
  const server = await startTestServer();
  const browser = await startBrowser(
    "webrtc-chromium-",
    new URL("./webrtc_page.html", import.meta.url),
  );
  try {
    const [a, b] = [await browser.open(), await browser.open()];
    for (const page of [a, b]) await call(page, "openSession", "s", server.wsUrl);

    await t.step("16 publishes in a row all reach PUBLISHING", async () => {
      // About 1 in 13 of these ended "Failed by ICE timeout" on a loaded machine while werift
      // took the DTLS client role: its SRTP keys were not Chrome's.
      const results = [];
      for (let i = 0; i < 16; i++) {
        const key = `burst-${i}`;
        const published = await call<{ status: string; info: string }>(
          a,
          "startStream",
          "s",
          key,
          "publish",
          { name: key },
          ["PUBLISHING", "FAILED", "UNPUBLISHED"],
        );
        results.push(`${published.status} ${published.info ?? ""}`.trim());
        await call(a, "callStream", key, "stop");
        await waitUntil(
          `${key} ends`,
          async () => (await streamState(a, key)).statuses.some((s) => s !== "PUBLISHING"),
        );
      }
      assert.deepEqual(results, Array(16).fill("PUBLISHING"));
      await waitUntil("no stream left", async () => (await find(server, {})).length === 0);
    });

    for (const codec of ["H264", "VP8"]) {
      const name = `cam-${codec}`;
      await t.step(
        `${codec}: page A publishes, page B joining 5 s late sees frames within 1 s`,
        async () => {
          const published = await call<{ status: string }>(a, "startStream", "s", name, "publish", {
            name,
            stripCodecs: codec === "VP8" ? "H264" : "",
            // The SDK's default capture is 320x240.
            constraints: { audio: true, video: { width: 640, height: 480 } },
          }, ["PUBLISHING", "FAILED", "UNPUBLISHED"]);
          assert.equal(published.status, "PUBLISHING");
          const [record] = await find(server, { name, published: true });
          assert.equal(record.videoCodec, codec);
          await new Promise((r) => setTimeout(r, 5000));
          const played = await call<{ status: string; info: string }>(
            b,
            "startStream",
            "s",
            name,
            "play",
            { name },
            [
              "PLAYING",
              "FAILED",
              "STOPPED",
            ],
          );
          assert.equal(played.status, "PLAYING", played.info);
          const playingMs = Date.now();
          await waitUntil(
            "the first decoded frame",
            async () => (await call<InboundStats>(b, "inboundStats", name)).framesDecoded > 0,
          );
          const firstFrameMs = Date.now() - playingMs;
          assert.ok(firstFrameMs < 1000, `first frame decoded ${firstFrameMs} ms after PLAYING`);
          const { before, after } = await statsOver(b, name);
          assert.ok(
            after.framesDecoded > before.framesDecoded + 10,
            JSON.stringify({ before, after }),
          );
          assert.ok(
            after.audioPackets > before.audioPackets + 50,
            JSON.stringify({ before, after }),
          );
          assert.deepEqual([after.frameWidth, after.frameHeight], [640, 480]);
        },
      );

      await t.step(
        `${codec}: /stream/find with metrics shows real size and rising counters`,
        async () => {
          const [first] = await find(server, { name, published: true, display: ["metrics"] });
          await new Promise((r) => setTimeout(r, 1500));
          const [second] = await find(server, { name, published: true, display: ["metrics"] });
          const m1 = first.metrics as Record<string, number>;
          const m2 = second.metrics as Record<string, number>;
          assert.deepEqual([second.width, second.height, m2.VIDEO_WIDTH, m2.VIDEO_HEIGHT], [
            640,
            480,
            640,
            480,
          ]);
          assert.ok(m2.VIDEO_RATE > 50 && m2.AUDIO_RATE > 10, JSON.stringify(m2));
          assert.ok(m2.VIDEO_FPS >= 10, JSON.stringify(m2));
          assert.ok(m2.VIDEO_P_FRAMES > m1.VIDEO_P_FRAMES, "frame counters rise");
          assert.ok(m2.VIDEO_K_FRAMES >= 1 && m2.VIDEO_PLI >= 1);
          assert.equal(second.mediaProvider, "WebRTC");
          assert.equal(second.transport, "UDP");
          const players = await find(server, { name, published: false });
          assert.equal(players.length, 1);
          assert.deepEqual([players[0].status, players[0].mediaType], ["PLAYING", "play"]);
        },
      );

      await t.step(`${codec}: stream.snapshot() gives SNAPSHOT_COMPLETE with a PNG`, async () => {
        const shot = await call<{
          event: { type: string; payload: { snapshot?: string; info?: string } };
          status: string;
          info: string;
        }>(b, "snapshot", "s", name);
        assert.equal(shot.event.type, "snapshotCompleted", JSON.stringify(shot).slice(0, 300));
        assert.equal(shot.status, "SNAPSHOT_COMPLETE");
        assert.equal(shot.info, shot.event.payload.snapshot);
        const png = await Deno.makeTempFile({ suffix: ".png" });
        try {
          await Deno.writeFile(png, Uint8Array.from(atob(shot.info), (c) => c.charCodeAt(0)));
          const video = await probeVideo(png);
          assert.deepEqual([video.codec_name, video.width, video.height], ["png", 640, 480]);
        } finally {
          await Deno.remove(png);
        }
      });

      if (codec === "H264") {
        await t.step("mute states and stream events reach page B", async () => {
          await call(a, "callStream", name, "muteVideo");
          await call(a, "callStream", name, "sendData", { note: "hi" });
          // The SDK's events travel over page A's socket, the REST one over HTTP: wait for
          // the first two so the third cannot overtake them.
          await waitUntil(
            "two stream events",
            async () => (await streamState(b, name)).events.length >= 2,
          );
          await postOk(server, "/stream/event/send", {
            streamName: name,
            payload: { from: "rest" },
          });
          await waitUntil(
            "three stream events",
            async () => (await streamState(b, name)).events.length >= 3,
          );
          const { events } = await streamState(b, name);
          assert.deepEqual(events.map((e) => e.type), ["videoMuted", "data", "data"]);
          assert.equal(events[0].payload.streamName, name);
          assert.deepEqual(events[1].payload, { note: "hi" });
          assert.deepEqual(events[2].payload, { from: "rest" });
          const [record] = await find(server, { name, published: true });
          assert.deepEqual(record.videoState, { muted: true });
          await call(a, "callStream", name, "unmuteVideo");
        });

        await t.step(
          "recording the WebRTC publisher gives an MP4 that ffprobe accepts",
          async () => {
            const [record] = await find(server, { name, published: true });
            const id = record.mediaSessionId;
            await postOk(server, "/stream/startRecording", { mediaSessionId: id });
            await new Promise((r) => setTimeout(r, 3000));
            await postOk(server, "/stream/stopRecording", { mediaSessionId: id });
            const folder = server.services.config.folders.records;
            const [file] = [...Deno.readDirSync(folder)].map((e) => `${folder}/${e.name}`);
            const probe = await new Deno.Command("ffprobe", {
              args: [
                "-v",
                "error",
                "-count_frames",
                "-show_entries",
                "stream=codec_name,width,height,nb_read_frames",
                "-of",
                "json",
                file,
              ],
            }).output();
            assert.ok(probe.success, new TextDecoder().decode(probe.stderr));
            const streams = JSON.parse(new TextDecoder().decode(probe.stdout)).streams;
            const video = streams.find((s: Record<string, unknown>) => s.codec_name === "h264");
            assert.deepEqual([video?.width, video?.height], [640, 480]);
            assert.ok(Number(video.nb_read_frames) > 20, JSON.stringify(streams));
            assert.ok(streams.some((s: Record<string, unknown>) => s.codec_name === "opus"));
          },
        );
      }

      await t.step(
        `${codec}: the WebRTC publish plays over HLS (ffmpeg reads it cleanly)`,
        async () => {
          const url = `${server.hlsUrl}/${name}/${name}.m3u8`;
          const master = await fetch(url);
          assert.equal(master.status, 200, await master.clone().text());
          // VP8 has no HLS mapping: the source variant is an H.264 rendition of it.
          assert.match(await master.text(), /CODECS="avc1\.[0-9a-f]{6},mp4a\.40\.2"/);
          const read = await new Deno.Command("ffmpeg", {
            args: ["-v", "error", "-i", url, "-t", "4", "-f", "null", "-"],
            stdout: "null",
            stderr: "piped",
          }).output();
          assert.ok(read.success, new TextDecoder().decode(read.stderr));
          assert.equal(new TextDecoder().decode(read.stderr), "");
          // A live playlist: no -count_frames (it would read until the stream ends).
          const probe = await new Deno.Command("ffprobe", {
            args: [
              ...["-v", "error", "-show_entries", "stream=codec_type,codec_name,width,height"],
              ...["-of", "json", url],
            ],
          }).output();
          assert.ok(probe.success, new TextDecoder().decode(probe.stderr));
          const streams: Record<string, string | number>[] =
            JSON.parse(new TextDecoder().decode(probe.stdout)).streams;
          const video = streams.find((x) => x.codec_type === "video")!;
          assert.deepEqual([video.codec_name, video.width, video.height], ["h264", 640, 480]);
          assert.equal(streams.find((x) => x.codec_type === "audio")?.codec_name, "aac");
          await postOk(server, "/hls/terminate", { name });
        },
      );

      await t.step(
        codec === "H264"
          ? "H264: a transcoder2 to VP8 320x240 of the WebRTC publisher plays at that size"
          : "VP8: a player asking 320x240 of the 640x480 stream gets a 320x240 rendition",
        async () => {
          const key = `${name}-small`;
          const uri = `transcoder2://${key}`;
          if (codec === "H264") {
            await postOk(server, "/transcoder2/startup", {
              uri,
              remoteStreamName: name,
              localStreamName: key,
              encoder: {
                width: 320,
                height: 240,
                fps: 15,
                keyFrameInterval: 15,
                videoCodec: "VP8",
              },
            });
            await waitUntil(
              "the transcoded stream",
              async () => (await find(server, { name: key })).length > 0,
            );
          }
          const played = await call<{ status: string; info: string }>(
            b,
            "startStream",
            "s",
            key,
            "play",
            codec === "H264"
              ? { name: key }
              : { name, constraints: { audio: true, video: { width: 320, height: 240 } } },
            ["PLAYING", "FAILED", "STOPPED"],
          );
          assert.equal(played.status, "PLAYING", played.info);
          let stats: InboundStats | undefined;
          try {
            await waitUntil("frames decoded at 320x240", async () => {
              stats = await call<InboundStats>(b, "inboundStats", key);
              return stats.framesDecoded > 10 && stats.frameWidth === 320 &&
                stats.frameHeight === 240;
            }, 20_000);
          } catch (err) {
            const records = await find(server, {});
            const transcoders = await (await server.post("/transcoder2/find_all")).json();
            throw new Error(
              `${(err as Error).message}: ${JSON.stringify({ stats, transcoders })} ` +
                JSON.stringify(records.map((r) => [r.name, r.width, r.height, r.fps, r.status])),
            );
          }
          if (codec === "H264") {
            const [record] = await find(server, { name: key, published: true });
            assert.deepEqual([record.videoCodec, record.width, record.height], ["VP8", 320, 240]);
          }
          await call(b, "callStream", key, "stop");
          if (codec === "H264") await postOk(server, "/transcoder2/terminate", { uri });
          await waitUntil(
            "the transcoder's decoder and encoder to stop",
            () =>
              Promise.resolve(
                server.services.decoders.decoders === 0 &&
                  server.services.playRenditions.size === 0,
              ),
          );
        },
      );

      await t.step(
        `${codec}: /stream/terminate ends publisher and player with their statuses`,
        async () => {
          const [record] = await find(server, { name, published: true });
          await postOk(server, "/stream/terminate", { mediaSessionId: record.mediaSessionId });
          await waitUntil(
            "both final statuses",
            async () =>
              (await streamState(a, name)).statuses.includes("UNPUBLISHED") &&
              (await streamState(b, name)).statuses.includes("STOPPED"),
          );
          assert.equal((await streamState(a, name)).lastStatus.info, "Stopped by rest /terminate");
          assert.equal((await streamState(b, name)).lastStatus.info, "Stopped by rest /terminate");
          assert.deepEqual(await find(server, { name }), []);
          assert.equal(openPeerCount(), 0);
        },
      );

      await t.step(
        `${codec}: a record: true publish names its file in UNPUBLISHED; /client/records serves it`,
        async () => {
          const key = `rec-${codec}`;
          const published = await call<{ status: string; info: string }>(
            a,
            "startStream",
            "s",
            key,
            "publish",
            {
              name: key,
              record: true,
              stripCodecs: codec === "VP8" ? "H264" : "",
              constraints: { audio: true, video: { width: 640, height: 480 } },
            },
            ["PUBLISHING", "FAILED", "UNPUBLISHED"],
          );
          assert.equal(published.status, "PUBLISHING", published.info);
          await new Promise((r) => setTimeout(r, 3000));
          await call(a, "callStream", key, "stop");
          await waitUntil(
            "UNPUBLISHED",
            async () => (await streamState(a, key)).statuses.includes("UNPUBLISHED"),
          );
          const recordName = (await streamState(a, key)).lastStatus.recordInfo;
          assert.match(String(recordName), new RegExp(`^${key}-\\d{13}-\\d{13}\\.mp4$`));
          const res = await fetch(`${server.restUrl}/client/records/${recordName}`);
          assert.equal(res.status, 200);
          assert.equal(res.headers.get("Content-Type"), "video/mp4");
          const file = await Deno.makeTempFile({ suffix: ".mp4" });
          try {
            await Deno.writeFile(file, new Uint8Array(await res.arrayBuffer()));
            const streams = await probeStreams(file);
            assert.deepEqual(
              streams.map((x) => x.codec_name).sort(),
              [codec.toLowerCase(), "opus"].sort(),
            );
            const video = streams.find((x) => x.codec_type === "video")!;
            assert.deepEqual([video.width, video.height], [640, 480]);
            assert.ok(Number(video.nb_read_frames) > 30, JSON.stringify(streams));
            // A browser's capture times jitter: on a loaded machine two pictures may fall in
            // one 1/30 s slot of the frame rate ffmpeg guesses, and its null output would
            // report their order as an error. Decoding keeps the file's own time base.
            const decoded = await new Deno.Command("ffmpeg", {
              args: ["-v", "error", "-i", file, "-enc_time_base", "-1", "-f", "null", "-"],
            }).output();
            assert.ok(decoded.success);
            assert.equal(new TextDecoder().decode(decoded.stderr), "");
          } finally {
            await Deno.remove(file);
          }
        },
      );
    }

    await t.step(
      "a 1280x720 publish climbs past 1 Mbit/s within 10 s (the server's REMB), a player decodes it",
      async () => {
        // A camera whose pictures take bits (a noisy test pattern, 1 s looped): the default
        // fake camera's pictures encode at about 460 kbit/s at 1280x720 however much is allowed.
        const dir = await Deno.makeTempDir({ prefix: "remb-camera-" });
        const camera = `${dir}/noisy720.y4m`;
        const made = await new Deno.Command("ffmpeg", {
          args: [
            ...["-v", "error", "-f", "lavfi", "-i"],
            "testsrc2=s=1280x720:r=30,noise=alls=24:allf=t+u",
            ...["-frames:v", "30", "-pix_fmt", "yuv420p", camera],
          ],
        }).output();
        assert.ok(made.success, new TextDecoder().decode(made.stderr));
        const hd = await startBrowser(
          "webrtc-remb-chromium-",
          new URL("./webrtc_page.html", import.meta.url),
          {},
          [`--use-file-for-fake-video-capture=${camera}`],
        );
        try {
          const [publisher, player] = [await hd.open(), await hd.open()];
          for (const page of [publisher, player]) {
            await call(page, "openSession", "s", server.wsUrl);
          }
          const name = "hd-remb";
          const published = await call<{ status: string; info: string }>(
            publisher,
            "startStream",
            "s",
            name,
            "publish",
            { name, constraints: { audio: true, video: { width: 1280, height: 720 } } },
            ["PUBLISHING", "FAILED", "UNPUBLISHED"],
          );
          assert.equal(published.status, "PUBLISHING", published.info);
          const played = await call<{ status: string; info: string }>(
            player,
            "startStream",
            "s",
            name,
            "play",
            { name },
            ["PLAYING", "FAILED", "STOPPED"],
          );
          assert.equal(played.status, "PLAYING", played.info);
          // The video send rate of each second, from PUBLISHING on.
          let last = await call<OutboundStats>(publisher, "outboundStats", name);
          const ratesKbps: number[] = [];
          for (let i = 0; i < 10; i++) {
            await new Promise((r) => setTimeout(r, 1000));
            const now = await call<OutboundStats>(publisher, "outboundStats", name);
            const bits = (now.videoBytesSent - last.videoBytesSent) * 8;
            ratesKbps.push(Math.round(bits / (now.timestampMs - last.timestampMs)));
            last = now;
          }
          const estimateKbps = Math.round(last.availableOutgoingBitrate / 1000);
          console.log(
            `bench: 1280x720 Web SDK publish (noisy fake camera), video sent per second: ` +
              `${ratesKbps.join(", ")} kbit/s; send estimate ${estimateKbps} kbit/s ` +
              `(media.maxPublishBitrateKbps 2500), sending ${last.frameWidth}x${last.frameHeight}` +
              `@${last.framesPerSecond} limited by ${last.qualityLimitationReason}`,
          );
          const figures = JSON.stringify({ ratesKbps, last });
          // Without REMB Chromium starts at 300 kbit/s and grows 8% a second: 480 at 7 s.
          assert.ok(Math.max(...ratesKbps) > 1000, figures);
          assert.ok(estimateKbps >= 2000 && estimateKbps <= 2500, figures);
          // The player keeps decoding at that rate.
          const { before, after } = await statsOver(player, name);
          assert.ok(
            after.framesDecoded > before.framesDecoded + 30,
            JSON.stringify({ before, after }),
          );
          await call(publisher, "callStream", name, "stop");
          await waitUntil(
            "the stream's end",
            async () => (await find(server, { name })).length === 0,
          );
        } finally {
          await hd.close();
          await Deno.remove(dir, { recursive: true });
        }
      },
    );

    await t.step(
      'transport: "TCP" publishes and plays over ICE-TCP with UDP dropped by nftables',
      async () => {
        const name = "cam-tcp";
        // Every UDP packet in the namespace is dropped while the step runs: a candidate pair
        // on UDP could not carry a byte.
        await nft("add", "table", "inet", udpBlockTable);
        await nft(
          ...["add", "chain", "inet", udpBlockTable, "out"],
          "{ type filter hook output priority 0; }",
        );
        await nft(
          "add",
          "rule",
          "inet",
          udpBlockTable,
          "out",
          "meta",
          "l4proto",
          "udp",
          "counter",
          "drop",
        );
        let udpDropped = NaN;
        try {
          // One datagram of our own proves the rule drops.
          const probe = createSocket("udp4");
          await new Promise<void>((resolve) =>
            probe.send(new Uint8Array(4), 9, "127.0.0.1", () => resolve())
          );
          await new Promise<void>((resolve) => probe.close(() => resolve()));
          const published = await call<{ status: string; info: string }>(
            a,
            "startStream",
            "s",
            name,
            "publish",
            {
              name,
              transport: "TCP",
              constraints: { audio: true, video: { width: 640, height: 480 } },
            },
            ["PUBLISHING", "FAILED", "UNPUBLISHED"],
          );
          assert.equal(published.status, "PUBLISHING", published.info);
          const played = await call<{ status: string; info: string }>(
            b,
            "startStream",
            "s",
            name,
            "play",
            {
              name,
              transport: "TCP",
            },
            ["PLAYING", "FAILED", "STOPPED"],
          );
          assert.equal(played.status, "PLAYING", played.info);
          await waitUntil(
            "frames decoded over TCP",
            async () => (await call<InboundStats>(b, "inboundStats", name)).framesDecoded > 30,
          );
          for (const [page, role] of [[a, "publisher"], [b, "player"]] as const) {
            const pair = await call<SelectedPair>(page, "selectedPair", name);
            assert.deepEqual(
              [pair.state, pair.local.protocol, pair.remote.protocol, pair.remote.tcpType],
              ["succeeded", "tcp", "tcp", "passive"],
              `${role}: ${JSON.stringify(pair)}`,
            );
          }
          const records = await find(server, { name });
          assert.deepEqual(records.map((r) => r.transport), ["TCP", "TCP"]);
          // The TCP player sends through werift, not the UDP send engine.
          assert.equal(server.services.sendPaths.size, 0);
          const { before, after } = await statsOver(b, name);
          assert.ok(
            after.framesDecoded > before.framesDecoded + 20,
            JSON.stringify({ before, after }),
          );
          assert.ok(
            after.audioPackets > before.audioPackets + 50,
            JSON.stringify({ before, after }),
          );
          assert.deepEqual([after.frameWidth, after.frameHeight], [640, 480]);
          await call(a, "callStream", name, "stop");
          await waitUntil(
            "the TCP streams' end",
            async () => (await find(server, { name })).length === 0,
          );
        } finally {
          const listing = await nft("list", "table", "inet", udpBlockTable);
          await nft("delete", "table", "inet", udpBlockTable);
          udpDropped = Number(/counter packets (\d+)/.exec(listing)?.[1] ?? NaN);
        }
        // The probe only: neither Chromium nor the server sent a UDP packet.
        assert.equal(udpDropped, 1, "UDP packets dropped");
      },
    );

    /**
     * Page B plays `name` (a stream of frames, not WebRTC) through the SDK: pictures are
     * decoded and audio of `audioMime` is received (decoded samples and a level above
     * silence for Opus made from AAC); then the SDK stops the play.
     */
    const playFrames = async (name: string, audioMime: string, size: [number, number]) => {
      const played = await call<{ status: string; info: string }>(
        b,
        "startStream",
        "s",
        name,
        "play",
        {
          name,
        },
        ["PLAYING", "FAILED", "STOPPED"],
      );
      assert.equal(played.status, "PLAYING", played.info);
      await waitUntil(
        "the first decoded frame",
        async () => (await call<InboundStats>(b, "inboundStats", name)).framesDecoded > 0,
      );
      const { before, after } = await statsOver(b, name);
      const stats = JSON.stringify({ before, after });
      assert.ok(after.framesDecoded > before.framesDecoded + 25, stats);
      assert.deepEqual([after.frameWidth, after.frameHeight], size);
      assert.equal(after.audioMime, audioMime);
      // Cameras send G.711 in packets of up to 125 ms, Opus in 20 ms ones.
      assert.ok(after.audioPackets > before.audioPackets + 10, stats);
      // Two seconds of audio received, counted in the codec's clock.
      const clock = audioMime === "audio/opus" ? 48_000 : 8000;
      assert.ok(after.audioSamples > before.audioSamples + clock * 1.5, stats);
      if (audioMime === "audio/opus") assert.ok(after.audioLevel > 0.01, stats);
      const [player] = await find(server, { name, published: false });
      assert.deepEqual([player.status, player.mediaType], ["PLAYING", "play"]);
      await call(b, "callStream", name, "stop");
      await waitUntil(
        "STOPPED",
        async () => (await streamState(b, name)).statuses.includes("STOPPED"),
      );
    };

    for (const audio of ["aac", "pcmu"] as const) {
      await t.step(`RTSP camera H.264 + ${audio.toUpperCase()} plays through the SDK`, async () => {
        const camera = await startGstRtsp({ audio, mount: `/cam-${audio}` });
        const name = `rtsp-${audio}`;
        try {
          await postOk(server, "/rtsp/startup", { uri: camera.url, localStreamName: name });
          await waitUntil(
            "the pulled stream",
            async () => (await find(server, { name })).length > 0,
          );
          await playFrames(name, audio === "aac" ? "audio/opus" : "audio/PCMU", [640, 360]);
          await postOk(server, "/rtsp/terminate", { uri: camera.url });
        } finally {
          await camera.stop();
        }
      });
    }

    await t.step(
      "RTMP stream published by ffmpeg (H.264 + AAC) plays through the SDK",
      async () => {
        const publisher = publishRtmp(`rtmp://127.0.0.1:${server.rtmpPort}/live/ffcam`, 60);
        try {
          await waitUntil(
            "the RTMP stream",
            async () => (await find(server, { name: "ffcam" })).length > 0,
          );
          await playFrames("ffcam", "audio/opus", [640, 360]);
        } finally {
          await stopPublisher(publisher);
        }
        await waitUntil(
          "the RTMP stream's end",
          async () => (await find(server, { name: "ffcam" })).length === 0,
        );
        assert.equal(openPeerCount(), 0);
      },
    );
  } finally {
    await browser.close();
    await server.stop();
  }
});
