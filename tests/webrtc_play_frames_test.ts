/**
 * WebRTC players of streams that did not come over WebRTC, werift on the player side (no
 * browser): a VOD file and an RTMP stream published by ffmpeg (H.264 + AAC, so Opus made by
 * the codec engine), and an RTSP camera with G.711 (passed through, or converted for a player
 * without it). The player depacketizes what it gets with media/rtp and checks what a viewer
 * would: a keyframe with its parameter sets first, frame rates, rising timestamps, sender
 * reports that keep audio and video together, and one shared conversion.
 */
import assert from "node:assert/strict";
import { RTCPeerConnection, RtcpSrPacket, RTCRtpCodecParameters } from "werift";
import { H264NalType } from "../media/codecs/h264.ts";
import { splitLengthPrefixed } from "../media/codecs/nalu.ts";
import { opusPacketSamples } from "../media/codecs/opus.ts";
import type { MediaFrame } from "../media/frame.ts";
import { openPeerCount } from "../media/protocols/webrtc/peer.ts";
import { FrameDepacketizer } from "../media/rtp/frame_depacketizer.ts";
import { H264Depacketizer } from "../media/rtp/h264_depacketizer.ts";
import { RtpReorderBuffer } from "../media/rtp/reorder.ts";
import { publishRtmp, stopPublisher } from "./helpers/ffmpeg_rtmp.ts";
import { childrenNamed } from "./helpers/children.ts";
import { startGstRtsp } from "./helpers/gst_rtsp.ts";
import { makeClip } from "./helpers/media_fixtures.ts";
import { startTestServer, testConfig, type TestServer, withServer } from "./helpers/test_server.ts";
import { WcsClient } from "./helpers/wcs_client.ts";
import { loopbackIce, nextStatus, waitFor, weriftSanitizers } from "./webrtc_helpers.ts";

type AudioOffer = "opus" | "pcmu+opus";

/** A werift player that turns what it receives back into frames. */
class FramePlayer {
  readonly pc: RTCPeerConnection;
  readonly video: MediaFrame[] = [];
  readonly audio: MediaFrame[] = [];
  audioCodec = "";
  /** Latest sender report per kind: NTP seconds and RTP timestamp. */
  readonly reports: Record<string, { ntpSec: number; rtp: number }> = {};
  readonly #h264 = new H264Depacketizer(0);
  /** Like a browser's jitter buffer: sequence order, duplicates (resends) dropped. */
  readonly #order = {
    video: new RtpReorderBuffer((p, gap) => {
      if (gap) this.#h264.reset();
      this.#h264.push(p, (f) => this.video.push(f));
    }),
    audio: new RtpReorderBuffer((p) => {
      const codec = this.audioCodec === "PCMU" ? "PCMU" : "OPUS";
      new FrameDepacketizer(1, codec).push(p, (f) => this.audio.push(f));
    }),
  };

  /** `video`: the one video codec offered (H.264 mode 1, or VP8 only to be refused). */
  constructor(audioOffer: AudioOffer, video: "H264" | "VP8" = "H264") {
    const audio = [
      new RTCRtpCodecParameters({ mimeType: "audio/opus", clockRate: 48000, channels: 2 }),
    ];
    if (audioOffer === "pcmu+opus") {
      audio.unshift(
        new RTCRtpCodecParameters({ mimeType: "audio/PCMU", clockRate: 8000, channels: 1 }),
      );
    }
    this.pc = new RTCPeerConnection({
      ...loopbackIce(),
      codecs: {
        video: [
          new RTCRtpCodecParameters({
            mimeType: `video/${video}`,
            clockRate: 90000,
            rtcpFeedback: [{ type: "nack" }, { type: "nack", parameter: "pli" }],
            parameters: video === "H264"
              ? "level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f"
              : undefined,
          }),
        ],
        audio,
      },
    });
    this.pc.addTransceiver("video", { direction: "recvonly" });
    this.pc.addTransceiver("audio", { direction: "recvonly" });
    this.pc.onTrack.subscribe((track) => {
      track.onReceiveRtp.subscribe((rtp) => {
        const packet = {
          marker: rtp.header.marker,
          payloadType: rtp.header.payloadType,
          sequenceNumber: rtp.header.sequenceNumber,
          timestamp: rtp.header.timestamp,
          ssrc: rtp.header.ssrc,
          payload: new Uint8Array(rtp.payload),
        };
        if (track.kind === "audio") this.audioCodec = track.codec?.name.toUpperCase() ?? "";
        this.#order[track.kind as "audio" | "video"].push(packet);
      });
    });
  }

  async play(client: WcsClient, mediaSessionId: string, name: string): Promise<void> {
    await this.pc.setLocalDescription(await this.pc.createOffer());
    client.send("playStream", {
      mediaSessionId,
      name,
      published: false,
      hasVideo: true,
      hasAudio: true,
      status: "PENDING",
      sdp: this.pc.localDescription!.sdp,
    });
    const [, sdp] = await client.next("setRemoteSDP", 10_000) as [string, string, boolean];
    await this.pc.setRemoteDescription({ type: "answer", sdp });
    for (const transceiver of this.pc.getTransceivers()) {
      transceiver.receiver.onRtcp.subscribe((rtcp) => {
        if (!(rtcp instanceof RtcpSrPacket)) return;
        const ntp = rtcp.senderInfo.ntpTimestamp;
        this.reports[transceiver.kind] = {
          ntpSec: Number(ntp >> 32n) + Number(ntp & 0xffffffffn) / 2 ** 32,
          rtp: rtcp.senderInfo.rtpTimestamp,
        };
      });
    }
  }

  /** Capture time (NTP s) of an RTP timestamp of `kind`, from its last sender report. */
  captureSec(kind: "audio" | "video", timestamp: number, clock: number): number {
    const report = this.reports[kind];
    return report.ntpSec + ((timestamp - report.rtp) | 0) / clock;
  }
}

/** Configuration with a random 200-port span of UDP media, so concurrent servers do not meet. */
function mediaConfig() {
  const udpPortMin = 40000 + 2 * Math.floor(Math.random() * 10000);
  return testConfig({ media: { udpPortMin, udpPortMax: udpPortMin + 199 } });
}

function server(config = mediaConfig()): Promise<TestServer> {
  return startTestServer(config);
}

/** Plays `name` with a werift player for `ms` and checks what it got; returns the player. */
async function playAndCheck(
  s: TestServer,
  name: string,
  audioOffer: AudioOffer,
  ms: number,
): Promise<FramePlayer> {
  const { client } = await WcsClient.connect(s.wsUrl);
  const player = new FramePlayer(audioOffer);
  const id = crypto.randomUUID();
  try {
    await player.play(client, id, name);
    assert.equal((await nextStatus(client, id)).status, "PLAYING");
    await new Promise((r) => setTimeout(r, ms));
    client.send("stopStream", { mediaSessionId: id, name });
    assert.equal((await nextStatus(client, id)).status, "STOPPED");
  } finally {
    await player.pc.close();
    await client.close();
  }
  const { video, audio } = player;
  const seconds = ms / 1000;
  assert.ok(video.length >= 15 * seconds, `${video.length} video frames in ${seconds} s`);
  assert.equal(video[0].keyframe, true, "the first picture is a keyframe");
  const types = splitLengthPrefixed(video[0].data).map((n) => n[0] & 0x1f);
  assert.ok(types.includes(H264NalType.sps) && types.includes(H264NalType.pps), `NALs ${types}`);
  assert.ok(video.filter((f) => f.keyframe).length >= 2, "later keyframes come too");
  for (let i = 1; i < video.length; i++) {
    const step = (video[i].pts - video[i - 1].pts) | 0;
    assert.ok(step > 0, `video timestamps rise: ${i}: ${video[i - 1].pts} then ${video[i].pts}`);
  }
  for (let i = 1; i < audio.length; i++) {
    assert.ok(((audio[i].pts - audio[i - 1].pts) | 0) > 0, "audio timestamps rise");
  }
  const audioClock = player.audioCodec === "PCMU" ? 8000 : 48000;
  const audioSpanSec = ((audio.at(-1)!.pts - audio[0].pts) | 0) / audioClock;
  assert.ok(audioSpanSec >= 0.6 * seconds, `${audioSpanSec} s of audio in ${seconds} s`);
  // The sender reports put both tracks on one clock: the newest audio and video are within
  // a few frames of each other in capture time.
  const videoSec = player.captureSec("video", video.at(-1)!.pts, 90000);
  const audioSec = player.captureSec("audio", audio.at(-1)!.pts, audioClock);
  assert.ok(Math.abs(videoSec - audioSec) < 0.3, `video ${videoSec} vs audio ${audioSec}`);
  return player;
}

Deno.test({
  name:
    "webrtc play of a VOD file: H.264 passes, AAC comes as Opus, one conversion for two players",
  ...weriftSanitizers,
  fn: async () => {
    const config = mediaConfig();
    await Deno.mkdir(config.folders.media, { recursive: true });
    await makeClip(`${config.folders.media}/clip.mp4`, { seconds: 30, audio: "aac" });
    const s = await server(config);
    try {
      const res = await s.post("/vod/startup", {
        uri: "vod-live://clip.mp4",
        localStreamName: "v",
      });
      assert.equal(res.status, 200, await res.text());
      const baseline = childrenNamed("ffmpeg");
      const [first] = await Promise.all([
        playAndCheck(s, "v", "opus", 3000),
        (async () => {
          await new Promise((r) => setTimeout(r, 800));
          const second = playAndCheck(s, "v", "opus", 1500);
          await new Promise((r) => setTimeout(r, 500));
          assert.equal(childrenNamed("ffmpeg"), baseline + 1, "two players, one ffmpeg");
          await second;
        })(),
      ]);
      assert.equal(first.audioCodec, "OPUS");
      // A player without H.264 cannot be served (video is not converted): FAILED, no answer.
      const { client } = await WcsClient.connect(s.wsUrl);
      const vp8 = new FramePlayer("opus", "VP8");
      try {
        await vp8.pc.setLocalDescription(await vp8.pc.createOffer());
        const id = crypto.randomUUID();
        client.send("playStream", {
          mediaSessionId: id,
          name: "v",
          sdp: vp8.pc.localDescription!.sdp,
        });
        const refused = await nextStatus(client, id);
        assert.deepEqual([refused.status, refused.info], [
          "FAILED",
          "Transcoding required, but disabled",
        ]);
        assert.ok(!client.messages().includes("setRemoteSDP"));
      } finally {
        await vp8.pc.close();
        await client.close();
      }
      assert.ok(first.audio.every((f) => opusPacketSamples(f.data) === 960), "20 ms Opus frames");
      await waitFor(
        () => childrenNamed("ffmpeg") === baseline,
        2000,
        "the conversion's ffmpeg to exit",
      );
    } finally {
      await s.stop();
    }
    assert.equal(openPeerCount(), 0);
  },
});

Deno.test({
  name: "webrtc play of an RTMP stream published by ffmpeg (H.264 + AAC)",
  ...weriftSanitizers,
  fn: async () => {
    const s = await server();
    const publisher = publishRtmp(`rtmp://127.0.0.1:${s.rtmpPort}/live/cam`, 30);
    try {
      await waitFor(() => s.services.streams.published("cam") !== undefined, 10_000, "publish");
      const player = await playAndCheck(s, "cam", "opus", 3000);
      assert.equal(player.audioCodec, "OPUS");
    } finally {
      await stopPublisher(publisher);
      await s.stop();
    }
    assert.equal(openPeerCount(), 0);
  },
});

Deno.test({
  name: "webrtc play of an RTSP camera with PCMU: passed through when offered, else made Opus",
  ...weriftSanitizers,
  fn: async () => {
    const camera = await startGstRtsp({ audio: "pcmu" });
    await withServer(async (s) => {
      const res = await s.post("/rtsp/startup", { uri: camera.url, localStreamName: "cam" });
      assert.equal(res.status, 200, await res.text());
      await waitFor(() => s.services.streams.published("cam") !== undefined, 10_000, "pull");
      const baseline = childrenNamed("ffmpeg");
      const passed = await playAndCheck(s, "cam", "pcmu+opus", 2500);
      assert.equal(passed.audioCodec, "PCMU");
      assert.equal(childrenNamed("ffmpeg"), baseline, "no conversion for G.711 the player takes");
      const converted = await playAndCheck(s, "cam", "opus", 2500);
      assert.equal(converted.audioCodec, "OPUS");
    }, mediaConfig()).finally(() => camera.stop());
    assert.equal(openPeerCount(), 0);
  },
});
