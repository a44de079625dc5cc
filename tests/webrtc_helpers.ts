/**
 * werift peers that act like the Web SDK over our signaling protocol: a publisher that sends
 * synthetic VP8 or H.264 plus Opus RTP, and a player that counts what it receives.
 */
import {
  MediaStreamTrack,
  type Protocol,
  RTCPeerConnection,
  RtcpSrPacket,
  RTCRtpCodecParameters,
  RtpHeader,
  RtpPacket,
} from "werift";
import assert from "node:assert/strict";
import { Buffer } from "node:buffer";
import { installNoDefaultStun } from "../media/protocols/webrtc/no_default_stun.ts";
import { startTestServer, type TestServer } from "./helpers/test_server.ts";
import { WcsClient } from "./helpers/wcs_client.ts";

/**
 * How a test peer reaches the server: "udp", "udp6" (UDP from ::1, the IPv6 loopback), or
 * "tcp" as a client behind a firewall that blocks UDP (ICE-TCP: it dials the server's TCP
 * passive candidate, pairs and answers nothing else, and closes its UDP sockets once gathered,
 * so no datagram can carry its media).
 */
export type TestTransport = "udp" | "udp6" | "tcp";

/** Whether a werift protocol or candidate is TCP. */
function onTcp(of: { localCandidate?: { transport: string } } | undefined): boolean {
  return of?.localCandidate?.transport.toLowerCase() === "tcp";
}

/**
 * werift ICE settings that keep a test peer on 127.0.0.1 (or `host`, e.g. "::1"): host
 * candidates of that address only, no ICE servers (a fresh object each call: werift keeps
 * what it is given).
 */
export function loopbackIce(host = "127.0.0.1") {
  return {
    iceServers: [],
    iceUseIpv4: false,
    iceUseIpv6: false,
    iceAdditionalHostAddresses: [host],
    iceInterfaceAddresses: host.includes(":") ? { udp6: host } : { udp4: host },
  };
}

/**
 * werift ICE settings of a client on TCP (see TestTransport): TCP candidates, active only (it
 * dials the server's passive one), and nothing paired or answered that is not TCP.
 */
export function tcpClientIce() {
  return {
    iceUseTcp: true,
    iceTcpPassive: false,
    iceFilterCandidatePair: (pair: { localCandidate?: { transport: string } }) => onTcp(pair),
    iceFilterStunResponse: (_message: unknown, _addr: unknown, protocol: unknown) =>
      onTcp(protocol as { localCandidate?: { transport: string } }),
  };
}

/** Closes `pc`'s UDP sockets once it has gathered: a client behind a firewall blocking UDP. */
export function closeUdpWhenGathered(pc: RTCPeerConnection): void {
  pc.iceGatheringStateChange.subscribe(async (state) => {
    if (state !== "complete") return;
    for (const { iceTransport } of pc.dtlsTransports) {
      // werift keeps its protocols private.
      const connection = iceTransport.connection as unknown as { protocols: Protocol[] };
      const udp = connection.protocols.filter((p) => !onTcp(p));
      connection.protocols = connection.protocols.filter((p) => onTcp(p));
      for (const protocol of udp) await protocol.close();
    }
  });
}

/** werift settings that keep a test peer on 127.0.0.1 with no STUN server. */
function loopbackPeer(
  codecs: ReturnType<typeof codecList>,
  keepPercent?: number,
  transport: TestTransport = "udp",
): RTCPeerConnection {
  const tcp = transport === "tcp";
  // `iceServers: []` alone still leaves werift's default STUN server (stun.l.google.com).
  installNoDefaultStun();
  const pc = new RTCPeerConnection({
    // werift's debug knob keeps this share of incoming packets (the rest is dropped).
    debug: keepPercent === undefined ? {} : { inboundPacketLoss: keepPercent },
    ...loopbackIce(transport === "udp6" ? "::1" : "127.0.0.1"),
    codecs,
    ...(tcp ? tcpClientIce() : {}),
  });
  if (tcp) closeUdpWhenGathered(pc);
  return pc;
}

/** Video codecs a test peer can offer. */
export type TestVideoCodec = "VP8" | "H264" | "VP9";

/** H.264 (Constrained Baseline, packetization mode 1) for a werift peer, with `rtcpFeedback`. */
export function h264Codec(
  rtcpFeedback: { type: string; parameter?: string }[] = [
    { type: "nack" },
    { type: "nack", parameter: "pli" },
  ],
): RTCRtpCodecParameters {
  return new RTCRtpCodecParameters({
    mimeType: "video/H264",
    clockRate: 90000,
    rtcpFeedback,
    parameters: "level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f",
  });
}

/** `remb`: offer goog-remb on video, as browsers do when they publish. */
function codecList(video: TestVideoCodec, remb = false) {
  const fb = [
    { type: "nack" },
    { type: "nack", parameter: "pli" },
    ...(remb ? [{ type: "goog-remb" }] : []),
  ];
  return {
    video: [
      video === "H264" ? h264Codec(fb) : new RTCRtpCodecParameters({
        mimeType: `video/${video}`,
        clockRate: 90000,
        rtcpFeedback: fb,
      }),
    ],
    audio: [new RTCRtpCodecParameters({ mimeType: "audio/opus", clockRate: 48000, channels: 2 })],
  };
}

/** A VP8 keyframe payload (descriptor + frame header) announcing 640x480. */
function vp8Payload(keyframe: boolean, size: number): Buffer {
  const p = Buffer.alloc(size);
  p[0] = 0x10; // S=1, partition 0
  p[1] = keyframe ? 0x00 : 0x01; // frame tag: P bit 0 = keyframe
  p.set([0x9d, 0x01, 0x2a], 4);
  p.writeUInt16LE(640, 7);
  p.writeUInt16LE(480, 9);
  return p;
}

/** An H.264 SPS (Baseline, 640x480) followed by IDR or P slices in single-NAL packets. */
const h264Sps = Buffer.from("6742c01eda0280f640", "hex");
const h264Pps = Buffer.from("68ce3c80", "hex");

/** True for the first packet of a keyframe in TestPublisher's layout. */
function startsKeyframe(p: Uint8Array, codec: TestVideoCodec): boolean {
  if (codec === "H264") return (p[0] & 0x1f) === 7 || (p[0] & 0x1f) === 5;
  return (p[0] & 0x10) !== 0 && (p[1] & 0x01) === 0;
}

/** A synthetic publisher over werift. */
export class TestPublisher {
  readonly pc: RTCPeerConnection;
  readonly video = new MediaStreamTrack({ kind: "video" });
  readonly audio = new MediaStreamTrack({ kind: "audio" });
  /** Keyframe requests (PLI) the server sent. */
  plis = 0;
  #timer?: ReturnType<typeof setInterval>;
  #seq = [1000, 5000];
  #ts = [90000, 48000];
  #frame = 0;
  #forceKey = false;

  /** Packets sent, audio and video. */
  sent = 0;

  /** `videoPacketsPerFrame` sets the VP8 video rate (25 fps, about 1.1 kB a packet). */
  constructor(
    readonly codec: TestVideoCodec,
    readonly videoPacketsPerFrame = 2,
    transport: TestTransport = "udp",
  ) {
    this.pc = loopbackPeer(codecList(codec, true), undefined, transport);
    this.pc.addTransceiver(this.video, { direction: "sendonly" }).sender.onPictureLossIndication
      .subscribe(() => {
        this.plis++;
        this.#forceKey = true;
      });
    this.pc.addTransceiver(this.audio, { direction: "sendonly" });
  }

  /** Sends publishStream and applies the answer; resolves with the server's SDP. */
  async publish(client: WcsClient, stream: Record<string, unknown>): Promise<string> {
    await this.pc.setLocalDescription(await this.pc.createOffer());
    client.send("publishStream", {
      published: true,
      hasVideo: true,
      hasAudio: true,
      status: "PENDING",
      mediaProvider: "WebRTC",
      record: false,
      ...stream,
      sdp: this.pc.localDescription!.sdp,
    });
    const [, sdp] = await client.next("setRemoteSDP", 10_000) as [string, string, boolean];
    await this.pc.setRemoteDescription({ type: "answer", sdp });
    return sdp;
  }

  /** Starts 25 fps video (keyframe every 50 frames) and 50 packets/s of audio. */
  start(): void {
    let tick = 0;
    const startMs = performance.now();
    this.#timer = setInterval(() => {
      // Catch up on late timer runs, so the average rate holds on a loaded machine.
      while (tick <= (performance.now() - startMs) / 20) {
        if (tick++ % 2 === 0) this.#sendVideoFrame();
        this.#send(1, this.audio, Buffer.alloc(80, 0xf8), true);
        this.#ts[1] += 960;
      }
    }, 20);
  }

  #sendVideoFrame(): void {
    const key = this.#frame % 50 === 0 || this.#forceKey;
    this.#forceKey = false;
    this.#frame++;
    if (this.codec === "H264") {
      if (key) this.#send(0, this.video, h264Sps, false);
      if (key) this.#send(0, this.video, h264Pps, false);
      // nal_unit_type 5 (IDR) or 1 with first_mb 0 and slice_type 5 (P, ue "00110")
      const slice = Buffer.alloc(900, 0x11);
      slice[0] = key ? 0x65 : 0x41;
      slice[1] = key ? 0x88 : 0x9a;
      this.#send(0, this.video, slice, true);
    } else {
      this.#send(0, this.video, vp8Payload(key, 1100), false);
      const rest = Buffer.alloc(1100, 0x22);
      rest[0] = 0x00; // continuation: S=0
      for (let i = 1; i < this.videoPacketsPerFrame; i++) {
        this.#send(0, this.video, rest, i === this.videoPacketsPerFrame - 1);
      }
    }
    this.#ts[0] += 3600;
  }

  #send(index: number, track: MediaStreamTrack, payload: Buffer, marker: boolean): void {
    const header = new RtpHeader({
      sequenceNumber: this.#seq[index],
      timestamp: this.#ts[index],
      marker,
      payloadType: 96,
    });
    this.#seq[index] = (this.#seq[index] + 1) & 0xffff;
    this.sent++;
    track.writeRtp(new RtpPacket(header, payload));
  }

  /** Stops sending (start() resumes). */
  pause(): void {
    clearInterval(this.#timer);
  }

  /** Stops sending and closes the peer. */
  async close(): Promise<void> {
    clearInterval(this.#timer);
    await this.pc.close();
  }
}

/** A werift player counting received packets. */
export class TestPlayer {
  readonly pc: RTCPeerConnection;
  readonly received = { video: 0, audio: 0 };
  /** RTP timestamp of the last packet of each kind. */
  readonly lastTimestamp = { video: 0, audio: 0 };
  /** Sender reports received: kind, and RTP timestamp minus the last received one. */
  readonly senderReports: { kind: string; rtpLead: number }[] = [];
  /** Receive time of the first keyframe packet, performance.now() ms; 0 before it. */
  firstKeyframeMs = 0;

  /** `keepPercent` below 100 drops the rest of the incoming packets (to provoke NACKs). */
  constructor(
    video: TestVideoCodec = "VP8",
    keepPercent?: number,
    transport: TestTransport = "udp",
  ) {
    this.pc = loopbackPeer(codecList(video), keepPercent, transport);
    this.pc.addTransceiver("video", { direction: "recvonly" });
    this.pc.addTransceiver("audio", { direction: "recvonly" });
    this.pc.onTrack.subscribe((track) => {
      track.onReceiveRtp.subscribe((rtp) => {
        const kind = track.kind as "audio" | "video";
        if (kind === "video" && this.firstKeyframeMs === 0 && startsKeyframe(rtp.payload, video)) {
          this.firstKeyframeMs = performance.now();
        }
        this.received[kind]++;
        this.lastTimestamp[kind] = rtp.header.timestamp;
      });
    });
  }

  /** Sends playStream and applies the answer. */
  async play(client: WcsClient, stream: Record<string, unknown>): Promise<void> {
    await this.pc.setLocalDescription(await this.pc.createOffer());
    client.send("playStream", {
      published: false,
      hasVideo: true,
      hasAudio: true,
      status: "PENDING",
      mediaProvider: "WebRTC",
      ...stream,
      sdp: this.pc.localDescription!.sdp,
    });
    const [, sdp] = await client.next("setRemoteSDP", 10_000) as [string, string, boolean];
    await this.pc.setRemoteDescription({ type: "answer", sdp });
    for (const transceiver of this.pc.getTransceivers()) {
      const kind = transceiver.kind as "audio" | "video";
      transceiver.receiver.onRtcp.subscribe((rtcp) => {
        if (!(rtcp instanceof RtcpSrPacket)) return;
        const rtpLead = (rtcp.senderInfo.rtpTimestamp - this.lastTimestamp[kind]) | 0;
        this.senderReports.push({ kind, rtpLead });
      });
    }
  }

  /** Closes the peer. */
  async close(): Promise<void> {
    await this.pc.close();
  }
}

/** The next notifyStreamStatusEvent of `mediaSessionId`. */
export async function nextStatus(
  client: WcsClient,
  mediaSessionId: string,
  timeoutMs = 10_000,
): Promise<Record<string, unknown>> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const [status] = await client.next("notifyStreamStatusEvent", deadline - Date.now()) as [
      Record<string, unknown>,
    ];
    if (status.mediaSessionId === mediaSessionId) return status;
  }
}

/**
 * Publishes `stream` with `publisher` under a new mediaSessionId, starts sending and asserts
 * that the stream's next status is PUBLISHING; resolves with the id.
 */
export async function startPublishing(
  publisher: TestPublisher,
  client: WcsClient,
  stream: Record<string, unknown>,
): Promise<string> {
  const id = crypto.randomUUID();
  await publisher.publish(client, { mediaSessionId: id, ...stream });
  publisher.start();
  assert.equal((await nextStatus(client, id)).status, "PUBLISHING");
  return id;
}

/**
 * Plays `stream` with `player` under a new mediaSessionId and asserts that its next status is
 * PLAYING; resolves with the id.
 */
export async function startPlaying(
  player: TestPlayer,
  client: WcsClient,
  stream: Record<string, unknown>,
): Promise<string> {
  const id = crypto.randomUUID();
  await player.play(client, { mediaSessionId: id, ...stream });
  assert.equal((await nextStatus(client, id)).status, "PLAYING");
  return id;
}

/**
 * Runs `fn` with a server from `start` (a test server by default) and two signaling clients
 * (the publisher's and the player's); then closes `peers`, the clients and the server.
 */
export async function withTwoClients(
  peers: { close(): Promise<void> }[],
  fn: (s: TestServer, pubClient: WcsClient, playClient: WcsClient) => Promise<void>,
  start: () => Promise<TestServer> = startTestServer,
): Promise<void> {
  const s = await start();
  const { client: pubClient } = await WcsClient.connect(s.wsUrl);
  const { client: playClient } = await WcsClient.connect(s.wsUrl);
  try {
    await fn(s, pubClient, playClient);
  } finally {
    for (const peer of peers) await peer.close();
    await pubClient.close();
    await playClient.close();
    await s.stop();
  }
}

/** Waits until `check` is true, polling every 50 ms; throws after `timeoutMs`. */
export async function waitFor(
  check: () => boolean,
  timeoutMs: number,
  what: string,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/**
 * Test sanitizers for werift tests: its timers (DTLS retransmit, ICE consent) outlive close(),
 * and one of its UDP sockets per test stays open after every peer was closed (the tests
 * assert that the server's peer count is back to 0).
 */
export const weriftSanitizers = { sanitizeOps: false, sanitizeResources: false } as const;
