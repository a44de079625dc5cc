/**
 * `/stream/event/send` on a stream that did not come over WebRTC: the event reaches its Web
 * SDK players, and a stream without one answers 409 (nothing would get the event). A WebRTC
 * publisher's mute events reach every Web SDK player of its stream, those given a rendition
 * included, and players joining later learn the mute state from their PLAYING status.
 */
import assert from "node:assert/strict";
import { RTCPeerConnection, RTCRtpCodecParameters } from "werift";
import { makeClip } from "./helpers/media_fixtures.ts";
import { startTestServer, testConfig } from "./helpers/test_server.ts";
import { WcsClient } from "./helpers/wcs_client.ts";
import {
  nextStatus,
  startPublishing,
  TestPlayer,
  TestPublisher,
  weriftSanitizers,
} from "./webrtc_helpers.ts";

Deno.test({
  name: "event/send reaches the Web SDK player of a VOD stream; 409 without a player, 404 unknown",
  ...weriftSanitizers,
  fn: async () => {
    const config = testConfig();
    await Deno.mkdir(config.folders.media, { recursive: true });
    await makeClip(`${config.folders.media}/clip.mp4`, { seconds: 20, audio: "aac" });
    const server = await startTestServer(config);
    const { client } = await WcsClient.connect(server.wsUrl);
    const pc = new RTCPeerConnection({
      iceServers: [],
      iceAdditionalHostAddresses: ["127.0.0.1"],
      iceInterfaceAddresses: { udp4: "127.0.0.1" },
      codecs: {
        video: [
          new RTCRtpCodecParameters({
            mimeType: "video/H264",
            clockRate: 90000,
            parameters: "level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f",
          }),
        ],
        audio: [
          new RTCRtpCodecParameters({ mimeType: "audio/opus", clockRate: 48000, channels: 2 }),
        ],
      },
    });
    try {
      const started = await server.post("/vod/startup", {
        uri: "vod-live://clip.mp4",
        localStreamName: "v",
      });
      assert.equal(started.status, 200, await started.text());

      const lonely = await server.post("/stream/event/send", {
        streamName: "v",
        payload: { note: 1 },
      });
      assert.equal(lonely.status, 409);
      assert.match((await lonely.json()).message, /stream v has no player that takes events/);
      const unknown = await server.post("/stream/event/send", { streamName: "x", payload: {} });
      assert.equal(unknown.status, 404);
      await unknown.body?.cancel();

      pc.addTransceiver("video", { direction: "recvonly" });
      pc.addTransceiver("audio", { direction: "recvonly" });
      await pc.setLocalDescription(await pc.createOffer());
      const playId = crypto.randomUUID();
      client.send("playStream", {
        mediaSessionId: playId,
        name: "v",
        published: false,
        hasVideo: true,
        hasAudio: true,
        status: "PENDING",
        sdp: pc.localDescription!.sdp,
      });
      await client.next("setRemoteSDP", 10_000);

      const sent = await server.post("/stream/event/send", {
        streamName: "v",
        payload: { note: 2 },
      });
      assert.equal(sent.status, 200, await sent.text());
      const [event] = await client.next("notifyStreamEvent") as [Record<string, unknown>];
      assert.deepEqual(
        [event.mediaSessionId, event.type, event.payload, event.streamName],
        [playId, "data", { note: 2 }, "v"],
      );

      client.send("stopStream", { mediaSessionId: playId, name: "v" });
      assert.equal((await nextStatus(client, playId)).status, "STOPPED");
      const after = await server.post("/stream/event/send", { streamName: "v", payload: {} });
      assert.equal(after.status, 409);
      await after.body?.cancel();
    } finally {
      await pc.close();
      await client.close();
      await server.stop();
    }
  },
});

Deno.test({
  name:
    "mute events of a WebRTC publisher reach its rendition players too; a late player's PLAYING carries the state",
  ...weriftSanitizers,
  fn: async () => {
    const server = await startTestServer(testConfig({ media: { engine: "native" } }));
    const clients: WcsClient[] = [];
    const connect = async () => {
      const { client } = await WcsClient.connect(server.wsUrl);
      clients.push(client);
      return client;
    };
    const publisher = new TestPublisher("H264");
    const players = [new TestPlayer("H264"), new TestPlayer("H264"), new TestPlayer("H264")];
    try {
      const pubClient = await connect();
      const pubId = await startPublishing(publisher, pubClient, { name: "cam" });
      // One player of the forwarded RTP, one asking a smaller picture (a rendition).
      const plays = [{}, { width: 320, height: 240 }];
      const played: { client: WcsClient; id: string }[] = [];
      for (const [i, constraints] of plays.entries()) {
        const client = await connect();
        const id = crypto.randomUUID();
        await players[i].play(client, { mediaSessionId: id, name: "cam", ...constraints });
        const playing = await nextStatus(client, id);
        assert.equal(playing.status, "PLAYING");
        assert.deepEqual(playing.videoState, { muted: false });
        played.push({ client, id });
      }
      assert.equal(server.services.playRenditions.size, 1, "the second player has a rendition");

      pubClient.send("sendStreamEvent", { mediaSessionId: pubId, type: "videoMuted" });
      for (const { client, id } of played) {
        const [event] = await client.next("notifyStreamEvent", 5000) as [Record<string, unknown>];
        assert.deepEqual(
          [event.mediaSessionId, event.type, (event.payload as Record<string, unknown>).streamName],
          [id, "videoMuted", "cam"],
        );
      }
      const found = await server.post("/stream/find", { mediaSessionId: played[1].id });
      assert.deepEqual((await found.json())[0].videoState, { muted: true });

      // Joining after the mute, through a rendition too: its PLAYING says muted.
      const late = await connect();
      const lateId = crypto.randomUUID();
      await players[2].play(late, { mediaSessionId: lateId, name: "cam", width: 320, height: 240 });
      const playing = await nextStatus(late, lateId);
      assert.equal(playing.status, "PLAYING");
      assert.deepEqual([playing.videoState, playing.audioState], [{ muted: true }, {
        muted: false,
      }]);
    } finally {
      await publisher.close();
      for (const player of players) await player.close();
      for (const client of clients) await client.close();
      await server.stop();
    }
  },
});
