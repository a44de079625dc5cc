/**
 * WebRTC publishes that never connect end with the WCS status of the phase that failed, and
 * the log says what ICE and DTLS reached, at info.
 */
import assert from "node:assert/strict";
import { RTCPeerConnection, RTCRtpCodecParameters } from "werift";
import { createLogger } from "../core/log.ts";
import type { StreamStatus } from "../media/protocols/webrtc/client.ts";
import { type NegotiatedCodec, pickPublishCodec } from "../media/protocols/webrtc/codecs.ts";
import { openPeerCount } from "../media/protocols/webrtc/peer.ts";
import { parseOfferMedia } from "../media/protocols/webrtc/sdp.ts";
import { WebRtcPublisher } from "../media/providers/webrtc_publisher.ts";
import { loopbackIce, waitFor, weriftSanitizers } from "./webrtc_helpers.ts";

/** A werift offerer on 127.0.0.1 sending VP8 and Opus. */
async function offerer(): Promise<RTCPeerConnection> {
  const pc = new RTCPeerConnection({
    ...loopbackIce(),
    codecs: {
      video: [new RTCRtpCodecParameters({ mimeType: "video/VP8", clockRate: 90000 })],
      audio: [new RTCRtpCodecParameters({ mimeType: "audio/opus", clockRate: 48000, channels: 2 })],
    },
  });
  pc.addTransceiver("video", { direction: "sendonly" });
  pc.addTransceiver("audio", { direction: "sendonly" });
  await pc.setLocalDescription(await pc.createOffer());
  return pc;
}

/** A publisher of `sdp` whose statuses and info log lines are collected. */
function publisherOf(sdp: string, mediaStartTimeoutMs?: number) {
  const statuses: { status: StreamStatus; info: string }[] = [];
  const lines: Record<string, unknown>[] = [];
  const publisher = new WebRtcPublisher({
    name: "cam",
    mediaSessionId: crypto.randomUUID(),
    sessionId: "session",
    appKey: "app",
    nodeId: "node",
    clientStream: {},
    sdp,
    codecs: parseOfferMedia(sdp).map(pickPublishCodec) as NegotiatedCodec[],
    address: { bind: "127.0.0.1", portMin: 31000, portMax: 31999 },
    client: { status: (status, info) => statuses.push({ status, info }), event: () => {} },
    log: createLogger({ level: "info", write: (line) => lines.push(JSON.parse(line)) }),
    mediaStartTimeoutMs,
  });
  return { publisher, statuses, lines };
}

Deno.test({
  name: "a browser that never connects: FAILED 'Failed by ICE timeout', logged with ICE state",
  ...weriftSanitizers,
  fn: async () => {
    const pc = await offerer();
    // The SDK's offers carry no candidate (nor their end): the server learns the browser's
    // from its checks.
    const sdp = pc.localDescription!.sdp.replace(/a=(end-of-)?candidate[^\r]*\r\n/g, "");
    const { publisher, statuses, lines } = publisherOf(sdp, 600);
    try {
      await publisher.answer(); // and the answer never reaches the browser
      await waitFor(() => statuses.length > 0, 5000, "the final status");
      assert.deepEqual(statuses, [{ status: "FAILED", info: "Failed by ICE timeout" }]);
      const line = lines.find((l) => l.msg === "WebRTC publish failed: no media from the browser");
      assert.ok(line, JSON.stringify(lines));
      assert.equal(line.level, "info");
      assert.equal(line.info, "Failed by ICE timeout");
      const [transport] = (line.diagnostics as { transports: Record<string, unknown>[] })
        .transports;
      // No connectivity check of the browser ever arrived: that is what the line must show.
      assert.deepEqual([transport.remoteCandidates, transport.nominated], [0, false]);
      assert.equal(transport.iceRole, "controlled");
      assert.equal(openPeerCount(), 0);
    } finally {
      await publisher.terminate("Stopped by user");
      await pc.close();
    }
  },
});

Deno.test({
  name: "a DTLS fingerprint that does not match: FAILED 'Failed by DTLS error', logged",
  ...weriftSanitizers,
  fn: async () => {
    const pc = await offerer();
    // Another certificate's fingerprint: ICE connects, the DTLS check then fails.
    const sdp = pc.localDescription!.sdp.replace(
      /a=fingerprint:sha-256 (\S+)/g,
      (_m, value: string) => `a=fingerprint:sha-256 ${value.split(":").reverse().join(":")}`,
    );
    const { publisher, statuses, lines } = publisherOf(sdp);
    try {
      await pc.setRemoteDescription({ type: "answer", sdp: await publisher.answer() });
      await waitFor(() => statuses.length > 0, 10_000, "the final status");
      assert.deepEqual(statuses, [{ status: "FAILED", info: "Failed by DTLS error" }]);
      const line = lines.find((l) => l.msg === "WebRTC publish failed");
      assert.ok(line, JSON.stringify(lines));
      assert.equal(line.level, "info");
      const [transport] = (line.diagnostics as { transports: Record<string, unknown>[] })
        .transports;
      // ICE had connected (its pair succeeded); DTLS is what failed.
      assert.equal(transport.dtls, "failed");
      assert.match(String((transport.pairs as string[])[0]), /^127\.0\.0\.1:\d+ succeeded$/);
    } finally {
      await publisher.terminate("Stopped by user");
      await pc.close();
    }
  },
});

Deno.test({
  name: "answers to browsers' actpass offers take the DTLS server role and still connect",
  ...weriftSanitizers,
  fn: async () => {
    const pc = await offerer();
    assert.match(pc.localDescription!.sdp, /a=setup:actpass/);
    const { publisher, statuses } = publisherOf(pc.localDescription!.sdp);
    try {
      const answer = await publisher.answer();
      assert.match(answer, /a=setup:passive/);
      assert.doesNotMatch(answer, /a=setup:active/);
      await pc.setRemoteDescription({ type: "answer", sdp: answer });
      await waitFor(() => pc.connectionState === "connected", 10_000, "DTLS");
      assert.deepEqual(statuses, []);
    } finally {
      await publisher.terminate("Stopped by user");
      await pc.close();
    }
  },
});
