/**
 * REMB to WebRTC publishers, werift on both ends: a Web SDK publisher (defaultApp) and a WHIP
 * publisher that offer goog-remb on video are told once connected, before any media, and then
 * every 500 ms for their video SSRC,
 * `media.maxPublishBitrateKbps`, or their own lower `maxBitrate` (stream object, b=AS); a
 * publisher whose packets arrive with loss is told less, never under
 * `media.minPublishBitrateKbps`; players negotiate no goog-remb and are told nothing.
 */
import assert from "node:assert/strict";
import { Buffer } from "node:buffer";
import { type RTCPeerConnection, RtpHeader, RtpPacket } from "werift";
import { openPeerCount } from "../media/protocols/webrtc/peer.ts";
import { readRemb, type Remb } from "../media/rtp/remb.ts";
import { startTestServer, testConfig, type TestServer } from "./helpers/test_server.ts";
import { WcsClient } from "./helpers/wcs_client.ts";
import {
  nextStatus,
  TestPlayer,
  TestPublisher,
  waitFor,
  weriftSanitizers,
  withTwoClients,
} from "./webrtc_helpers.ts";

const capKbps = 3000;
const floorKbps = 300;

function server(): Promise<TestServer> {
  return startTestServer(testConfig({
    media: { maxPublishBitrateKbps: capKbps, minPublishBitrateKbps: floorKbps },
  }));
}

/** The REMBs `pc` receives from now on. */
function rembsTo(pc: RTCPeerConnection): Remb[] {
  const rembs: Remb[] = [];
  pc.dtlsTransports[0].onRtcp.subscribe((rtcp) => {
    const remb = readRemb(rtcp);
    if (remb) rembs.push(remb);
  });
  return rembs;
}

/** Asserts that `remb` says `kbps` (REMB's 18-bit mantissa rounds down). */
function assertKbps(remb: Remb | undefined, kbps: number): void {
  assert.ok(remb, "a REMB came");
  const bps = kbps * 1000;
  assert.ok(remb.bps <= bps && remb.bps > bps * (1 - 2 ** -17) - 1, `${remb.bps} bit/s`);
}

/** The m-section of `kind` in an SDP. */
function section(sdp: string, kind: "audio" | "video"): string {
  return sdp.split(/\r\nm=/).find((s) => s.startsWith(kind)) ?? "";
}

function videoSsrc(publisher: TestPublisher): number {
  return publisher.pc.getTransceivers().find((t) => t.kind === "video")!.sender.ssrc;
}

Deno.test({
  name:
    "publish REMB: a Web SDK publisher is told the cap or its lower maxBitrate; players nothing",
  ...weriftSanitizers,
  fn: async () => {
    const publisher = new TestPublisher("H264");
    const limited = new TestPublisher("VP8");
    const player = new TestPlayer("H264");
    await withTwoClients([publisher, limited, player], async (_s, pubClient, playClient) => {
      const pubId = crypto.randomUUID();
      const answer = await publisher.publish(pubClient, { mediaSessionId: pubId, name: "cam" });
      assert.match(section(answer, "video"), /a=rtcp-fb:\d+ goog-remb/);
      assert.doesNotMatch(section(answer, "audio"), /goog-remb/);
      const rembs = rembsTo(publisher.pc);
      // The first comes once the transport connects, before any media (a browser sizes its
      // first pictures by the rate it has then): it names no SSRC yet.
      await waitFor(() => rembs.length >= 1, 5000, "a REMB before media");
      assertKbps(rembs[0], capKbps);
      assert.deepEqual(rembs[0].ssrcs, []);
      publisher.start();
      assert.equal((await nextStatus(pubClient, pubId)).status, "PUBLISHING");
      await waitFor(() => rembs.length >= 4, 5000, "3 more REMBs to the publisher");
      for (const remb of rembs.slice(2)) {
        assertKbps(remb, capKbps);
        assert.deepEqual(remb.ssrcs, [videoSsrc(publisher)]);
      }

      const playId = crypto.randomUUID();
      await player.play(playClient, { mediaSessionId: playId, name: "cam" });
      const toPlayer = rembsTo(player.pc);
      assert.equal((await nextStatus(playClient, playId)).status, "PLAYING");
      assert.doesNotMatch(player.pc.remoteDescription!.sdp, /goog-remb/);
      const seen = rembs.length;
      await waitFor(() => player.received.video > 50, 10_000, "the player's video");
      await waitFor(() => rembs.length >= seen + 3, 5000, "3 more REMBs to the publisher");
      assert.equal(toPlayer.length, 0, "no REMB to the player");

      // The Web SDK's constraints.video.maxBitrate, sent in the stream object (kbit/s).
      const limitedId = crypto.randomUUID();
      await limited.publish(pubClient, {
        mediaSessionId: limitedId,
        name: "limited",
        maxBitrate: 800,
      });
      const limitedRembs = rembsTo(limited.pc);
      limited.start();
      assert.equal((await nextStatus(pubClient, limitedId)).status, "PUBLISHING");
      await waitFor(() => limitedRembs.length >= 2, 5000, "REMBs to the limited publisher");
      assertKbps(limitedRembs.at(-1), 800);
      assert.deepEqual(limitedRembs.at(-1)!.ssrcs, [videoSsrc(limited)]);
    }, server);
    assert.equal(openPeerCount(), 0);
  },
});

Deno.test({
  name: "publish REMB: a WHIP publisher is told its offer's b=AS when under the cap",
  ...weriftSanitizers,
  fn: async () => {
    const s = await server();
    const publisher = new TestPublisher("VP8");
    let location: string | null = null;
    try {
      await publisher.pc.setLocalDescription(await publisher.pc.createOffer());
      // b=AS goes after the video section's c= line (RFC 8866's order).
      const offer = publisher.pc.localDescription!.sdp.replace(
        /(m=video[^]*?\r\nc=[^\r]*\r\n)/,
        "$1b=AS:600\r\n",
      );
      assert.match(offer, /b=AS:600/);
      const res = await fetch(`${s.restUrl}/whip/whipcam`, {
        method: "POST",
        headers: { "Content-Type": "application/sdp" },
        body: offer,
      });
      const answer = await res.text();
      assert.equal(res.status, 201, answer);
      location = res.headers.get("location");
      assert.match(section(answer, "video"), /a=rtcp-fb:\d+ goog-remb/);
      await publisher.pc.setRemoteDescription({ type: "answer", sdp: answer });
      const rembs = rembsTo(publisher.pc);
      publisher.start();
      await waitFor(() => rembs.length >= 2, 10_000, "REMBs to the WHIP publisher");
      assertKbps(rembs.at(-1), 600);
      assert.deepEqual(rembs.at(-1)!.ssrcs, [videoSsrc(publisher)]);
    } finally {
      if (location) {
        await (await fetch(`${s.restUrl}${location}`, { method: "DELETE" })).body?.cancel();
      }
      await publisher.close();
      await s.stop();
    }
    assert.equal(openPeerCount(), 0);
  },
});

Deno.test({
  name: "publish REMB: loss cuts what a publisher is told, never under the configured floor",
  ...weriftSanitizers,
  fn: async () => {
    const s = await server();
    const { client } = await WcsClient.connect(s.wsUrl);
    const publisher = new TestPublisher("VP8");
    let timer: ReturnType<typeof setInterval> | undefined;
    try {
      const id = crypto.randomUUID();
      await publisher.publish(client, { mediaSessionId: id, name: "lossy" });
      const rembs = rembsTo(publisher.pc);
      // 50 VP8 packets a second of 1000 bytes (400 kbit/s), every other sequence number
      // skipped while `lossy`: half of them never arrive, as the server sees it.
      let seq = 100;
      let lossy = true;
      const payload = Buffer.alloc(1000, 0x22);
      payload[0] = 0x10;
      timer = setInterval(() => {
        seq = (seq + (lossy ? 2 : 1)) & 0xffff;
        const header = new RtpHeader({
          sequenceNumber: seq,
          timestamp: seq * 1800,
          marker: true,
          payloadType: 96,
        });
        publisher.video.writeRtp(new RtpPacket(header, payload));
      }, 20);
      assert.equal((await nextStatus(client, id)).status, "PUBLISHING");
      await waitFor(() => rembs.length >= 4, 10_000, "REMBs to the lossy publisher");
      assertKbps(rembs.at(-1), floorKbps);
      lossy = false;
      const seen = rembs.length;
      await waitFor(() => rembs.length >= seen + 4, 10_000, "REMBs once clean");
      const grown = rembs.at(-1)!.bps / 1000;
      assert.ok(grown > floorKbps && grown < capKbps, `grown back to ${grown} kbit/s`);
    } finally {
      clearInterval(timer);
      await publisher.close();
      await client.close();
      await s.stop();
    }
    assert.equal(openPeerCount(), 0);
  },
});
