/**
 * Bandwidth estimates in SFU rooms, with werift participants: the server stamps abs-send-time
 * on what a subscriber receives and negotiates goog-remb; a subscriber's REMB under its layer's
 * rate switches it to the lowest layer at once (one SSRC, decoded without error), a high one
 * brings it back up after the stable time; /sfu/stats shows the estimate; a publisher is sent
 * REMB with the configured cap for its layers' SSRCs.
 */
import assert from "node:assert/strict";
import type { RtpPacket } from "werift";
import { openPeerCount } from "../media/protocols/webrtc/peer.ts";
import { absSendTime, absSendTimeUri } from "../media/rtp/abs_send_time.ts";
import { readRemb, rembPacket } from "../media/rtp/remb.ts";
import { H264Receiver } from "./helpers/h264_check.ts";
import { waitFor } from "./helpers/media_fixtures.ts";
import { SfuClient } from "./helpers/sfu_client.ts";
import {
  joinAsSimulcastPublisher,
  makeLayerClips,
  type SimulcastPublisher,
  threeLayerShapes,
} from "./helpers/simulcast_publisher.ts";
import { startTestServer } from "./helpers/test_server.ts";
import { weriftSanitizers } from "./webrtc_helpers.ts";

type Feedback = { remb: number };
type Stats = {
  participants: {
    nickName: string;
    outgoingTracks: { id: string; feedbackStats: { sentREMB: number } }[];
    incomingTracks: Record<string, string | null>;
    incomingFeedbackStats: Record<string, Feedback>;
  }[];
};

Deno.test({
  name: "SFU REMB: a subscriber's estimate lowers its layer at once and lets it climb back",
  ...weriftSanitizers,
  fn: async () => {
    const clips = await makeLayerClips(threeLayerShapes, 3);
    const server = await startTestServer();
    const clients: SfuClient[] = [];
    let publishing: SimulcastPublisher | undefined;
    let rembTimer: ReturnType<typeof setInterval> | undefined;
    const dir = await Deno.makeTempDir({ prefix: "sfu-remb-" });
    try {
      const pub = await SfuClient.connect(server.wsUrl, "pub", "bwe", { simulcast: true });
      const sub = await SfuClient.connect(server.wsUrl, "sub", "bwe", { absSendTime: true });
      clients.push(pub, sub);
      publishing = await joinAsSimulcastPublisher(pub, "bwe", clips);
      // What the publisher is told: REMB for its layers' SSRCs.
      const rembsToPublisher: { bps: number; ssrcs: readonly number[] }[] = [];
      pub.pc.dtlsTransports[0].onRtcp.subscribe((rtcp) => {
        const remb = readRemb(rtcp);
        if (remb) rembsToPublisher.push(remb);
      });

      /** abs-send-time stamps received, with their arrival times. */
      const stamps: { value: number; atMs: number }[] = [];
      let absId = -1;
      const received = new H264Receiver(sub.pc, (p: RtpPacket) => {
        const stamp = p.header.extensions.find((e) => e.id === absId);
        if (stamp) {
          const value = (stamp.payload[0] << 16) | (stamp.payload[1] << 8) | stamp.payload[2];
          stamps.push({ value, atMs: performance.timeOrigin + performance.now() });
        }
      });
      const { meter, ssrcs } = received;
      await sub.join("bwe", "1");
      const added = await sub.waitFor((e) => e.type === "ADD_TRACKS");
      const video = (added.info as { info: { id: string; mid: string; type: string }[] }).info
        .find((t) => t.type === "VIDEO")!;
      const offer = await sub.waitFor((e) =>
        e.type === "REMOTE_SDP" && (e.info as { type: string }).type === "offer"
      );
      const offerSdp = (offer.info as { sdp: string }).sdp;
      assert.match(offerSdp, /a=rtcp-fb:\d+ goog-remb/);
      assert.match(offerSdp, new RegExp(`a=extmap:\\d+ ${absSendTimeUri}`));
      await sub.until(() => sub.pc.connectionState === "connected", "subscriber connected");
      absId = sub.pc.getTransceivers().find((t) => t.mid === video.mid)!.headerExtensions
        .find((e) => e.uri === absSendTimeUri)!.id;

      const stats = async (): Promise<Stats> => {
        const res = await server.post("/sfu/stats", { roomName: "bwe" });
        assert.equal(res.status, 200);
        return await res.json();
      };
      const subStats = async () => (await stats()).participants.find((p) => p.nickName === "sub")!;
      await sub.until(() => meter.width === 640, "the subscriber decoding 640x360");
      assert.equal((await subStats()).incomingTracks[video.id], "h send");
      assert.equal((await subStats()).incomingFeedbackStats[video.id].remb, 0, "no REMB yet");

      // The stamps follow the send time: 2^18 per second, 24 bits.
      await sub.until(() => stamps.length >= 50, "abs-send-time stamps");
      const first = stamps[0];
      const last = stamps[stamps.length - 1];
      const stampedMs = ((last.value - first.value) & 0xffffff) / 262.144;
      const elapsedMs = last.atMs - first.atMs;
      assert.ok(Math.abs(stampedMs - elapsedMs) < 100, `${stampedMs} ms stamped, ${elapsedMs} ms`);
      assert.ok(
        Math.abs(((absSendTime(last.atMs) - last.value) << 8 >> 8) / 262.144) < 200,
        "stamped with the send time",
      );

      // The subscriber's estimate, sent as a browser does (every 500 ms).
      const transport = sub.pc.dtlsTransports[0];
      let estimateBps = 100_000;
      const sendRemb = () =>
        transport.sendRtcp([rembPacket(1, estimateBps, [...ssrcs])]).catch(() => {});
      sendRemb();
      rembTimer = setInterval(sendRemb, 500);
      const downFromMs = performance.now();
      await sub.until(() => meter.width === 160, "lowered to 160 by the estimate", 5000);
      const downMs = Math.round(performance.now() - downFromMs);
      let s = await subStats();
      assert.equal(s.incomingTracks[video.id], "l send");
      assert.equal(s.incomingFeedbackStats[video.id].remb, 100_000);
      // It stays there while the estimate stays low.
      await new Promise((r) => setTimeout(r, 3000));
      assert.equal((await subStats()).incomingTracks[video.id], "l send");
      assert.equal(meter.width, 160);

      // A high estimate: up one layer per stable time (8 s), to the top.
      estimateBps = 10_000_000;
      sendRemb();
      const upFromMs = performance.now();
      await sub.until(() => meter.width === 640, "back to 640 with a high estimate", 30_000);
      const upMs = Math.round(performance.now() - upFromMs);
      s = await subStats();
      assert.equal(s.incomingTracks[video.id], "h send");
      assert.equal(s.incomingFeedbackStats[video.id].remb, 10_000_000);
      console.log(`REMB 100 kbit/s: down to l in ${downMs} ms; 10 Mbit/s: back to h in ${upMs} ms`);

      // The publisher was told the configured cap (2500 kbit/s) for its three layers.
      const told = rembsToPublisher[rembsToPublisher.length - 1];
      assert.equal(told.bps, 2_500_000);
      assert.deepEqual([...told.ssrcs].sort(), [0x2000, 0x2001, 0x2002]);
      const pubStats = (await stats()).participants.find((p) => p.nickName === "pub")!;
      assert.equal(pubStats.outgoingTracks[0].feedbackStats.sentREMB, 2_500_000);
      clearInterval(rembTimer);
      publishing.stop();

      // One SSRC, decoded without an error from 640 down to 160 and up again.
      assert.equal(ssrcs.size, 1);
      const { errors, sizes } = await received.decode(`${dir}/received.h264`);
      assert.equal(errors, "", "decoder errors");
      const runs = sizes.filter((size, i) => size !== sizes[i - 1]);
      assert.deepEqual(runs, ["640,360", "160,90", "320,180", "640,360"]);
    } finally {
      clearInterval(rembTimer);
      publishing?.stop();
      await Promise.allSettled(clients.map((c) => c.close()));
      await server.stop();
      await Deno.remove(dir, { recursive: true });
    }
    await waitFor("every server peer closed", () => openPeerCount() === 0 ? true : undefined);
  },
});
