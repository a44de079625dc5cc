import assert from "node:assert/strict";
import { Buffer } from "node:buffer";
import {
  MediaStreamTrack,
  RTCPeerConnection,
  RTCRtpCodecParameters,
  RtpHeader,
  RtpPacket,
} from "werift";
import { silentLogger } from "../../core/log.ts";
import type { CodecEngine } from "../engine/engine.ts";
import { openPeerCount } from "../protocols/webrtc/peer.ts";
import { IceMux } from "../protocols/webrtc/ice_mux.ts";
import { EngineSendPaths } from "../protocols/webrtc/engine_send_path.ts";
import { Stream } from "../stream.ts";
import { WebRtcCallPeer } from "./webrtc_call_peer.ts";
import { loopbackIce } from "../../tests/webrtc_helpers.ts";

/** A werift peer standing for the browser: Opus sendrecv on 127.0.0.1. */
function browserPeer(): RTCPeerConnection {
  return new RTCPeerConnection({
    ...loopbackIce(),
    codecs: {
      audio: [new RTCRtpCodecParameters({ mimeType: "audio/opus", clockRate: 48000, channels: 2 })],
    },
  });
}

function callPeer(onFailed: (info: string) => void = () => {}): WebRtcCallPeer {
  return new WebRtcCallPeer({
    callId: "call-1",
    sessionId: "session-1",
    appKey: "defaultApp",
    nodeId: "node",
    address: { bind: "127.0.0.1", portMin: 42000, portMax: 42100 },
    // The streams here are Opus already: no conversion is asked of the engine.
    engine: {} as CodecEngine,
    log: silentLogger,
    onFailed,
  });
}

/** A stream of 20 ms Opus frames, pushed every 20 ms until stopped. */
function opusSource(): { stream: Stream; stop(): void } {
  const stream = new Stream({
    name: "far-end",
    mediaSessionId: "far-end",
    tracks: [{
      id: 0,
      kind: "audio",
      codec: "OPUS",
      clockRate: 48000,
      sampleRate: 48000,
      channels: 2,
    }],
    mediaProvider: "SIP",
    stopProvider: () => Promise.resolve(),
  });
  let pts = 0;
  const timer = setInterval(() => {
    stream.push({
      trackId: 0,
      codec: "OPUS",
      pts,
      dts: pts,
      keyframe: true,
      data: new Uint8Array(60).fill(0xf8),
    });
    pts += 960;
  }, 20);
  return { stream, stop: () => clearInterval(timer) };
}

/** Resolves once `count` RTP packets came on the browser's remote track. */
function packetsArrive(pc: RTCPeerConnection, count: number): Promise<void> {
  const { promise, resolve } = Promise.withResolvers<void>();
  let n = 0;
  pc.onTrack.subscribe((track) => {
    track.onReceiveRtp.subscribe(() => {
      if (++n === count) resolve();
    });
  });
  return promise;
}

/** Sends 20 ms Opus packets from the browser's mic until stopped. */
function sendMic(track: MediaStreamTrack): () => void {
  let seq = 100;
  let ts = 0;
  const timer = setInterval(() => {
    track.writeRtp(
      new RtpPacket(
        new RtpHeader({ sequenceNumber: seq++, timestamp: ts, payloadType: 111, marker: false }),
        Buffer.alloc(60, 0xfc),
      ),
    );
    ts += 960;
  }, 20);
  return () => clearInterval(timer);
}

/**
 * Sends the browser's mic until ten of its frames came out of the call peer's stream and
 * `heard` (the far end's packets at the browser) resolved.
 */
async function talk(peer: WebRtcCallPeer, mic: MediaStreamTrack, heard: Promise<void>) {
  const stopMic = sendMic(mic);
  try {
    assert.equal(await framesOf(peer.received!, 10), 10);
    await heard;
  } finally {
    stopMic();
  }
}

/** The first frames of `stream` (read from now on). */
async function framesOf(stream: Stream, count: number): Promise<number> {
  const reader = stream.reader();
  let n = 0;
  for (; n < count;) {
    const frame = await reader.next();
    if (!frame) break;
    n++;
  }
  reader.close();
  return n;
}

Deno.test("call peer answering the browser's offer: the mic becomes a stream, the far end is heard", async () => {
  const browser = browserPeer();
  const mic = new MediaStreamTrack({ kind: "audio" });
  browser.addTransceiver(mic, { direction: "sendrecv" });
  const heard = packetsArrive(browser, 25);
  const peer = callPeer();
  const far = opusSource();
  try {
    await browser.setLocalDescription(await browser.createOffer());
    const answer = await peer.answer(browser.localDescription!.sdp);
    assert.match(answer, /a=sendrecv/);
    assert.match(answer, /a=candidate:.* 127\.0\.0\.1 /);
    await browser.setRemoteDescription({ type: "answer", sdp: answer });
    assert.equal(peer.hasVideo, false);
    // Played before the connection: sending starts once connected.
    peer.play(far.stream);
    await talk(peer, mic, heard);
    assert.equal(peer.connected, true);
  } finally {
    far.stop();
    await peer.close();
    await browser.close();
  }
  assert.equal(openPeerCount(), 0);
});

Deno.test("call peer offering (incoming call): the browser's answer connects both ways", async () => {
  const browser = browserPeer();
  const peer = callPeer();
  const far = opusSource();
  const heard = packetsArrive(browser, 25);
  try {
    const offer = await peer.offer(false);
    assert.match(offer, /m=audio .*\r\n/);
    assert.match(offer, /a=rtpmap:111 opus\/48000\/2/);
    assert.doesNotMatch(offer, /m=video/);
    await browser.setRemoteDescription({ type: "offer", sdp: offer });
    const [transceiver] = browser.getTransceivers();
    const mic = new MediaStreamTrack({ kind: "audio" });
    transceiver.sender.replaceTrack(mic);
    transceiver.setDirection("sendrecv");
    await browser.setLocalDescription(await browser.createAnswer());
    await peer.acceptAnswer(browser.localDescription!.sdp);
    peer.play(far.stream);
    await talk(peer, mic, heard);
  } finally {
    far.stop();
    await peer.close();
    await browser.close();
  }
  assert.equal(openPeerCount(), 0);
});

Deno.test("call peer: an offer without Opus audio is refused and holds no peer", async () => {
  const peer = callPeer();
  const noOpus = "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\n" +
    "m=audio 9 UDP/TLS/RTP/SAVPF 0\r\nc=IN IP4 0.0.0.0\r\na=rtpmap:0 PCMU/8000\r\n" +
    "a=mid:0\r\na=sendrecv\r\n";
  await assert.rejects(peer.answer(noOpus), /no Opus audio/);
  await peer.close();
  assert.equal(openPeerCount(), 0);
});

Deno.test({
  name:
    "call peer on the ICE mux with the send engine: the far end is heard through the engine after DTLS, and leaves it at the call's end",
  // werift's timers and the engine's Workers outlive the test body by a tick.
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const mux = IceMux.open({ host: "127.0.0.1", port: 0 });
    const sendPaths = new EngineSendPaths();
    await sendPaths.start({ workers: 1, socketFd: mux.fd });
    const browser = browserPeer();
    const mic = new MediaStreamTrack({ kind: "audio" });
    browser.addTransceiver(mic, { direction: "sendrecv" });
    const heard = packetsArrive(browser, 25);
    const peer = new WebRtcCallPeer({
      callId: "call-engine",
      sessionId: "session-1",
      appKey: "defaultApp",
      nodeId: "node",
      address: { bind: "127.0.0.1", portMin: 42000, portMax: 42100, mux },
      engine: {} as CodecEngine,
      sendPaths,
      log: silentLogger,
      onFailed: () => {},
    });
    const far = opusSource();
    try {
      await browser.setLocalDescription(await browser.createOffer());
      const answer = await peer.answer(browser.localDescription!.sdp);
      assert.match(answer, new RegExp(`a=candidate:.* 127\\.0\\.0\\.1 ${mux.port} `));
      await browser.setRemoteDescription({ type: "answer", sdp: answer });
      peer.play(far.stream);
      await talk(peer, mic, heard);
      assert.equal(sendPaths.size, 1, "the call's audio on the engine");
      await sendPaths.refresh();
      assert.ok(sendPaths.paths()[0].sent >= 25, `engine sent ${sendPaths.paths()[0].sent}`);
    } finally {
      far.stop();
      await peer.close();
      await browser.close();
    }
    assert.equal(sendPaths.size, 0, "off the engine once the call ended");
    assert.equal(openPeerCount(), 0);
    await sendPaths.close();
    await mux.close();
  },
});
