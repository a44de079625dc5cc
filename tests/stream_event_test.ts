/**
 * `/stream/event/send` on a stream that did not come over WebRTC: the event reaches its Web
 * SDK players, and a stream without one answers 409 (nothing would get the event).
 */
import assert from "node:assert/strict";
import { RTCPeerConnection, RTCRtpCodecParameters } from "werift";
import { makeClip } from "./helpers/media_fixtures.ts";
import { startTestServer, testConfig } from "./helpers/test_server.ts";
import { WcsClient } from "./helpers/wcs_client.ts";
import { nextStatus, weriftSanitizers } from "./webrtc_helpers.ts";

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
