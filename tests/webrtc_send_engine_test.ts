/**
 * WebRTC players on each sender of `media.sendEngine`: the FFI send engine (its Workers send
 * on the ICE mux's socket after the DTLS handshake; werift keeps ICE, DTLS and RTCP) and
 * werift's own path pass the same tests: three Web SDK players decode an H.264 + Opus publish,
 * a lossy player's NACKs are answered, a late joiner's PLI yields a keyframe, a player that
 * leaves mid-stream is taken off the engine, Workers end with the server. Players of a VOD file
 * (frames packetized per player) go through the engine the same way.
 */
import assert from "node:assert/strict";
import { Buffer } from "node:buffer";
import { lengthPrefixedToAnnexB } from "../media/codecs/nalu.ts";
import { IceMux } from "../media/protocols/webrtc/ice_mux.ts";
import { H264Depacketizer } from "../media/rtp/h264_depacketizer.ts";
import { SendEngine } from "../media/send_engine/send_engine.ts";
import type { WebRtcPublisher } from "../media/providers/webrtc_publisher.ts";
import { decodeH264 } from "./helpers/h264_check.ts";
import { makeClip } from "./helpers/media_fixtures.ts";
import { startTestServer, testConfig, type TestServer } from "./helpers/test_server.ts";
import { WcsClient } from "./helpers/wcs_client.ts";
import { ClipPublisher, makeH264OpusClip } from "./helpers/webrtc_clip_publisher.ts";
import {
  nextStatus,
  startPlaying,
  startPublishing,
  TestPlayer,
  TestPublisher,
  waitFor,
  weriftSanitizers,
  withTwoClients,
} from "./webrtc_helpers.ts";

const senders = ["ffi", "werift"] as const;

/** A Web SDK player (werift) that keeps the H.264 it receives and counts late arrivals. */
class RecordingPlayer {
  readonly player: TestPlayer;
  readonly annexB: Uint8Array[] = [];
  /** Video packets that came after a later sequence number: retransmissions. */
  lateArrivals = 0;
  readonly #depacketizer = new H264Depacketizer(0);
  #highestSeq = -1;

  constructor(keepPercent?: number) {
    this.player = new TestPlayer("H264", keepPercent);
    this.player.pc.onTrack.subscribe((track) => {
      if (track.kind !== "video") return;
      track.onReceiveRtp.subscribe((p) => {
        const { ssrc, sequenceNumber, timestamp, marker, payloadType } = p.header;
        if (this.#highestSeq >= 0 && ((sequenceNumber - this.#highestSeq) & 0xffff) > 0x8000) {
          this.lateArrivals++;
        } else {
          this.#highestSeq = sequenceNumber;
        }
        this.#depacketizer.push(
          { ssrc, sequenceNumber, timestamp, marker, payloadType, payload: p.payload },
          (frame) => {
            // What came before the first keyframe cannot be decoded.
            if (frame.keyframe || this.annexB.length > 0) {
              this.annexB.push(lengthPrefixedToAnnexB(frame.data));
            }
          },
        );
      });
    });
  }
}

function startServer(sendEngine: (typeof senders)[number]): Promise<TestServer> {
  return startTestServer(testConfig({ media: { iceMux: "on", sendEngine, sendWorkers: 2 } }));
}

/** Engine subscribers (one per player track) and their counters; empty on the werift path. */
async function engineStats(s: TestServer) {
  const engine = s.services.sendPaths.engine;
  return engine ? [...(await engine.stats()).values()] : [];
}

for (const sendEngine of senders) {
  Deno.test({
    name:
      `send engine ${sendEngine}: 3 Web SDK players decode a WHIP H.264 + Opus publish; a lossy one's NACKs are answered; one leaves mid-stream`,
    ...weriftSanitizers,
    fn: async () => {
      const workersBefore = SendEngine.liveWorkers;
      const muxesBefore = IceMux.openCount;
      const clip = await makeH264OpusClip({ seconds: 2, width: 320, height: 240, videoKbps: 400 });
      const s = await startServer(sendEngine);
      const dir = await Deno.makeTempDir({ prefix: "send-engine-" });
      const publisher = new ClipPublisher(clip);
      const players = [new RecordingPlayer(), new RecordingPlayer(), new RecordingPlayer(85)];
      const clients: WcsClient[] = [];
      try {
        assert.equal(SendEngine.liveWorkers, workersBefore + (sendEngine === "ffi" ? 2 : 0));
        await publisher.publish(s.restUrl, "clip");
        const ids: string[] = [];
        for (const { player } of players) {
          const { client } = await WcsClient.connect(s.wsUrl);
          clients.push(client);
          const id = crypto.randomUUID();
          ids.push(id);
          await player.play(client, { mediaSessionId: id, name: "clip" });
          assert.equal((await nextStatus(client, id)).status, "PLAYING");
        }
        await waitFor(
          () => players.every((p) => p.annexB.length >= 60),
          20_000,
          "60 frames at every player",
        );
        // The two clean players' H.264 decodes whole, at the clip's size.
        for (const [i, p] of players.slice(0, 2).entries()) {
          const file = `${dir}/played${i}.h264`;
          await Deno.writeFile(file, Buffer.concat(p.annexB));
          const { errors, sizes } = await decodeH264(file);
          assert.equal(errors, "", `player ${i}: decoder errors`);
          assert.ok(sizes.length >= 60, `player ${i}: ${sizes.length} frames decoded`);
          assert.deepEqual([...new Set(sizes)], ["320,240"]);
        }
        // The lossy player asked again for what it dropped, and got it (werift never sends
        // RTP for an engine player: what arrived late came from the engine).
        const source = [...s.services.streams.list()].find((x) => x.published) as WebRtcPublisher;
        assert.ok(source.retransmittedPackets > 0, "lost packets resent from the cache");
        assert.ok(players[2].lateArrivals > 0, "retransmissions arrived");
        assert.ok(players.every((p) => p.player.received.audio > 50), "audio at every player");

        const stats = await engineStats(s);
        if (sendEngine === "ffi") {
          assert.equal(s.services.sendPaths.size, 6, "3 players x 2 tracks on the engine");
          assert.equal(stats.length, 6);
          assert.ok(stats.every((x) => x.sent > 50 && x.dropped === 0), JSON.stringify(stats));
          assert.deepEqual(new Set(stats.map((x) => x.worker)), new Set([0, 1]), "spread");
        } else {
          assert.equal(s.services.sendPaths.engine, undefined);
          assert.deepEqual(stats, []);
        }

        // Each player's losses on the server are counted (none here), beside what was sent.
        const metrics = await (await fetch(`${s.restUrl}/metrics`)).text();
        assert.match(metrics, /^mediaserver_webrtc_dropped_packets_total 0$/m);
        const sent = Number(/^mediaserver_webrtc_sent_packets_total (\d+)$/m.exec(metrics)?.[1]);
        assert.ok(sent > 300, `${sent} packets sent to players`);

        // The second player leaves mid-stream: it is taken off the engine, the others go on.
        clients[1].send("stopStream", { mediaSessionId: ids[1], name: "clip" });
        await nextStatus(clients[1], ids[1]);
        if (sendEngine === "ffi") {
          await waitFor(() => s.services.sendPaths.size === 4, 5000, "the leaver off the engine");
          assert.equal(s.services.sendPaths.engine!.size, 4);
        }
        const frames = players[0].annexB.length;
        await waitFor(() => players[0].annexB.length > frames + 25, 10_000, "the rest go on");
        for (const id of [ids[0], ids[2]]) {
          clients[ids.indexOf(id)].send("stopStream", { mediaSessionId: id, name: "clip" });
        }
        await waitFor(() => s.services.sendPaths.size === 0, 5000, "every player off");
        assert.equal(s.services.sendPaths.engine?.size ?? 0, 0);
      } finally {
        await publisher.close();
        for (const { player } of players) await player.close();
        for (const client of clients) await client.close();
        await s.stop();
        await Deno.remove(dir, { recursive: true });
      }
      assert.equal(SendEngine.liveWorkers, workersBefore, "Workers end with the server");
      assert.equal(IceMux.openCount, muxesBefore, "the mux socket closed");
    },
  });

  Deno.test({
    name: `send engine ${sendEngine}: VP8 publish; a late joiner's PLI yields a keyframe at once`,
    ...weriftSanitizers,
    fn: async () => {
      // Keyframes every 2 s unless asked for.
      const publisher = new TestPublisher("VP8");
      const early = new TestPlayer("VP8");
      const late = new TestPlayer("VP8");
      await withTwoClients([publisher, early, late], async (s, pubClient, playClient) => {
        await startPublishing(publisher, pubClient, { name: "vp8" });
        await startPlaying(early, playClient, { name: "vp8" });
        await waitFor(() => early.firstKeyframeMs > 0, 10_000, "the first player's keyframe");
        // Join just after a keyframe: the next natural one is about 2 s away.
        await new Promise((r) => setTimeout(r, 700));
        const plis = publisher.plis;
        await startPlaying(late, playClient, { name: "vp8" });
        const joinedMs = performance.now();
        await waitFor(() => late.firstKeyframeMs > 0, 5000, "the late joiner's keyframe");
        assert.ok(publisher.plis > plis, "the publisher was asked for a keyframe");
        assert.ok(
          late.firstKeyframeMs - joinedMs < 1000,
          `keyframe ${Math.round(late.firstKeyframeMs - joinedMs)} ms after joining`,
        );
        await waitFor(
          () => late.received.video > 50 && late.received.audio > 50,
          10_000,
          "media at the late joiner",
        );
        const stats = await engineStats(s);
        assert.equal(stats.length, sendEngine === "ffi" ? 4 : 0);
      }, () => startServer(sendEngine));
    },
  });

  Deno.test({
    name:
      `send engine ${sendEngine}: 2 Web SDK players decode a VOD file (frames packetized per player); a lossy one's NACKs are answered; leaving takes them off`,
    ...weriftSanitizers,
    fn: async () => {
      const workersBefore = SendEngine.liveWorkers;
      const config = testConfig({ media: { iceMux: "on", sendEngine, sendWorkers: 2 } });
      await Deno.mkdir(config.folders.media, { recursive: true });
      await makeClip(`${config.folders.media}/clip.mp4`, { seconds: 30, audio: "opus" });
      const s = await startTestServer(config);
      const dir = await Deno.makeTempDir({ prefix: "send-engine-vod-" });
      const players = [new RecordingPlayer(), new RecordingPlayer(85)];
      const clients: WcsClient[] = [];
      const ids: string[] = [];
      try {
        const res = await s.post("/vod/startup", {
          uri: "vod-live://clip.mp4",
          localStreamName: "v",
        });
        assert.equal(res.status, 200, await res.text());
        for (const { player } of players) {
          const { client } = await WcsClient.connect(s.wsUrl);
          clients.push(client);
          const id = crypto.randomUUID();
          ids.push(id);
          await player.play(client, { mediaSessionId: id, name: "v" });
          assert.equal((await nextStatus(client, id)).status, "PLAYING");
        }
        await waitFor(
          () => players.every((p) => p.annexB.length >= 50),
          20_000,
          "50 frames at every player",
        );
        const file = `${dir}/played.h264`;
        await Deno.writeFile(file, Buffer.concat(players[0].annexB));
        const { errors, sizes } = await decodeH264(file);
        assert.equal(errors, "", "decoder errors");
        assert.ok(sizes.length >= 50, `${sizes.length} frames decoded`);
        assert.deepEqual([...new Set(sizes)], ["320,240"]);
        assert.ok(players[1].lateArrivals > 0, "the lossy player's NACKs answered");
        assert.ok(players.every((p) => p.player.received.audio > 50), "audio at every player");
        // Sender reports still go out through werift, for both tracks.
        const reported = new Set(players[0].player.senderReports.map((r) => r.kind));
        assert.deepEqual([...reported].sort(), ["audio", "video"]);

        const before = await engineStats(s);
        if (sendEngine === "ffi") {
          assert.equal(s.services.sendPaths.size, 4, "2 players x 2 tracks on the engine");
          assert.equal(before.length, 4);
          assert.ok(before.every((x) => x.sent > 20 && x.dropped === 0), JSON.stringify(before));
          // Sent counts keep rising while they play.
          await new Promise((r) => setTimeout(r, 500));
          const after = await engineStats(s);
          assert.ok(
            after.reduce((n, x) => n + x.sent, 0) > before.reduce((n, x) => n + x.sent, 0) + 20,
            JSON.stringify(after),
          );
        } else {
          assert.equal(s.services.sendPaths.engine, undefined);
          assert.deepEqual(before, []);
        }
        const metrics = await (await fetch(`${s.restUrl}/metrics`)).text();
        assert.match(metrics, /^mediaserver_webrtc_dropped_packets_total 0$/m);
        const sent = Number(/^mediaserver_webrtc_sent_packets_total (\d+)$/m.exec(metrics)?.[1]);
        assert.ok(sent > 200, `${sent} packets sent to players`);

        // The first player leaves: off the engine; the other goes on, then leaves too.
        clients[0].send("stopStream", { mediaSessionId: ids[0], name: "v" });
        assert.equal((await nextStatus(clients[0], ids[0])).status, "STOPPED");
        if (sendEngine === "ffi") {
          await waitFor(() => s.services.sendPaths.size === 2, 5000, "the leaver off the engine");
          assert.equal(s.services.sendPaths.engine!.size, 2);
        }
        const frames = players[1].annexB.length;
        await waitFor(() => players[1].annexB.length > frames + 15, 10_000, "the other goes on");
        clients[1].send("stopStream", { mediaSessionId: ids[1], name: "v" });
        assert.equal((await nextStatus(clients[1], ids[1])).status, "STOPPED");
        assert.equal(s.services.sendPaths.size, 0, "every player off");
        assert.equal(s.services.sendPaths.engine?.size ?? 0, 0);
      } finally {
        for (const { player } of players) await player.close();
        for (const client of clients) await client.close();
        await s.stop();
        await Deno.remove(dir, { recursive: true });
      }
      assert.equal(SendEngine.liveWorkers, workersBefore, "Workers end with the server");
    },
  });
}
