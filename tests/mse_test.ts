/**
 * The Web SDK's MSE player over the signalling port, driven as the SDK 2.0.276 drives it:
 * `playStream` with its fixed offer, `setRemoteSDP`, a second WebSocket sending
 * `connectMediaTransport {authToken}`, then binary records (wcs-client-protocol.md §8). The
 * records are checked the way the SDK reads them, then remuxed to fMP4 with the server's own
 * writer for ffprobe to decode.
 */
import assert from "node:assert/strict";
import { parseAsc } from "../media/codecs/aac.ts";
import { parseAvcC } from "../media/codecs/h264.ts";
import type { MediaFrame, Track } from "../media/frame.ts";
import { Fmp4Writer } from "../media/formats/mp4/fmp4_writer.ts";
import { wsPlayerUnsupportedInfo } from "../signaling/mse_streams.ts";
import { publishRtmp, stopPublisher } from "./helpers/ffmpeg_rtmp.ts";
import { probe, waitFor } from "./helpers/media_fixtures.ts";
import { type TestServer, withServer } from "./helpers/test_server.ts";
import { WcsClient } from "./helpers/wcs_client.ts";

/** The offer the SDK's MSE provider sends, as it is in its source. */
export const mseOffer = [
  "v=0",
  "o=- 1988962254 1988962254 IN IP4 0.0.0.0",
  "c=IN IP4 0.0.0.0",
  "t=0 0",
  "a=sdplang:en",
  "m=video 0 RTP/AVP 112",
  "a=rtpmap:112 H264/90000",
  "a=fmtp:112 packetization-mode=1; profile-level-id=420020",
  "a=recvonly",
  "m=audio 0 RTP/AVP 108 96 97 98 99 100 102 103 104",
  "a=rtpmap:108 mpeg4-generic/48000/1",
  "a=rtpmap:96 mpeg4-generic/8000/1",
  "a=rtpmap:97 mpeg4-generic/11025/1",
  "a=rtpmap:98 mpeg4-generic/12000/1",
  "a=rtpmap:99 mpeg4-generic/16000/1",
  "a=rtpmap:100 mpeg4-generic/22050/1",
  "a=rtpmap:104 mpeg4-generic/24000/1",
  "a=rtpmap:102 mpeg4-generic/32000/1",
  "a=rtpmap:103 mpeg4-generic/44100/1",
  "a=recvonly",
  "",
].join("\r\n");

/** One record as the SDK's demuxer reads it. */
interface MseRecord {
  type: number;
  timestampMs: number;
  payload: Uint8Array;
}

/** Splits a transport message into its records, as the SDK's `onData` does. */
function parseRecords(message: Uint8Array): MseRecord[] {
  const view = new DataView(message.buffer, message.byteOffset, message.byteLength);
  const out: MseRecord[] = [];
  for (let pos = 0; pos < message.length;) {
    const length = view.getUint32(pos + 5);
    out.push({
      type: message[pos],
      timestampMs: view.getInt32(pos + 1),
      payload: message.subarray(pos + 9, pos + 9 + length),
    });
    pos += 9 + length;
  }
  return out;
}

/** The second WebSocket of an MSE play: sends `connectMediaTransport`, keeps the binary messages. */
class MediaTransport {
  readonly messages: Uint8Array[] = [];
  readonly closed: Promise<CloseEvent>;
  #socket: WebSocket;

  private constructor(socket: WebSocket) {
    this.#socket = socket;
    socket.binaryType = "arraybuffer";
    this.closed = new Promise((resolve) => socket.onclose = resolve);
    socket.onmessage = (ev) => {
      if (ev.data instanceof ArrayBuffer) this.messages.push(new Uint8Array(ev.data));
      else if (JSON.parse(ev.data).message === "ping") socket.send('{"message":"pong"}');
    };
  }

  static async open(url: string, authToken: string): Promise<MediaTransport> {
    const socket = new WebSocket(url);
    const transport = new MediaTransport(socket);
    await new Promise((resolve) => socket.onopen = resolve);
    socket.send(JSON.stringify({ message: "connectMediaTransport", data: [{ authToken }] }));
    return transport;
  }

  get state(): number {
    return this.#socket.readyState;
  }

  get records(): MseRecord[] {
    return this.messages.flatMap(parseRecords);
  }

  async close(): Promise<void> {
    if (this.#socket.readyState <= WebSocket.OPEN) this.#socket.close(1000);
    await this.closed;
  }
}

/** Plays `name` with the MSE provider; returns the answer and the open media transport. */
async function playMse(
  server: TestServer,
  client: WcsClient,
  authToken: string,
  name: string,
  mediaSessionId = crypto.randomUUID(),
): Promise<{ sdp: string; transport: MediaTransport }> {
  client.send("playStream", {
    mediaSessionId,
    name,
    published: false,
    hasVideo: true,
    hasAudio: true,
    status: "PENDING",
    record: false,
    mediaProvider: "MSE",
    sdp: mseOffer,
  });
  const [id, sdp] = await client.next("setRemoteSDP") as [string, string];
  assert.equal(id, mediaSessionId);
  const transport = await MediaTransport.open(server.wsUrl, authToken);
  return { sdp, transport };
}

/** Remuxes SDK records to fMP4 with the server's writer, as the SDK remuxes them for MSE. */
function remux(
  records: MseRecord[],
): { bytes: Uint8Array; videoCodec: string; audioCodec: string } {
  const videoConfig = records.find((r) =>
    r.type === 9 && r.payload[0] === 0x17 && r.payload[1] === 0
  );
  const audioConfig = records.find((r) => r.type === 8 && r.payload[0] === 0);
  assert.ok(videoConfig && audioConfig, "both decoder configurations came");
  const avcC = parseAvcC(videoConfig.payload.subarray(5));
  const asc = parseAsc(audioConfig.payload.subarray(1));
  const hex = (n: number) => n.toString(16).toUpperCase().padStart(2, "0");
  const tracks: Track[] = [
    {
      id: 0,
      kind: "video",
      codec: "H264",
      clockRate: 90_000,
      config: { codec: "H264", sps: avcC.sps, pps: avcC.pps },
    },
    {
      id: 1,
      kind: "audio",
      codec: "AAC",
      clockRate: asc.sampleRate,
      sampleRate: asc.sampleRate,
      channels: asc.channels,
      config: { codec: "AAC", asc: audioConfig.payload.slice(1) },
    },
  ];
  const writer = new Fmp4Writer({ tracks });
  const parts: Uint8Array[] = [];
  for (const r of records) {
    let frame: MediaFrame | undefined;
    if (r.type === 9 && r.payload[1] === 1) {
      const ts = r.timestampMs * 90;
      frame = {
        trackId: 0,
        codec: "H264",
        pts: ts,
        dts: ts,
        keyframe: r.payload[0] === 0x17,
        data: r.payload.subarray(5),
      };
    } else if (r.type === 8 && r.payload[0] === 1) {
      const ts = Math.round(r.timestampMs * asc.sampleRate / 1000);
      frame = {
        trackId: 1,
        codec: "AAC",
        pts: ts,
        dts: ts,
        keyframe: true,
        data: r.payload.subarray(1),
      };
    }
    const out = frame && writer.push(frame);
    if (out) parts.push(out);
  }
  const tail = writer.finish();
  if (tail) parts.push(tail);
  const bytes = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    bytes.set(p, at);
    at += p.length;
  }
  return {
    bytes,
    // What the SDK puts in its SourceBuffer's MIME type.
    videoCodec: `avc1.${hex(avcC.profileIdc)}${hex(avcC.constraintFlags)}${hex(avcC.levelIdc)}`,
    audioCodec: `mp4a.40.${asc.objectType}`,
  };
}

Deno.test("MSE: an RTMP stream plays as SDK records (configs, then a keyframe) that decode as H.264 + AAC", async () => {
  let left: MediaTransport | undefined;
  await withServer(async (server) => {
    const publisher = publishRtmp(`rtmp://127.0.0.1:${server.rtmpPort}/live/mse`, 30);
    const { client, userData } = await WcsClient.connect(server.wsUrl);
    let transport: MediaTransport | undefined;
    try {
      await waitFor("the RTMP stream", () => server.services.streams.published("mse"), 15_000);
      const mediaSessionId = crypto.randomUUID();
      const played = await playMse(
        server,
        client,
        userData.authToken as string,
        "mse",
        mediaSessionId,
      );
      transport = played.transport;
      assert.match(played.sdp, /^m=video 9 /m);
      assert.match(played.sdp, /^m=audio 9 /m);
      const [playing] = await client.next("notifyStreamStatusEvent") as [Record<string, unknown>];
      assert.equal(playing.status, "PLAYING");
      assert.equal(playing.mediaSessionId, mediaSessionId);
      const [record] = await (await server.post("/stream/find", { mediaSessionId })).json();
      assert.equal(record.mediaProvider, "MSE");
      assert.equal(record.status, "PLAYING");
      await waitFor("3 s of media", () => {
        const video = transport!.records.filter((r) => r.type === 9);
        return video.length > 1 && video.at(-1)!.timestampMs - video[0].timestampMs >= 3000
          ? true
          : undefined;
      }, 15_000);
      const records = transport.records;
      // The SDK needs the configurations before any frame, stamped near the frames' time.
      assert.equal(records[0].type, 9);
      assert.deepEqual([...records[0].payload.subarray(0, 2)], [0x17, 0]);
      assert.equal(records[1].type, 8);
      assert.equal(records[1].payload[0], 0);
      const firstFrame = records.slice(2).find((r) => r.type === 9)!;
      assert.deepEqual([...firstFrame.payload.subarray(0, 2)], [0x17, 1], "starts at a keyframe");
      assert.ok(Math.abs(firstFrame.timestampMs - records[0].timestampMs) < 5000);
      const { bytes, videoCodec, audioCodec } = remux(records);
      assert.match(videoCodec, /^avc1\.[0-9A-F]{6}$/);
      assert.equal(audioCodec, "mp4a.40.2");
      const file = await Deno.makeTempFile({ suffix: ".mp4" });
      try {
        await Deno.writeFile(file, bytes);
        const probed = await probe(file);
        const video = probed.streams.find((s) => s.codec_type === "video");
        const audio = probed.streams.find((s) => s.codec_type === "audio");
        assert.equal(video?.codec_name, "h264");
        assert.equal(audio?.codec_name, "aac");
        assert.equal(video?.width, 640);
        assert.ok(Number(video?.nb_read_frames) >= 50, `video frames ${video?.nb_read_frames}`);
        assert.ok(Number(audio?.nb_read_frames) >= 100, `audio frames ${audio?.nb_read_frames}`);
      } finally {
        await Deno.remove(file);
      }
      // A second play of the session, left playing: the server's stop ends it.
      left = (await playMse(server, client, userData.authToken as string, "mse")).transport;
      const [second] = await client.next("notifyStreamStatusEvent") as [Record<string, unknown>];
      assert.equal(second.status, "PLAYING");
      await waitFor("the second play's media", () => left!.messages.length > 0 || undefined);
      client.send("stopStream", { mediaSessionId });
      const [stopped] = await client.next("notifyStreamStatusEvent") as [Record<string, unknown>];
      assert.equal(stopped.status, "STOPPED");
      assert.equal(stopped.info, "Stopped by user");
      const closed = await transport.closed;
      assert.equal(closed.code, 1000);
      assert.deepEqual(await (await server.post("/stream/find", { mediaSessionId })).json(), []);
      assert.equal(left.state, WebSocket.OPEN);
    } finally {
      await transport?.close();
      await stopPublisher(publisher);
    }
  });
  // The server closed the media socket of the play it ended when it stopped.
  assert.ok(left);
  assert.equal((await left.closed).code, 1000);
});

Deno.test("MSE: WSPlayer plays end FAILED with the reason; a media socket with an unknown authToken is closed", async () => {
  await withServer(async (server) => {
    const { client } = await WcsClient.connect(server.wsUrl);
    try {
      const mediaSessionId = crypto.randomUUID();
      client.send("playStream", {
        mediaSessionId,
        name: "anything",
        mediaProvider: "WSPlayer",
        sdp: "v=0\r\n",
      });
      const [failed] = await client.next("notifyStreamStatusEvent") as [Record<string, unknown>];
      assert.equal(failed.status, "FAILED");
      assert.equal(failed.info, wsPlayerUnsupportedInfo);
      assert.equal(failed.mediaSessionId, mediaSessionId);
      const stray = await MediaTransport.open(server.wsUrl, "not-a-token");
      const closed = await stray.closed;
      assert.equal(closed.code, 1008);
      // A play of a stream that does not exist fails as WebRTC plays do.
      client.send("playStream", {
        mediaSessionId: "x1",
        name: "none",
        mediaProvider: "MSE",
        sdp: mseOffer,
      });
      const [missing] = await client.next("notifyStreamStatusEvent") as [Record<string, unknown>];
      assert.equal(missing.status, "FAILED");
      assert.equal(missing.info, "Stream not found");
    } finally {
      await client.close();
    }
  });
});
