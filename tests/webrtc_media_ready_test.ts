/**
 * A player on the FFI send engine (of a WebRTC publish, or of a VOD file's frames) gets the
 * engine's path even when its DTLS handshake comes well after ICE: its tracks are attached when the peer's media is ready (every DTLS
 * transport connected, so the SRTP keys the engine takes exist), not at the first sign of
 * connectivity. The test player drops its DTLS datagrams for 1.5 s after its first one.
 */
import assert from "node:assert/strict";
import type { RTCPeerConnection } from "werift";
import type { TestServer } from "./helpers/test_server.ts";
import { startTestServer, testConfig } from "./helpers/test_server.ts";
import { WcsClient } from "./helpers/wcs_client.ts";
import { makeClip } from "./helpers/media_fixtures.ts";
import {
  nextStatus,
  startPublishing,
  TestPlayer,
  TestPublisher,
  waitFor,
  weriftSanitizers,
  withTwoClients,
} from "./webrtc_helpers.ts";

/** How long the player drops its DTLS datagrams after the first one, in ms. */
const dtlsHoldMs = 1500;

/** The fields of werift's ICE connection the hold replaces. */
interface SendingConnection {
  send(data: Uint8Array): Promise<void>;
}

/**
 * Drops every DTLS datagram `pc` sends during `holdMs` from the first one (RFC 7983: DTLS
 * records start with a byte of 20..63), so the handshake completes only with the
 * retransmissions after it; held datagrams sent later in a burst made werift's DTLS client
 * fail. Returns when the hold started (performance.now() ms; 0 while none was sent).
 */
function holdFirstDtlsFlights(pc: RTCPeerConnection, holdMs: number): () => number {
  let startedMs = 0;
  for (const transport of pc.dtlsTransports) {
    const connection = transport.iceTransport.connection as unknown as SendingConnection;
    const send = connection.send.bind(connection);
    connection.send = (data: Uint8Array) => {
      if (data[0] < 20 || data[0] > 63) return send(data);
      if (startedMs === 0) startedMs = performance.now();
      if (performance.now() >= startedMs + holdMs) return send(data);
      return Promise.resolve();
    };
  }
  return () => startedMs;
}

/** TestPlayer.play with the DTLS hold installed between the offer and the answer. */
async function playWithDtlsHeld(
  player: TestPlayer,
  client: WcsClient,
  mediaSessionId: string,
  name: string,
): Promise<() => number> {
  const pc = player.pc;
  await pc.setLocalDescription(await pc.createOffer());
  const heldSince = holdFirstDtlsFlights(pc, dtlsHoldMs);
  client.send("playStream", {
    published: false,
    hasVideo: true,
    hasAudio: true,
    status: "PENDING",
    mediaProvider: "WebRTC",
    mediaSessionId,
    name,
    sdp: pc.localDescription!.sdp,
  });
  const [, sdp] = await client.next("setRemoteSDP", 10_000) as [string, string, boolean];
  await pc.setRemoteDescription({ type: "answer", sdp });
  return heldSince;
}

function startServer(): Promise<TestServer> {
  return startTestServer(
    testConfig({ media: { iceMux: "on", sendEngine: "ffi", sendWorkers: 1 } }),
  );
}

Deno.test({
  name:
    "send engine ffi: a player whose DTLS handshake lags ICE by 1.5 s still plays through the engine",
  ...weriftSanitizers,
  fn: async () => {
    const publisher = new TestPublisher("VP8");
    const player = new TestPlayer("VP8");
    await withTwoClients([publisher, player], async (s, pubClient, playClient) => {
      await startPublishing(publisher, pubClient, { name: "held" });
      const id = crypto.randomUUID();
      const heldSince = await playWithDtlsHeld(player, playClient, id, "held");
      assert.equal((await nextStatus(playClient, id, 15_000)).status, "PLAYING");
      // The hold really delayed the handshake: PLAYING came after it ended.
      assert.ok(heldSince() > 0, "the player sent DTLS");
      assert.ok(
        performance.now() >= heldSince() + dtlsHoldMs,
        "PLAYING before the held DTLS flights went out",
      );
      // Both tracks are on the engine: werift's path (the fallback) carries none of them.
      assert.equal(s.services.sendPaths.size, 2, "the player's 2 tracks on the engine");
      await waitFor(
        () => player.received.video > 50 && player.received.audio > 50,
        10_000,
        "media through the engine",
      );
      const stats = [...(await s.services.sendPaths.engine!.stats()).values()];
      assert.equal(stats.length, 2);
      assert.ok(stats.every((x) => x.sent > 20), JSON.stringify(stats));
    }, startServer);
  },
});

Deno.test({
  name:
    "send engine ffi: a player of a VOD file (frames packetized per player) whose DTLS lags ICE by 1.5 s still plays through the engine",
  ...weriftSanitizers,
  fn: async () => {
    const config = testConfig({ media: { iceMux: "on", sendEngine: "ffi", sendWorkers: 1 } });
    await Deno.mkdir(config.folders.media, { recursive: true });
    await makeClip(`${config.folders.media}/clip.mp4`, { seconds: 20, audio: "opus" });
    const s = await startTestServer(config);
    const player = new TestPlayer("H264");
    const { client } = await WcsClient.connect(s.wsUrl);
    try {
      const res = await s.post("/vod/startup", {
        uri: "vod-live://clip.mp4",
        localStreamName: "f",
      });
      assert.equal(res.status, 200, await res.text());
      const id = crypto.randomUUID();
      const heldSince = await playWithDtlsHeld(player, client, id, "f");
      assert.equal((await nextStatus(client, id, 15_000)).status, "PLAYING");
      assert.ok(heldSince() > 0, "the player sent DTLS");
      assert.ok(
        performance.now() >= heldSince() + dtlsHoldMs,
        "PLAYING before the held DTLS flights went out",
      );
      assert.equal(s.services.sendPaths.size, 2, "the player's 2 tracks on the engine");
      await waitFor(
        () => player.received.video > 50 && player.received.audio > 50,
        15_000,
        "media through the engine",
      );
    } finally {
      await player.pc.close();
      await client.close();
      await s.stop();
    }
  },
});
