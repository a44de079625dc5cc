/**
 * The /mpegts group over UDP, checked the way a user would: ffmpeg sends `-f mpegts udp://`
 * to the port `/mpegts/startup` answered, the stream appears, its recording and an RTMP
 * player decode with B-frames kept; MP3 comes out as AAC; H.265 and Opus go through; a
 * restarted sender continues the same stream on a continuous timeline; silence ends it;
 * terminate ends it; 400/404/409/501/503; senders outside allowedList are dropped.
 */
import assert from "node:assert/strict";
import { Buffer } from "node:buffer";
import dgram from "node:dgram";
import type { MpegtsRecord, StreamRecord } from "../core/records.ts";
import { fixture, run, tempPath } from "../media/formats/test_fixtures.ts";
import { TsDemuxer } from "../media/formats/mpegts/demuxer.ts";
import { TsMuxer } from "../media/formats/mpegts/muxer.ts";
import type { MediaFrame } from "../media/frame.ts";
import {
  makeTsClip,
  requireSrtTools,
  srtLiveTransmitSend,
  stopPeer,
} from "../media/protocols/srt/interop_fixtures.ts";
import { pngSize, probe, waitFor } from "./helpers/media_fixtures.ts";
import { testConfig, type TestServer, withServer } from "./helpers/test_server.ts";

/** A range of `count` ports starting at a random base, so parallel runs rarely collide. */
function portRange(count: number): { portMin: number; portMax: number } {
  const portMin = 42000 + Math.floor(Math.random() * 2000) * 4;
  return { portMin, portMax: portMin + count - 1 };
}

/** `uri` with ffmpeg's options: SRT in caller mode with 200 ms latency, UDP in 1316-byte datagrams. */
function ffmpegUri(uri: string): string {
  const [base, query] = uri.split("?");
  return base.startsWith("srt:")
    ? `${base}?mode=caller&latency=200000${query ? `&${query}` : ""}`
    : `${base}?pkt_size=1316`;
}

/**
 * ffmpeg sending `seconds` of 640x360 25 fps H.264 (2 B-frames) and `audio` to `uri` (UDP, or
 * SRT in caller mode).
 */
function sendFfmpeg(uri: string, seconds: number, audio = "aac"): Deno.ChildProcess {
  return new Deno.Command("ffmpeg", {
    args: [
      ...["-v", "error", "-re", "-f", "lavfi", "-i", "testsrc=size=640x360:rate=25"],
      ...["-f", "lavfi", "-i", "sine=f=440", "-t", String(seconds)],
      ...["-c:v", "libx264", "-preset", "veryfast", "-bf", "2", "-g", "50", "-c:a", audio],
      ...["-f", "mpegts", ffmpegUri(uri)],
    ],
    stdout: "null",
    stderr: "piped",
  }).spawn();
}

/** Stops an ffmpeg sender (ended or not) and waits for it. */
async function stopSender(sender: Deno.ChildProcess): Promise<void> {
  try {
    sender.kill();
  } catch {
    // it has ended already
  }
  await sender.output();
}

/**
 * Sends a TS file as 1316-byte datagrams to 127.0.0.1:`port`, paced at ~`bytesPerMs`;
 * `order` may drop datagrams (answer []) or swap them (answer the held one after this one).
 */
async function sendFile(
  path: string,
  port: number,
  bytesPerMs = 400,
  order: (chunk: Uint8Array) => Uint8Array[] = (chunk) => [chunk],
): Promise<void> {
  const data = await Deno.readFile(path);
  const socket = dgram.createSocket("udp4");
  try {
    for (let pos = 0; pos < data.length; pos += 1316) {
      for (const chunk of order(data.subarray(pos, pos + 1316))) {
        await new Promise<void>((resolve, reject) =>
          socket.send(chunk, port, "127.0.0.1", (err) => err ? reject(err) : resolve())
        );
      }
      if ((pos / 1316) % 8 === 7) await new Promise((r) => setTimeout(r, 8 * 1316 / bytesPerMs));
    }
  } finally {
    await new Promise<void>((resolve) => socket.close(() => resolve()));
  }
}

async function startup(server: TestServer, name: string): Promise<MpegtsRecord> {
  const res = await server.post("/mpegts/startup", { localStreamName: name, transport: "udp" });
  const body = await res.json();
  assert.equal(res.status, 200, JSON.stringify(body));
  return body as MpegtsRecord;
}

async function findReceiver(server: TestServer, name: string): Promise<MpegtsRecord | undefined> {
  const res = await server.post("/mpegts/find", { localStreamName: name });
  return ((await res.json()) as MpegtsRecord[])[0];
}

async function findStream(server: TestServer, name: string): Promise<StreamRecord | undefined> {
  const res = await server.post("/stream/find", { name });
  return res.status === 200 ? ((await res.json()) as StreamRecord[])[0] : undefined;
}

function portOf(record: MpegtsRecord): number {
  return Number(new URL(record.uri).port);
}

/** Decode and presentation times of a file's video packets, in decode order, in seconds. */
async function videoPackets(path: string): Promise<{ dts: number; pts: number }[]> {
  const { out } = await run("ffprobe", [
    ...["-v", "error", "-select_streams", "v:0", "-show_entries", "packet=dts_time,pts_time"],
    ...["-of", "json", path],
  ]);
  return (JSON.parse(out).packets as { dts_time: string; pts_time: string }[]).map((p) => ({
    dts: Number(p.dts_time),
    pts: Number(p.pts_time),
  }));
}

/**
 * Checks a file decodes cleanly, lasts `minSec` to `maxSec` with a frame every 1/25 s, and its
 * video keeps B-frames.
 */
async function checkFile(path: string, minSec: number, maxSec: number, what: string) {
  const info = await probe(path);
  assert.deepEqual(info.streams.map((s) => s.codec_name).sort(), ["aac", "h264"], what);
  assert.ok(
    info.duration >= minSec && info.duration <= maxSec,
    `${what}: ${info.duration} s, expected ${minSec} to ${maxSec}`,
  );
  const video = info.streams.find((s) => s.codec_type === "video")!;
  assert.deepEqual([video.width, video.height], [640, 360], what);
  const packets = await videoPackets(path);
  const pts = packets.map((p) => p.pts);
  const videoSec = Math.max(...pts) - Math.min(...pts) + 1 / 25;
  const frames = Number(video.nb_read_frames);
  // A file may end on a P-frame whose 2 B-frames (shown before it) came after the cut.
  assert.ok(Math.abs(frames - videoSec * 25) <= 2.01, `${what}: ${frames} frames in ${videoSec} s`);
  for (let i = 1; i < packets.length; i++) {
    assert.ok(packets[i].dts > packets[i - 1].dts, `${what}: dts rises at packet ${i}`);
  }
  assert.ok(packets.some((p, i) => i > 0 && p.pts < packets[i - 1].pts), `${what} has B-frames`);
  const { err } = await run("ffmpeg", ["-v", "error", "-i", path, "-f", "null", "-"]);
  assert.equal(err.trim(), "", `${what}: ffmpeg decodes without error`);
}

/** The one recording of the records folder. */
function recordingPath(server: TestServer): string {
  const folder = server.services.config.folders.records;
  const files = [...Deno.readDirSync(folder)].map((e) => e.name);
  assert.equal(files.length, 1, files.join());
  return `${folder}/${files[0]}`;
}

Deno.test("MPEG-TS over UDP from ffmpeg: record, stream, recording, RTMP play, snapshot, terminate", async () => {
  const config = testConfig({ mpegts: portRange(2) });
  const flv = await Deno.makeTempFile({ suffix: ".flv" });
  try {
    await withServer(async (server) => {
      const started = await startup(server, "udpcam");
      assert.match(started.uri, /^udp:\/\/127\.0\.0\.1:\d+$/);
      assert.ok(
        portOf(started) >= config.mpegts.portMin && portOf(started) <= config.mpegts.portMax,
      );
      assert.deepEqual({ ...started, localMediaSessionId: "", uri: "" }, {
        localMediaSessionId: "",
        localStreamName: "udpcam",
        uri: "",
        status: "CONNECTED",
        hasAudio: false,
        hasVideo: false,
        record: false,
        cdn: false,
        transport: "UDP",
        timeout: 90000,
        maxTimestampDiff: 1,
        allowedList: [],
      });
      const sender = sendFfmpeg(started.uri, 9);
      let recordedSec = 0;
      try {
        const stream = await waitFor("the stream", () => findStream(server, "udpcam"));
        assert.equal(stream.mediaSessionId, started.localMediaSessionId);
        assert.equal(stream.mediaProvider, "MPEGTS");
        const record = (await findReceiver(server, "udpcam"))!;
        assert.deepEqual([record.status, record.hasAudio, record.hasVideo], [
          "PROCESSED_LOCAL",
          true,
          true,
        ]);
        assert.deepEqual(await (await server.post("/mpegts/find", { uri: started.uri })).json(), [
          record,
        ]);
        const recorder = await server.post("/recorder/startup", {
          mediaSessionId: stream.mediaSessionId,
        });
        assert.equal(recorder.status, 200, await recorder.text());
        const recordStartMs = Date.now();
        const player = run("ffmpeg", [
          ...["-v", "error", "-y", "-rw_timeout", "10000000"],
          ...[
            "-i",
            `rtmp://127.0.0.1:${server.rtmpPort}/live/udpcam`,
            "-t",
            "3",
            "-c",
            "copy",
            flv,
          ],
        ]);
        const snapshot = await server.post("/stream/snapshot", { streamName: "udpcam" });
        const png = await snapshot.json();
        assert.equal(snapshot.status, 200, JSON.stringify(png));
        assert.deepEqual(pngSize(new Uint8Array(Buffer.from(png.data, "base64"))), {
          width: 640,
          height: 360,
        });
        await new Promise((r) => setTimeout(r, 4000));
        await player;
        assert.equal((await findReceiver(server, "udpcam"))!.record, true);
        const stop = await server.post("/recorder/terminate", {
          mediaSessionId: stream.mediaSessionId,
        });
        assert.equal(stop.status, 200, await stop.text());
        recordedSec = (Date.now() - recordStartMs) / 1000;
        const stats = server.services.mpegts.get("udpcam")!.stats();
        assert.equal(stats.droppedPes, 0, "nothing lost");
        assert.equal(stats.derivedDtsTracks, 0, "the PES decode times are used");
        const end = await server.post("/mpegts/terminate", { localStreamName: "udpcam" });
        assert.equal(end.status, 200, await end.text());
        assert.equal(await findStream(server, "udpcam"), undefined, "the stream ended");
        assert.deepEqual(await (await server.post("/mpegts/find_all")).json(), []);
        const again = await server.post("/mpegts/terminate", { localStreamName: "udpcam" });
        assert.equal(again.status, 404);
        await again.body?.cancel();
      } finally {
        await stopSender(sender);
      }
      // The recording starts at the last keyframe (up to a GOP of 2 s before its start).
      await checkFile(recordingPath(server), recordedSec - 0.5, recordedSec + 2.5, "recording");
      await checkFile(flv, 2.8, 3.4, "RTMP play");
      // The port is free again: a new receiver may take it.
      await startup(server, "udpcam2");
    }, config);
  } finally {
    await Deno.remove(flv);
  }
});

Deno.test("MPEG-TS over UDP: MP3 audio is published as AAC", async () => {
  const config = testConfig({ mpegts: portRange(1) });
  await withServer(async (server) => {
    const started = await startup(server, "radio");
    const sender = sendFfmpeg(started.uri, 6, "libmp3lame");
    try {
      await waitFor("the stream", () => findStream(server, "radio"));
      const stream = server.services.mpegts.get("radio")!.stream!;
      assert.deepEqual(stream.tracks.map((t) => t.codec), ["H264", "AAC"]);
      const recorder = await server.post("/recorder/startup", {
        mediaSessionId: started.localMediaSessionId,
      });
      assert.equal(recorder.status, 200, await recorder.text());
      await new Promise((r) => setTimeout(r, 3000));
      const stop = await server.post("/recorder/terminate", {
        mediaSessionId: started.localMediaSessionId,
      });
      assert.equal(stop.status, 200, await stop.text());
    } finally {
      await stopSender(sender);
    }
    const info = await probe(recordingPath(server));
    const audio = info.streams.find((s) => s.codec_type === "audio");
    assert.equal(audio?.codec_name, "aac");
    assert.ok(Number(audio?.nb_read_frames) > 40, `${audio?.nb_read_frames} AAC frames`);
  }, config);
});

Deno.test("MPEG-TS over UDP: H.264+Opus and H.265+AAC make streams of their codecs", async () => {
  const config = testConfig({ mpegts: portRange(2) });
  await withServer(async (server) => {
    for (
      const [clip, codecs] of [["h264_opus", ["H264", "OPUS"]], ["h265_aac", [
        "H265",
        "AAC",
      ]]] as const
    ) {
      const started = await startup(server, clip);
      await sendFile(await fixture(clip, "ts"), portOf(started));
      await waitFor(`the ${clip} stream`, () => findStream(server, clip));
      assert.deepEqual(
        server.services.mpegts.get(clip)!.stream!.tracks.map((t) => t.codec),
        codecs,
      );
      const record = (await findReceiver(server, clip))!;
      assert.deepEqual([record.hasAudio, record.hasVideo], [true, true]);
    }
  }, config);
});

Deno.test("MPEG-TS over UDP: a restarted sender continues the stream; silence ends it", async () => {
  const timeoutMs = 2000;
  const config = testConfig({ mpegts: { ...portRange(1), timeoutMs } });
  await withServer(async (server) => {
    const started = await startup(server, "relay");
    assert.equal(started.timeout, timeoutMs);
    const clip = await fixture("h264_aac", "ts");
    // Paced over about 2 s, so the recorder starts while the first sender sends.
    const first = sendFile(clip, portOf(started), 80);
    const stream = await waitFor("the stream", () => server.services.mpegts.get("relay")?.stream);
    const recorder = await server.post("/recorder/startup", {
      mediaSessionId: started.localMediaSessionId,
    });
    assert.equal(recorder.status, 200, await recorder.text());
    await first;
    // The same clip again from another socket (a new source port): its timestamps go back 2 s.
    await new Promise((r) => setTimeout(r, 500));
    await sendFile(clip, portOf(started), 80);
    // The receiver's silence is counted from its last packet, about now.
    const lastSentAt = Date.now();
    await new Promise((r) => setTimeout(r, 200));
    assert.equal(server.services.mpegts.get("relay")?.stream, stream, "the same stream goes on");
    const ingest = server.services.mpegts.get("relay")!;
    assert.equal(ingest.stats().peers, 2);
    assert.ok(ingest.stats().rebases >= 1, "re-based");
    const stop = await server.post("/recorder/terminate", {
      mediaSessionId: started.localMediaSessionId,
    });
    assert.equal(stop.status, 200, await stop.text());
    const packets = await videoPackets(recordingPath(server));
    for (let i = 1; i < packets.length; i++) {
      assert.ok(packets[i].dts > packets[i - 1].dts, `dts rises at packet ${i}`);
      assert.ok(packets[i].dts - packets[i - 1].dts < 0.5, `no gap at packet ${i}`);
    }
    // Silence: the receiver and its stream end after the timeout.
    await waitFor(
      "the receiver to end",
      async () => (await findReceiver(server, "relay")) ? undefined : true,
      timeoutMs + 3000,
    );
    // From the last packet (the checks since, an ffprobe of the recording, may take long).
    assert.ok(Date.now() - lastSentAt >= timeoutMs - 300, "not before the timeout");
    assert.equal(stream.ended, true);
    assert.equal(await findStream(server, "relay"), undefined);
  }, config);
});

Deno.test("/mpegts: 400, 404, 409, 503 when the port range is used up", async () => {
  const config = testConfig({ mpegts: portRange(1) });
  await withServer(async (server) => {
    const post = async (path: string, body: unknown) => {
      const res = await server.post(path, body);
      return { status: res.status, body: await res.json().catch(() => undefined) };
    };
    const missing = await post("/mpegts/startup", { transport: "udp" });
    assert.equal(missing.status, 400);
    assert.match(JSON.stringify(missing.body), /localStreamName/);
    const tcp = await post("/mpegts/startup", { localStreamName: "a", transport: "tcp" });
    assert.equal(tcp.status, 400);
    assert.match(JSON.stringify(tcp.body), /transport/);
    assert.equal((await post("/mpegts/terminate", { localStreamName: "none" })).status, 404);
    await startup(server, "a");
    const duplicate = await post("/mpegts/startup", { localStreamName: "a", transport: "udp" });
    assert.equal(duplicate.status, 409);
    const full = await post("/mpegts/startup", { localStreamName: "b", transport: "udp" });
    assert.equal(full.status, 503);
    assert.match(full.body.message, /no free MPEG-TS port/);
    const health = await (await fetch(`${server.restUrl}/health`)).json();
    assert.deepEqual(health.limits.mpegtsPorts, { current: 1, max: 1, refused: 1 });
    assert.deepEqual(await post("/mpegts/find", { localStreamName: "b" }), {
      status: 200,
      body: [],
    });
    assert.equal((await post("/mpegts/find", { port: 1 })).status, 400);
  }, config);
});

Deno.test("MPEG-TS over UDP: datagrams from an address outside allowedList are dropped and counted", async () => {
  const config = testConfig({ mpegts: { ...portRange(1), allowedList: ["10.0.0.0/8"] } });
  await withServer(async (server) => {
    const started = await startup(server, "guarded");
    assert.deepEqual(started.allowedList, ["10.0.0.0/8"]);
    await sendFile(await fixture("h264_aac", "ts"), portOf(started));
    await new Promise((r) => setTimeout(r, 300));
    const record = (await findReceiver(server, "guarded"))!;
    assert.equal(record.status, "CONNECTED");
    assert.equal(await findStream(server, "guarded"), undefined);
    assert.ok(server.services.mpegts.get("guarded")!.stats().refused > 50);
  }, config);
});

Deno.test("MPEG-TS over UDP: video PES without a DTS get decode times derived", async () => {
  // ffmpeg's H.264 with 2 B-frames, muxed again with every video dts left out (dts = pts).
  const demuxer = new TsDemuxer();
  const clip = await Deno.readFile(await fixture("h264_aac", "ts"));
  const frames = [...demuxer.push(clip), ...demuxer.flush()];
  const tracks = [...demuxer.tracks].sort((a, b) => a.id - b.id);
  const muxer = new TsMuxer({ tracks });
  const parts = frames.map((f) => muxer.mux(f.codec === "H264" ? { ...f, dts: f.pts } : f));
  const path = await tempPath("mpegts_no_dts.ts");
  await Deno.writeFile(path, new Uint8Array(parts.flatMap((p) => [...p])));
  const config = testConfig({ mpegts: portRange(1) });
  await withServer(async (server) => {
    const started = await startup(server, "nodts");
    const sending = sendFile(path, portOf(started), 40);
    const stream = await waitFor("the stream", () => server.services.mpegts.get("nodts")?.stream);
    const received: MediaFrame[] = [];
    const reading = (async () => {
      for await (const frame of stream.reader()) if (frame.codec === "H264") received.push(frame);
    })();
    await sending;
    await new Promise((r) => setTimeout(r, 200));
    assert.equal(server.services.mpegts.get("nodts")!.stats().derivedDtsTracks, 1);
    const end = await server.post("/mpegts/terminate", { localStreamName: "nodts" });
    assert.equal(end.status, 200, await end.text());
    await reading;
    assert.ok(received.length > 25, `${received.length} video frames`);
    for (let i = 1; i < received.length; i++) {
      assert.ok(received[i].dts > received[i - 1].dts, `dts rises at frame ${i}`);
      assert.ok(received[i].dts <= received[i].pts, `dts <= pts at frame ${i}`);
    }
    assert.ok(received.some((f, i) => i > 0 && f.pts < received[i - 1].pts), "B-frames kept");
  }, config);
});

Deno.test("MPEG-TS over UDP: lost and reordered datagrams cost their frames, never the stream", async () => {
  const config = testConfig({ mpegts: portRange(1) });
  await withServer(async (server) => {
    const started = await startup(server, "lossy");
    let n = 0;
    let held: Uint8Array | undefined;
    // Every 40th datagram lost, every 50th sent after the next one.
    const lossy = (chunk: Uint8Array): Uint8Array[] => {
      n++;
      if (n % 40 === 0) return [];
      if (n % 50 === 0) {
        held = chunk;
        return [];
      }
      const out = held ? [chunk, held] : [chunk];
      held = undefined;
      return out;
    };
    const sending = sendFile(await fixture("h264_aac", "ts"), portOf(started), 40, lossy);
    const stream = await waitFor("the stream", () => server.services.mpegts.get("lossy")?.stream);
    const received: MediaFrame[] = [];
    const reading = (async () => {
      for await (const frame of stream.reader()) received.push(frame);
    })();
    await sending;
    await new Promise((r) => setTimeout(r, 200));
    const stats = server.services.mpegts.get("lossy")!.stats();
    assert.ok(stats.droppedPes > 0, "damaged PES dropped");
    const end = await server.post("/stream/terminate", { mediaSessionId: stream.mediaSessionId });
    assert.equal(end.status, 200, await end.text());
    await reading;
    assert.equal(await findReceiver(server, "lossy"), undefined, "/stream/terminate ends it");
    const video = received.filter((f) => f.codec === "H264");
    assert.ok(video.length > 20 && received.length > video.length, `${received.length} frames`);
    for (let i = 1; i < video.length; i++) assert.ok(video[i].dts > video[i - 1].dts);
  }, config);
});

Deno.test("MPEG-TS over SRT from an ffmpeg (libsrt) caller: record, stream, recording, reconnect", async () => {
  const config = testConfig({ mpegts: portRange(1) });
  await withServer(async (server) => {
    const started = await (async () => {
      const res = await server.post("/mpegts/startup", {
        localStreamName: "srtcam",
        transport: "srt",
      });
      const body = await res.json();
      assert.equal(res.status, 200, JSON.stringify(body));
      return body as MpegtsRecord;
    })();
    assert.match(started.uri, /^srt:\/\/127\.0\.0\.1:\d+$/);
    assert.deepEqual([started.transport, started.status], ["SRT", "CONNECTED"]);
    let sender = sendFfmpeg(started.uri, 6);
    try {
      const stream = await waitFor(
        "the stream",
        () => server.services.mpegts.get("srtcam")?.stream,
      );
      const record = (await findReceiver(server, "srtcam"))!;
      assert.deepEqual([record.status, record.hasAudio, record.hasVideo], [
        "PROCESSED_LOCAL",
        true,
        true,
      ]);
      const recorder = await server.post("/recorder/startup", {
        mediaSessionId: stream.mediaSessionId,
      });
      assert.equal(recorder.status, 200, await recorder.text());
      const recordStartMs = Date.now();
      await new Promise((r) => setTimeout(r, 3000));
      const stop = await server.post("/recorder/terminate", {
        mediaSessionId: stream.mediaSessionId,
      });
      assert.equal(stop.status, 200, await stop.text());
      const recordedSec = (Date.now() - recordStartMs) / 1000;
      assert.equal(server.services.mpegts.get("srtcam")!.stats().droppedPes, 0, "nothing lost");
      await checkFile(recordingPath(server), recordedSec - 0.5, recordedSec + 2.5, "SRT recording");
      // The caller goes and comes back: the same stream goes on.
      await stopSender(sender);
      sender = sendFfmpeg(started.uri, 3);
      await waitFor(
        "the second caller",
        () => server.services.mpegts.get("srtcam")!.stats().peers === 2 || undefined,
      );
      await new Promise((r) => setTimeout(r, 1500));
      assert.equal(server.services.mpegts.get("srtcam")?.stream, stream, "the same stream goes on");
      const end = await server.post("/mpegts/terminate", { localStreamName: "srtcam" });
      assert.equal(end.status, 200, await end.text());
      assert.equal(stream.ended, true);
    } finally {
      await stopSender(sender);
    }
  }, config);
});

Deno.test("MPEG-TS over SRT: a caller outside allowedList is refused at the handshake", async () => {
  const config = testConfig({ mpegts: { ...portRange(1), allowedList: ["10.0.0.0/8"] } });
  await withServer(async (server) => {
    const res = await server.post("/mpegts/startup", {
      localStreamName: "guarded",
      transport: "srt",
    });
    const started = await res.json() as MpegtsRecord;
    assert.equal(res.status, 200, JSON.stringify(started));
    const result = await sendFfmpeg(started.uri, 2).output();
    assert.notEqual(result.code, 0, "ffmpeg could not connect");
    assert.ok(server.services.mpegts.get("guarded")!.stats().refused >= 1, "refusal counted");
    assert.equal((await findReceiver(server, "guarded"))?.status, "CONNECTED");
    assert.equal(await findStream(server, "guarded"), undefined, "no stream");
  }, config);
});

Deno.test("MPEG-TS over SRT with mpegts.srtPassphrase: the right passphrase publishes, a wrong one is refused", async () => {
  const passphrase = "correct-horse-battery";
  const config = testConfig({ mpegts: { ...portRange(1), srtPassphrase: passphrase } });
  await withServer(async (server) => {
    const res = await server.post("/mpegts/startup", {
      localStreamName: "secret",
      transport: "srt",
    });
    const started = await res.json() as MpegtsRecord;
    assert.equal(res.status, 200, JSON.stringify(started));
    const wrong = await sendFfmpeg(`${started.uri}?passphrase=wrong-horse-battery`, 2).output();
    assert.notEqual(wrong.code, 0, "a wrong passphrase cannot connect");
    assert.equal(await findStream(server, "secret"), undefined, "no stream");
    assert.ok(server.services.mpegts.get("secret")!.stats().refused >= 1, "refusal counted");
    const sender = sendFfmpeg(`${started.uri}?passphrase=correct-horse-battery&pbkeylen=32`, 4);
    try {
      const stream = await waitFor(
        "the stream",
        () => server.services.mpegts.get("secret")?.stream,
      );
      assert.deepEqual(stream.tracks.map((t) => t.codec), ["H264", "AAC"]);
      const received: MediaFrame[] = [];
      for await (const frame of stream.reader()) {
        received.push(frame);
        if (received.filter((f) => f.codec === "H264").length >= 50) break;
      }
      assert.equal(server.services.mpegts.get("secret")!.stats().droppedPes, 0);
    } finally {
      await stopSender(sender);
    }
  }, config);
});

Deno.test("MPEG-TS over UDP: a sender with other codecs on the port makes a new stream of the name", async () => {
  const config = testConfig({ mpegts: portRange(1) });
  await withServer(async (server) => {
    const started = await startup(server, "switch");
    await sendFile(await fixture("h264_aac", "ts"), portOf(started));
    const first = await waitFor(
      "the H.264 stream",
      () => server.services.mpegts.get("switch")?.stream,
    );
    assert.deepEqual(first.tracks.map((t) => t.codec), ["H264", "AAC"]);
    await new Promise((r) => setTimeout(r, 500));
    await sendFile(await fixture("h265_aac", "ts"), portOf(started));
    const second = await waitFor("the H.265 stream", () => {
      const stream = server.services.mpegts.get("switch")?.stream;
      return stream !== first ? stream : undefined;
    });
    assert.equal(first.ended, true);
    assert.deepEqual(second.tracks.map((t) => t.codec), ["H265", "AAC"]);
    assert.equal(second.name, "switch");
    assert.equal(second.mediaSessionId, started.localMediaSessionId);
    assert.equal((await findStream(server, "switch"))?.mediaSessionId, started.localMediaSessionId);
  }, config);
});

Deno.test("MPEG-TS pulled over SRT from an ffmpeg listener (with a passphrase); bad uris are 400", async () => {
  const port = portRange(1).portMin;
  const passphrase = "pull-passphrase-1";
  const listener = new Deno.Command("ffmpeg", {
    args: [
      ...["-v", "error", "-re", "-f", "lavfi", "-i", "testsrc=size=640x360:rate=25"],
      ...["-f", "lavfi", "-i", "sine=f=440", "-t", "20"],
      ...["-c:v", "libx264", "-preset", "veryfast", "-g", "25", "-c:a", "aac", "-f", "mpegts"],
      `srt://127.0.0.1:${port}?mode=listener&latency=200000&passphrase=${passphrase}`,
    ],
    stdout: "null",
    stderr: "piped",
  }).spawn();
  try {
    await withServer(async (server) => {
      for (
        const [transport, uri] of [
          ["udp", `srt://127.0.0.1:${port}`],
          ["srt", "srt://127.0.0.1"],
          ["srt", `rtmp://127.0.0.1:${port}`],
          ["srt", `srt://127.0.0.1:${port}?passphrase=short`],
        ]
      ) {
        const res = await server.post("/mpegts/startup", { localStreamName: "x", transport, uri });
        const body = await res.json();
        assert.equal(res.status, 400, JSON.stringify(body));
        assert.equal(body.field, "uri");
      }
      const res = await server.post("/mpegts/startup", {
        localStreamName: "pulled",
        transport: "srt",
        uri: `srt://127.0.0.1:${port}?passphrase=${passphrase}&latency=200`,
      });
      const record = await res.json() as MpegtsRecord;
      assert.equal(res.status, 200, JSON.stringify(record));
      assert.equal(record.uri.includes(passphrase), false, record.uri);
      assert.match(record.uri, new RegExp(`^srt://127\\.0\\.0\\.1:${port}`));
      await waitFor(
        "the pulled stream",
        () => server.services.mpegts.get("pulled")?.stream,
        15_000,
      );
      const png = await waitFor("a snapshot of the pulled stream", async () => {
        const shot = await server.post("/stream/snapshot", { streamName: "pulled" });
        const body = await shot.json();
        return shot.status === 200 ? body as { data: string } : undefined;
      }, 15_000);
      assert.deepEqual(pngSize(new Uint8Array(Buffer.from(png.data, "base64"))), {
        width: 640,
        height: 360,
      });
      assert.equal((await findReceiver(server, "pulled"))?.status, "PROCESSED_LOCAL");
      const end = await server.post("/mpegts/terminate", { localStreamName: "pulled" });
      assert.equal(end.status, 200, await end.text());
      assert.equal(await findStream(server, "pulled"), undefined);
    });
  } finally {
    await stopSender(listener);
  }
});

Deno.test("MPEG-TS over SRT from srt-live-transmit with a passphrase: the stream decodes", async () => {
  requireSrtTools();
  const passphrase = "live-transmit-phrase";
  const clip = await tempPath(`slt-${crypto.randomUUID()}.ts`);
  await makeTsClip(clip, 20);
  const config = testConfig({ mpegts: { ...portRange(1), srtPassphrase: passphrase } });
  await withServer(async (server) => {
    const res = await server.post("/mpegts/startup", { localStreamName: "slt", transport: "srt" });
    const record = await res.json() as MpegtsRecord;
    assert.equal(res.status, 200, JSON.stringify(record));
    const sender = srtLiveTransmitSend(
      clip,
      `srt://127.0.0.1:${portOf(record)}?latency=200&passphrase=${passphrase}`,
    );
    try {
      await waitFor("the stream", () => server.services.mpegts.get("slt")?.stream, 15_000);
      const png = await waitFor("a snapshot", async () => {
        const shot = await server.post("/stream/snapshot", { streamName: "slt" });
        const body = await shot.json();
        return shot.status === 200 ? body as { data: string } : undefined;
      }, 15_000);
      assert.deepEqual(pngSize(new Uint8Array(Buffer.from(png.data, "base64"))), {
        width: 640,
        height: 360,
      });
      const stream = (await findStream(server, "slt"))!;
      assert.deepEqual([stream.videoCodec, stream.audioCodec], ["H264", "AAC"]);
    } finally {
      await stopPeer(sender);
    }
  }, config);
});
