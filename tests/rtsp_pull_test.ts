/**
 * RTSP pull against a real camera (the GStreamer RTSP server of tests/peers): the /rtsp
 * group, the stream it publishes and its frames, TCP and UDP, Digest auth, a camera that
 * dies and comes back, recording and snapshots of the pulled stream, and the refusals.
 */
import assert from "node:assert/strict";
import type { RtspPullRecord, StreamRecord } from "../core/records.ts";
import type { MediaFrame } from "../media/frame.ts";
import { Stream } from "../media/stream.ts";
import { startGstRtsp } from "./helpers/gst_rtsp.ts";
import { pngSize, probe, waitFor } from "./helpers/media_fixtures.ts";
import { freePort } from "./helpers/process.ts";
import { testConfig, type TestServer, withServer } from "./helpers/test_server.ts";

/** Ports of UDP media for one test server: a random 200-port span, so servers do not meet. */
function rtspConfig(transport: "auto" | "tcp" | "udp") {
  const udpPortMin = 40000 + 2 * Math.floor(Math.random() * 10000);
  return testConfig({ rtsp: { transport }, media: { udpPortMin, udpPortMax: udpPortMin + 199 } });
}

async function call(server: TestServer, path: string, body: unknown): Promise<[number, string]> {
  const res = await server.post(path, body);
  return [res.status, await res.text()];
}

async function pulls(server: TestServer, filter?: object): Promise<RtspPullRecord[]> {
  const res = filter
    ? await server.post("/rtsp/find", filter)
    : await server.post("/rtsp/find_all");
  assert.equal(res.status, 200);
  return await res.json();
}

async function streams(server: TestServer): Promise<StreamRecord[]> {
  return await (await server.post("/stream/find_all")).json();
}

function streamObject(server: TestServer, name: string): Stream {
  const stream = server.services.streams.published(name);
  assert.ok(stream instanceof Stream, `stream ${name} is published`);
  return stream;
}

/**
 * UDP sockets of `server`'s pulls: bound on 127.0.0.1 within its media port range, as `ss`
 * lists them, the ICE mux's port (the range's first free one) left out.
 */
/** Ports of this process's UDP sockets on 127.0.0.1 in the media range, the ICE mux's aside. */
async function mediaUdpPorts(server: TestServer): Promise<Set<number>> {
  const { udpPortMin: min, udpPortMax: max } = server.services.config.media;
  const mux = server.services.iceMux?.port;
  // Only this process's sockets: the range overlaps the kernel's ephemeral ports, which any
  // other program on the machine may hold.
  const out = await new Deno.Command("ss", { args: ["-Huanp"], stdout: "piped" }).output();
  const owner = `pid=${Deno.pid},`;
  const ports = new Set<number>();
  for (const line of new TextDecoder().decode(out.stdout).split("\n")) {
    const m = /\s127\.0\.0\.1:(\d+)\s/.exec(line);
    const port = m === null ? NaN : Number(m[1]);
    if (port >= min && port <= max && port !== mux && line.includes(owner)) ports.add(port);
  }
  return ports;
}

/**
 * UDP sockets the pull opened: those not open `before` it started (a socket of an earlier
 * test's server may still be closing when this one starts).
 */
async function pullUdpSockets(server: TestServer, before: Set<number>): Promise<number> {
  return [...await mediaUdpPorts(server)].filter((port) => !before.has(port)).length;
}

/** The frames a new reader of `stream` gets during `ms`. */
async function readFor(stream: Stream, ms: number): Promise<MediaFrame[]> {
  const reader = stream.reader();
  const timer = setTimeout(() => reader.close(), ms);
  const frames: MediaFrame[] = [];
  for await (const frame of reader) frames.push(frame);
  clearTimeout(timer);
  return frames;
}

/** Checks a second and a half of the pulled stream: frame rates, keyframe first, A/V in step. */
async function checkFrames(stream: Stream, audioCodec: string): Promise<void> {
  const frames = await readFor(stream, 1500);
  const video = frames.filter((f) => f.trackId === 0);
  const audio = frames.filter((f) => f.trackId === 1);
  assert.ok(video.length >= 20, `video frames: ${video.length}`);
  assert.ok(audio.length >= 10, `audio frames: ${audio.length}`);
  assert.equal(video[0].keyframe, true, "a reader starts at a keyframe");
  assert.equal(video[0].codec, "H264");
  assert.equal(audio[0].codec, audioCodec);
  for (let i = 1; i < video.length; i++) {
    assert.ok(video[i].pts > video[i - 1].pts, "video pts rise");
  }
  // Both tracks end within a few frames of each other on the common timeline.
  const videoEnd = video.at(-1)!.pts / 90000;
  const audioEnd = audio.at(-1)!.pts / stream.tracks[1].clockRate;
  assert.ok(Math.abs(videoEnd - audioEnd) < 0.25, `A/V apart: ${videoEnd} vs ${audioEnd}`);
}

for (
  const [audio, transport] of [
    ["aac", "tcp"],
    ["aac", "udp"],
    ["pcmu", "tcp"],
    ["pcmu", "udp"],
    ["opus", "tcp"],
  ] as const
) {
  Deno.test(`H.264 + ${audio} over ${transport}: startup, records, frames, 409, terminate`, async () => {
    const camera = await startGstRtsp({ audio });
    const config = rtspConfig(transport);
    try {
      await withServer(async (server) => {
        const name = `cam-${audio}-${transport}`;
        const before = await mediaUdpPorts(server);
        const [status, text] = await call(server, "/rtsp/startup", {
          uri: camera.url,
          localStreamName: name,
        });
        assert.equal(status, 200, text);

        const [record] = await streams(server);
        assert.equal(record.name, name);
        assert.equal(record.mediaProvider, "RTSP");
        assert.equal(record.videoCodec, "H264");
        assert.equal(record.audioCodec, audio.toUpperCase());
        assert.equal(record.width, 640);
        assert.equal(record.height, 360);
        assert.equal(record.status, "PUBLISHING");
        assert.equal(record.published, true);
        assert.deepEqual(await pulls(server), [{
          uri: camera.url,
          toStream: name,
          status: "PLAYING",
        }]);
        assert.equal((await pulls(server, { uri: camera.url, status: "PLAYING" })).length, 1);
        assert.deepEqual(await pulls(server, { uri: "rtsp://127.0.0.1:1/other" }), []);

        const udp = await pullUdpSockets(server, before);
        // Two tracks, an RTP and an RTCP socket each; none over TCP.
        assert.equal(udp, transport === "udp" ? 4 : 0, `udp sockets: ${udp}`);

        await checkFrames(streamObject(server, name), audio.toUpperCase());

        const [again] = await call(server, "/rtsp/startup", { uri: camera.url });
        assert.equal(again, 409);

        assert.deepEqual(await call(server, "/rtsp/terminate", { uri: camera.url }), [200, ""]);
        assert.deepEqual(await pulls(server), []);
        assert.deepEqual(await streams(server), []);
        assert.equal(await pullUdpSockets(server, before), 0);
        const [gone] = await call(server, "/rtsp/terminate", { uri: camera.url });
        assert.equal(gone, 404);
      }, config);
    } finally {
      await camera.stop();
    }
  });
}

Deno.test("transport auto plays over UDP when UDP works; /stream/terminate ends the pull", async () => {
  const camera = await startGstRtsp();
  const config = rtspConfig("auto");
  try {
    await withServer(async (server) => {
      const before = await mediaUdpPorts(server);
      assert.equal((await call(server, "/rtsp/startup", { uri: camera.url }))[0], 200);
      assert.deepEqual(await pulls(server), [{
        uri: camera.url,
        toStream: camera.url,
        status: "PLAYING",
      }]);
      assert.equal(await pullUdpSockets(server, before), 4);
      const [record] = await streams(server);
      assert.equal(record.name, camera.url);
      // Ending the stream ends the pull too.
      const res = await server.post("/stream/terminate", { mediaSessionId: record.mediaSessionId });
      assert.equal(res.status, 200);
      assert.deepEqual(await pulls(server), []);
      assert.equal(await pullUdpSockets(server, before), 0);
    }, config);
  } finally {
    await camera.stop();
  }
});

Deno.test("Digest auth: credentials in the uri play; none is a 502 naming the 401", async () => {
  const camera = await startGstRtsp({ user: "viewer", password: "s3cret" });
  try {
    await withServer(async (server) => {
      const refused = await call(server, "/rtsp/startup", {
        uri: camera.url,
        localStreamName: "a",
      });
      assert.equal(refused[0], 502);
      assert.match(JSON.parse(refused[1]).message, /DESCRIBE answered 401/);
      const wrong = camera.url.replace("rtsp://", "rtsp://viewer:nope@");
      assert.equal(
        (await call(server, "/rtsp/startup", { uri: wrong, localStreamName: "a" }))[0],
        502,
      );
      assert.deepEqual(await pulls(server), []);
      assert.deepEqual(await streams(server), []);

      const uri = camera.url.replace("rtsp://", "rtsp://viewer:s3cret@");
      const [status, text] = await call(server, "/rtsp/startup", { uri, localStreamName: "a" });
      assert.equal(status, 200, text);
      await checkFrames(streamObject(server, "a"), "AAC");
    }, rtspConfig("tcp"));
  } finally {
    await camera.stop();
  }
});

Deno.test("refusals: unreachable camera 502, malformed uri 400, taken name 409, unknown uri 404", async () => {
  await withServer(async (server) => {
    const port = freePort();
    const [status, text] = await call(server, "/rtsp/startup", {
      uri: `rtsp://127.0.0.1:${port}/x`,
    });
    assert.equal(status, 502, text);
    assert.equal(JSON.parse(text).error, "bad gateway");
    assert.match(JSON.parse(text).message, /cannot connect/);
    const [bad, badText] = await call(server, "/rtsp/startup", { uri: "rtsp://[::1/x" });
    assert.equal(bad, 400);
    assert.equal(JSON.parse(badText).field, "uri");
    assert.deepEqual(await pulls(server), []);
    assert.deepEqual(await streams(server), []);
    assert.equal((await call(server, "/rtsp/terminate", { uri: "rtsp://127.0.0.1/none" }))[0], 404);

    const camera = await startGstRtsp();
    try {
      assert.equal(
        (await call(server, "/rtsp/startup", { uri: camera.url, localStreamName: "n" }))[0],
        200,
      );
      const other = camera.url + "?again";
      const [taken] = await call(server, "/rtsp/startup", { uri: other, localStreamName: "n" });
      assert.equal(taken, 409);
      assert.equal((await pulls(server)).length, 1);
    } finally {
      await camera.stop();
    }
  }, rtspConfig("tcp"));
});

Deno.test("a camera killed mid-stream and restarted: the pull reconnects, readers go on", async () => {
  let camera = await startGstRtsp();
  const port = camera.port;
  try {
    await withServer(async (server) => {
      assert.equal(
        (await call(server, "/rtsp/startup", { uri: camera.url, localStreamName: "c" }))[0],
        200,
      );
      const stream = streamObject(server, "c");
      const reader = stream.reader();
      const frames: MediaFrame[] = [];
      const reading = (async () => {
        for await (const frame of reader) frames.push(frame);
      })();
      await waitFor("frames before the drop", () => frames.length > 20 || undefined);

      await camera.kill();
      await waitFor(
        "RECONNECTING",
        async () => (await pulls(server))[0]?.status === "RECONNECTING" || undefined,
      );
      const before = frames.length;
      camera = await startGstRtsp({ port });
      await waitFor(
        "PLAYING again",
        async () => (await pulls(server))[0]?.status === "PLAYING" || undefined,
        15_000,
      );
      await waitFor("frames after the restart", () => frames.length > before + 20 || undefined);

      const [record] = await streams(server);
      assert.equal(record.mediaSessionId, stream.mediaSessionId, "the same stream carries on");
      const prior = frames.slice(0, before).filter((f) => f.trackId === 0);
      const after = frames.slice(before).filter((f) => f.trackId === 0);
      assert.ok(after.length > 0, "video frames after the restart");
      assert.equal(after[0].keyframe, true, "the first frame after the drop is a keyframe");
      assert.ok(after[0].pts > prior.at(-1)!.pts, "the timeline moves forward");
      reader.close();
      await reading;
    }, rtspConfig("tcp"));
  } finally {
    await camera.stop();
  }
});

Deno.test("recording and a snapshot of an RTSP stream", async () => {
  const camera = await startGstRtsp();
  const config = rtspConfig("tcp");
  try {
    await withServer(async (server) => {
      assert.equal(
        (await call(server, "/rtsp/startup", { uri: camera.url, localStreamName: "rec" }))[0],
        200,
      );
      const id = streamObject(server, "rec").mediaSessionId;
      const snap = await server.post("/stream/snapshot", { streamName: "rec" });
      assert.equal(snap.status, 200);
      const png = Uint8Array.from(atob((await snap.json()).data), (c) => c.charCodeAt(0));
      assert.deepEqual(pngSize(png), { width: 640, height: 360 });

      const startedAt = performance.now();
      assert.equal((await call(server, "/recorder/startup", { mediaSessionId: id }))[0], 200);
      await new Promise((r) => setTimeout(r, 3000));
      assert.equal((await call(server, "/recorder/terminate", { mediaSessionId: id }))[0], 200);
      const recordedS = (performance.now() - startedAt) / 1000;
      const files = [...Deno.readDirSync(config.folders.records)].map((e) => e.name);
      assert.equal(files.length, 1, files.join());
      const info = await probe(`${config.folders.records}/${files[0]}`);
      // From the cached keyframe (at most one 1 s GOP before the startup) to the terminate.
      assert.ok(
        info.duration > 2.4 && info.duration < recordedS + 1.2,
        `duration ${info.duration} for ${recordedS.toFixed(2)} s of recording`,
      );
      const video = info.streams.find((s) => s.codec_type === "video")!;
      assert.deepEqual([video.codec_name, video.width, video.height], ["h264", 640, 360]);
      assert.ok(Number(video.nb_read_frames) >= 60, `frames ${video.nb_read_frames}`);
      assert.equal(info.streams.find((s) => s.codec_type === "audio")?.codec_name, "aac");
    }, config);
  } finally {
    await camera.stop();
  }
});
