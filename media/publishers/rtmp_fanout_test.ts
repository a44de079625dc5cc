import assert from "node:assert/strict";
import type { MediaFrame, Track } from "../frame.ts";
import { RtmpConn } from "../protocols/rtmp/conn.ts";
import { MessageType } from "../protocols/rtmp/message.ts";
import { Stream } from "../stream.ts";
import { readerTally } from "../stream_tally.ts";
import { playerLagMaxBundles, RtmpFanout } from "./rtmp_fanout.ts";
import { HeldSocket } from "../../tests/helpers/held_socket.ts";
import { aacFrame, aacTrack, h264Track } from "../../tests/helpers/media_tracks.ts";
import { playerChunkReader } from "../../tests/helpers/rtmp_player_reader.ts";

const tracks = (): Track[] => [h264Track({ width: 320, height: 240 }), aacTrack(1)];

const video = (ms: number, key: boolean): MediaFrame => ({
  trackId: 0,
  codec: "H264",
  pts: ms * 90,
  dts: ms * 90,
  keyframe: key,
  data: new Uint8Array([0, 0, 0, 1, key ? 0x65 : 0x41, ms & 0xff]),
});
const audio = aacFrame;

function player(hold: boolean): { socket: HeldSocket; conn: RtmpConn } {
  const socket = new HeldSocket(hold);
  return { socket, conn: new RtmpConn(socket as unknown as Deno.Conn) };
}

/** The video messages in `bytes` as [timestamp, keyframe]. */
function videoMessages(bytes: Uint8Array[]): Array<[number, boolean]> {
  const reader = playerChunkReader();
  return bytes.flatMap((b) => reader.push(b))
    .filter((m) => m.type === MessageType.video)
    .map((m) => [m.timestamp, m.payload[0] >> 4 === 1]);
}

const settle = () => new Promise((r) => setTimeout(r, 0));

function newStream(): Stream {
  return new Stream({
    name: "s",
    mediaSessionId: "m",
    tracks: tracks(),
    mediaProvider: "test",
    stopProvider: () => Promise.resolve(),
  });
}

Deno.test("every player writes the same bundle objects; a slow player skips to a keyframe without holding the others", async () => {
  const stream = newStream();
  const tally = readerTally("rtmp");
  const attachedBefore = tally.attached;
  const fast = player(false);
  const slow = player(true);
  const fanout = RtmpFanout.of(stream);
  const a = fanout.add(fast.conn);
  const b = fanout.add(slow.conn);
  assert.equal(stream.readerCount, 1, "one reader for every player");
  assert.equal(tally.attached - attachedBefore, 2, "the metrics count players");
  // Two seconds of 25 fps with audio, then more pictures than a player may lag behind.
  const frames = playerLagMaxBundles + 60;
  for (let i = 0; i < frames; i++) {
    stream.push(audio(i * 40));
    stream.push(video(i * 40, i % 50 === 0));
    await settle();
  }
  // The fast player wrote a bundle per picture (audio rides along); the slow one has its
  // first bundle in flight and nothing else taken from the stream.
  assert.equal(fast.socket.written.length, frames);
  assert.equal(slow.socket.written.length, 1);
  assert.equal(slow.socket.written[0], fast.socket.written[0], "the same bytes, not a copy");

  slow.socket.release();
  await settle();
  const resumed = videoMessages(slow.socket.written.slice(1));
  assert.ok(resumed.length > 0);
  const lastKeyMs = Math.floor((frames - 1) / 50) * 50 * 40;
  assert.deepEqual(resumed[0], [lastKeyMs, true], "resumes at the newest keyframe");
  assert.equal(resumed.at(-1)![0], (frames - 1) * 40, "and catches up");
  assert.ok(readerTally("rtmp").droppedFrames > 0);

  stream.end();
  await Promise.all([a.done, b.done]);
  assert.equal(tally.attached, attachedBefore, "players no longer counted");
  fast.conn.close();
  slow.conn.close();
});

Deno.test("a late player starts at the cached keyframe; the last player out detaches the reader", async () => {
  const stream = newStream();
  for (let i = 0; i < 10; i++) stream.push(video(i * 40, i % 5 === 0));
  const late = player(false);
  const fanout = RtmpFanout.of(stream);
  const { player: p, done } = fanout.add(late.conn);
  await settle();
  assert.deepEqual(videoMessages(late.socket.written).map(([ms]) => ms), [200, 240, 280, 320, 360]);
  fanout.remove(p);
  await done;
  assert.equal(stream.readerCount, 0);
  const again = RtmpFanout.of(stream);
  assert.notEqual(again, fanout, "the next player starts a fresh fan-out");
  const second = again.add(late.conn);
  await settle();
  assert.equal(late.socket.written.length, 10, "the cached GOP again");
  stream.end();
  await second.done;
  late.conn.close();
});
