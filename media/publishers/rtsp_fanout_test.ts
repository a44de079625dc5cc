import assert from "node:assert/strict";
import { joinLengthPrefixed } from "../codecs/nalu.ts";
import type { MediaFrame, Track } from "../frame.ts";
import { type InterleavedFrame, RtspStreamParser } from "../protocols/rtsp/message.ts";
import { RtspServerConn } from "../protocols/rtsp/server_conn.ts";
import { parseRtpPacket } from "../rtp/packet.ts";
import { parseSenderReports } from "../rtp/rtcp.ts";
import { Stream } from "../stream.ts";
import { silentLogger } from "../../core/log.ts";
import { RtspPlay } from "./rtsp_play.ts";
import { playerLagMaxBundles } from "./rtsp_fanout.ts";
import { HeldSocket } from "../../tests/helpers/held_socket.ts";
import { aacTrack, h264TrackOf } from "../../tests/helpers/media_tracks.ts";

const sps = Uint8Array.of(0x67, 0x42, 0xc0, 0x1e, 0xda, 0x02, 0x80, 0xbf, 0xe5, 0xc0, 0x44);
const pps = Uint8Array.of(0x68, 0xce, 0x3c, 0x80);

const tracks = (): Track[] => [h264TrackOf(sps, pps), aacTrack(1)];

const video = (ms: number, key: boolean): MediaFrame => {
  const nal = new Uint8Array(2000).fill(ms & 0xff);
  nal[0] = key ? 0x65 : 0x41;
  return {
    trackId: 0,
    codec: "H264",
    pts: ms * 90,
    dts: ms * 90,
    keyframe: key,
    data: joinLengthPrefixed([nal]),
  };
};
const audio = (ms: number): MediaFrame => ({
  trackId: 1,
  codec: "AAC",
  pts: ms * 48,
  dts: ms * 48,
  keyframe: true,
  data: new Uint8Array(100).fill(3),
});

/** A TCP player of `stream` on the channels `first`-`first + 3`, playing. */
function player(stream: Stream, hold: boolean, first = 0) {
  const socket = new HeldSocket(hold);
  const conn = new RtspServerConn(socket as unknown as Deno.Conn, silentLogger);
  const play = new RtspPlay(stream, conn, "test@127.0.0.1");
  return {
    socket,
    conn,
    play,
    async start(): Promise<string> {
      for (const t of stream.tracks) {
        await play.setup(t, {
          protocol: "tcp",
          interleaved: [first + 2 * t.id, first + 2 * t.id + 1],
        }, `u/${t.id}`);
      }
      const info = play.play();
      play.start();
      return info;
    },
  };
}

/** The interleaved frames in what a socket was given. */
function frames(written: Uint8Array[]): InterleavedFrame[] {
  const parser = new RtspStreamParser();
  const out: InterleavedFrame[] = [];
  for (const bytes of written) {
    parser.push(bytes);
    for (let m = parser.next(); m; m = parser.next()) if (m.kind === "interleaved") out.push(m);
  }
  return out;
}

function newStream(): Stream {
  return new Stream({
    name: "s",
    mediaSessionId: "m",
    tracks: tracks(),
    mediaProvider: "test",
    stopProvider: () => Promise.resolve(),
  });
}

const settle = () => new Promise((r) => setTimeout(r, 0));

Deno.test("RTSP fan-out: players share one reader and the very bytes; a slow player skips to a keyframe without holding the others or queueing more than one bundle", async () => {
  const stream = newStream();
  const fast = player(stream, false);
  const slow = player(stream, true);
  await fast.start();
  await slow.start();
  assert.equal(stream.readerCount, 1, "one reader for every player");
  const pictures = playerLagMaxBundles + 60;
  for (let i = 0; i < pictures; i++) {
    stream.push(audio(i * 40));
    stream.push(video(i * 40, i % 50 === 0));
    await settle();
  }
  // The fast one wrote every frame (with a sender report of the audio before its first audio
  // packet); the slow one has one write in flight and nothing more queued.
  const fastFrames = frames(fast.socket.written);
  // (The audio before the first keyframe is not read.)
  assert.equal(fastFrames.filter((f) => f.channel === 2).length, pictures - 1);
  assert.equal(slow.socket.written.length, 1);
  assert.ok(
    fast.socket.written.includes(slow.socket.written[0]),
    "the slow player's bundle is the same bytes, not a copy",
  );
  // Every player gets the same SSRC and sequence numbers.
  const firstVideo = parseRtpPacket(fastFrames.find((f) => f.channel === 0)!.data);
  const slowFirst = parseRtpPacket(frames(slow.socket.written).find((f) => f.channel === 0)!.data);
  assert.equal(slowFirst.ssrc, firstVideo.ssrc);
  assert.equal(slowFirst.sequenceNumber, firstVideo.sequenceNumber);

  slow.socket.release();
  for (let i = 0; i < 5; i++) await settle();
  const resumed = frames(slow.socket.written.slice(1)).filter((f) => f.channel === 0)
    .map((f) => parseRtpPacket(f.data));
  const lastKeyMs = Math.floor((pictures - 1) / 50) * 50 * 40;
  assert.equal(
    resumed[0].timestamp - firstVideo.timestamp,
    lastKeyMs * 90,
    "resumes at a keyframe",
  );
  assert.equal(resumed.at(-1)!.timestamp - firstVideo.timestamp, (pictures - 1) * 40 * 90);
  assert.equal(
    resumed.at(-1)!.sequenceNumber,
    parseRtpPacket(fastFrames.filter((f) => f.channel === 0).at(-1)!.data).sequenceNumber,
  );

  stream.end();
  await settle();
  assert.ok(fast.conn.closed && slow.conn.closed, "the stream's end closes the players");
  assert.equal(stream.readerCount, 0);
});

Deno.test("RTSP fan-out: a late player on other channels starts at the cached keyframe with RTP-Info and reports; its copy is made once", async () => {
  const stream = newStream();
  const first = player(stream, false);
  await first.start();
  for (let i = 0; i < 10; i++) {
    stream.push(video(i * 40, i % 5 === 0));
    stream.push(audio(i * 40 + 20));
  }
  await settle();
  const late = [player(stream, false, 4), player(stream, false, 4)];
  const info = await late[0].start();
  await late[1].start();
  await settle();
  const got = frames(late[0].socket.written);
  // A report per track before any packet, then the GOP from the keyframe at 200 ms (with the
  // audio held back for it).
  assert.deepEqual(got.slice(0, 2).map((f) => f.channel).sort(), [5, 7]);
  const videoReport = parseSenderReports(got.find((f) => f.channel === 5)!.data)[0];
  const firstVideo = parseRtpPacket(got.find((f) => f.channel === 4)!.data);
  const [, seq, rtptime] = /url=u\/0;seq=(\d+);rtptime=(\d+)/.exec(info)!;
  assert.equal(firstVideo.sequenceNumber, Number(seq));
  assert.equal(firstVideo.timestamp, Number(rtptime));
  assert.equal(videoReport.rtpTimestamp, Number(rtptime));
  const [, audioSeq] = /url=u\/1;seq=(\d+)/.exec(info)!;
  const audioPackets = got.filter((f) => f.channel === 6).map((f) => parseRtpPacket(f.data));
  assert.equal(audioPackets[0].sequenceNumber, Number(audioSeq));
  // 180 to 340 ms; the audio at 380 ms waits for the next picture.
  assert.equal(audioPackets.length, 5);
  // Both late players write the one copy framed on channels 4-7.
  const shared = late[0].socket.written.filter((b) => late[1].socket.written.includes(b));
  assert.equal(shared.length, 5, "a bundle per picture from the keyframe");

  for (const p of [first, ...late]) await p.play.close();
  assert.equal(stream.readerCount, 0, "the last player out stops reading");
  stream.end();
});
