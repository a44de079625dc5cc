/**
 * The server's ICE mux with werift playing the Web SDK: publish and play go through the one
 * UDP port of `ports.webrtcUdp`, /health counts its datagrams, and a burst of hostile
 * datagrams at that port is dropped and counted while the player keeps receiving; with an IPv6
 * media address (::1) the mux is an IPv6 socket and werift publishes and plays over it.
 */
import assert from "node:assert/strict";
import dgram from "node:dgram";
import { IceMux } from "../media/protocols/webrtc/ice_mux.ts";
import { afInet6 } from "../media/send_engine/sockaddr.ts";
import { openPeerCount } from "../media/protocols/webrtc/peer.ts";
import { startTestServer, testConfig } from "./helpers/test_server.ts";
import { WcsClient } from "./helpers/wcs_client.ts";
import {
  nextStatus,
  startPlaying,
  TestPlayer,
  TestPublisher,
  waitFor,
  weriftSanitizers,
} from "./webrtc_helpers.ts";

/** Hostile datagrams sent at the mux port. */
const hostileDatagrams = 10_000;

/** The distinct host candidate ports of an SDP. */
function candidatePorts(sdp: string): number[] {
  const ports = [...sdp.matchAll(/a=candidate:\S+ 1 udp \d+ \S+ (\d+) typ host/g)];
  return [...new Set(ports.map((m) => +m[1]))];
}

/** The mux figures of /health. */
async function muxHealth(restUrl: string): Promise<Record<string, number>> {
  const health = await (await fetch(`${restUrl}/health`)).json();
  return health.limits.listeners.webrtcUdp;
}

Deno.test({
  name: "ICE mux: Web SDK publish and play on one UDP port; a hostile burst is dropped and counted",
  ...weriftSanitizers,
  fn: async () => {
    const muxesBefore = IceMux.openCount;
    // werift's sender: its SRTP goes through the mux's counters (the send engine's does not;
    // tests/webrtc_send_engine_test.ts covers the engine on the mux).
    const s = await startTestServer(testConfig({ media: { iceMux: "on", sendEngine: "werift" } }));
    const { client: pubClient } = await WcsClient.connect(s.wsUrl);
    const { client: playClient } = await WcsClient.connect(s.wsUrl);
    const publisher = new TestPublisher("H264");
    const player = new TestPlayer("H264");
    const hostile = dgram.createSocket("udp4");
    try {
      const port = s.webrtcUdpPort!;
      assert.ok(port >= s.services.config.media.udpPortMin, `mux port ${port} in the media range`);
      const pubId = crypto.randomUUID();
      const answer = await publisher.publish(pubClient, { mediaSessionId: pubId, name: "cam" });
      assert.deepEqual(candidatePorts(answer), [port]);
      publisher.start();
      assert.equal((await nextStatus(pubClient, pubId)).status, "PUBLISHING");
      await startPlaying(player, playClient, { name: "cam" });
      await waitFor(
        () => player.received.video > 50 && player.received.audio > 50,
        10_000,
        "media",
      );
      assert.ok(player.firstKeyframeMs > 0, "a keyframe reached the player");
      const remote = player.pc.remoteDescription!.sdp;
      assert.deepEqual(candidatePorts(remote), [port], "the player's answer is on the mux too");

      const before = await muxHealth(s.restUrl);
      assert.ok(before.datagramsIn > 100 && before.datagramsOut > 100, JSON.stringify(before));
      assert.equal(before.droppedUnknownSource, 0);
      await new Promise<void>((resolve) => hostile.bind(0, "127.0.0.1", resolve));
      const videoBefore = player.received.video;
      // Paced so that the kernel's receive buffer keeps every datagram: all must be counted.
      for (let sent = 0; sent < hostileDatagrams; sent += 250) {
        for (let i = 0; i < 250; i++) {
          hostile.send(crypto.getRandomValues(new Uint8Array(20 + (i % 200))), port, "127.0.0.1");
        }
        await new Promise((r) => setTimeout(r, 10));
      }
      await waitFor(
        () => s.services.iceMux!.counters.droppedUnknownSource >= hostileDatagrams,
        10_000,
        "the hostile datagrams to be counted",
      );
      const after = await muxHealth(s.restUrl);
      assert.equal(after.droppedUnknownSource, hostileDatagrams);
      const metrics = await (await fetch(`${s.restUrl}/metrics`)).text();
      assert.match(metrics, /mediaserver_ice_mux_dropped_total\{reason="unknown_source"\} 10000\n/);
      assert.match(metrics, /mediaserver_ice_mux_datagrams_total\{direction="in"\} [1-9]/);
      await waitFor(() => player.received.video > videoBefore + 50, 5000, "media after the burst");
    } finally {
      await new Promise<void>((resolve) => hostile.close(() => resolve()));
      await publisher.close();
      await player.close();
      await pubClient.close();
      await playClient.close();
      await s.stop();
    }
    assert.equal(openPeerCount(), 0);
    assert.equal(IceMux.openCount, muxesBefore, "the server closed its mux");
  },
});

Deno.test({
  name: "ICE mux off: each peer binds a port of its own and /health has no mux figures",
  ...weriftSanitizers,
  fn: async () => {
    const s = await startTestServer(testConfig({ media: { iceMux: "off" } }));
    const { client } = await WcsClient.connect(s.wsUrl);
    const publisher = new TestPublisher("VP8");
    try {
      assert.equal(s.webrtcUdpPort, undefined);
      assert.equal(s.services.iceMux, undefined);
      const id = crypto.randomUUID();
      const answer = await publisher.publish(client, { mediaSessionId: id, name: "cam" });
      const [port] = candidatePorts(answer);
      assert.ok(port >= 31000 && port <= 31999, `${port} from the media range`);
      assert.equal(await muxHealth(s.restUrl), undefined);
    } finally {
      await publisher.close();
      await client.close();
      await s.stop();
    }
  },
});

Deno.test({
  name:
    "ICE mux on IPv6: with the media bind ::1 the mux socket is AF_INET6, answers carry ::1 on its port, werift publishes and plays over ::1 (the player through the send engine)",
  ...weriftSanitizers,
  fn: async () => {
    const muxesBefore = IceMux.openCount;
    const s = await startTestServer(testConfig({
      binds: { media: "::1" },
      media: { iceMux: "on", sendEngine: "ffi", sendWorkers: 1 },
    }));
    const { client: pubClient } = await WcsClient.connect(s.wsUrl);
    const { client: playClient } = await WcsClient.connect(s.wsUrl);
    const publisher = new TestPublisher("VP8", 2, "udp6");
    const player = new TestPlayer("VP8", undefined, "udp6");
    try {
      const mux = s.services.iceMux!;
      assert.equal(mux.family, afInet6, "an AF_INET6 socket");
      assert.equal(mux.host, "::1");
      const pubId = crypto.randomUUID();
      const answer = await publisher.publish(pubClient, { mediaSessionId: pubId, name: "v6" });
      const candidates = answer.split("\r\n").filter((l) => l.startsWith("a=candidate:"));
      assert.ok(candidates.length > 0, answer);
      for (const c of candidates) {
        const fields = c.split(" ");
        assert.deepEqual([fields[2], fields[4], fields[5]], ["udp", "::1", `${mux.port}`], c);
      }
      publisher.start();
      assert.equal((await nextStatus(pubClient, pubId)).status, "PUBLISHING");
      await startPlaying(player, playClient, { name: "v6" });
      await waitFor(
        () => player.received.video > 50 && player.received.audio > 50,
        10_000,
        "media over ::1",
      );
      const pair = player.pc.dtlsTransports[0].iceTransport.connection.nominated!;
      assert.deepEqual(
        [pair.localCandidate.host, pair.remoteCandidate.host, pair.remoteCandidate.port],
        ["::1", "::1", mux.port],
      );
      assert.equal(s.services.sendPaths.size, 2, "the player's 2 tracks on the engine");
      const stats = [...(await s.services.sendPaths.engine!.stats()).values()];
      assert.ok(stats.every((x) => x.sent > 20 && x.dropped === 0), JSON.stringify(stats));
    } finally {
      await publisher.close();
      await player.pc.close();
      await pubClient.close();
      await playClient.close();
      await s.stop();
    }
    assert.equal(IceMux.openCount, muxesBefore, "the mux socket closed");
    await waitFor(() => openPeerCount() === 0, 5000, "every peer closed");
  },
});
