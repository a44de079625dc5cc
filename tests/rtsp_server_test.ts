/**
 * The RTSP server read by third-party players: ffprobe, ffmpeg over TCP and UDP, and
 * GStreamer's rtspsrc, with a VOD (H.264 + AAC MP4) and an RTMP-published stream.
 * (VLC cannot take part: Debian builds it without live555, so it plays no rtsp:// at all.)
 */
import assert from "node:assert/strict";
import { publishRtmp, stopPublisher } from "./helpers/ffmpeg_rtmp.ts";
import { makeClip, waitFor } from "./helpers/media_fixtures.ts";
import { assertDecodesOverTcpAndUdp, decodeWithFfmpeg, probeRtsp } from "./helpers/rtsp_players.ts";
import { startTestServer, testConfig, type TestServer } from "./helpers/test_server.ts";

/** Seconds each player decodes. */
const decodeSeconds = 3;

/** Starts `file` of the media folder as the VOD stream `name`, asserting a 200. */
async function startVod(server: TestServer, file: string, name: string): Promise<void> {
  const res = await server.post("/vod/startup", {
    uri: `vod-live://${file}`,
    localStreamName: name,
  });
  assert.equal(res.status, 200);
}

Deno.test("RTSP server: a VOD (H.264 + AAC) read by ffprobe, ffmpeg over TCP and UDP, and GStreamer rtspsrc", async (t) => {
  const config = testConfig();
  await Deno.mkdir(config.folders.media, { recursive: true });
  await makeClip(`${config.folders.media}/clip.mp4`, { seconds: 60, audio: "aac" });
  const server = await startTestServer(config);
  try {
    await startVod(server, "clip.mp4", "vod");
    const url = `${server.rtspUrl}/vod`;

    await t.step("ffprobe: h264 320x240 and aac", async () => {
      const streams = await probeRtsp(url);
      assert.deepEqual(streams.map((s) => [s.codec_type, s.codec_name, s.width, s.height]), [
        ["video", "h264", 320, 240],
        ["audio", "aac", undefined, undefined],
      ]);
    });

    await t.step("ffmpeg over TCP and UDP decodes 3 s without errors", async () => {
      // 25 fps and 48 kHz AAC (46.9 frames/s) over 3 s.
      await assertDecodesOverTcpAndUdp("ffmpeg", url, decodeSeconds, {
        video: [70, 80],
        audio: [130, 150],
      });
    });

    await t.step("GStreamer rtspsrc over TCP and UDP decodes both tracks", async () => {
      await assertDecodesOverTcpAndUdp("gstreamer", url, decodeSeconds + 1, {
        video: [50, Infinity],
        audio: [90, Infinity],
      });
    });
  } finally {
    await server.stop();
  }
});

Deno.test("RTSP server: an RTMP-published stream is played by ffmpeg over RTSP", async () => {
  const server = await startTestServer();
  const publisher = publishRtmp(`rtmp://127.0.0.1:${server.rtmpPort}/live/cam`, 30);
  try {
    await waitFor("the RTMP stream", async () => {
      const res = await server.post("/stream/find", { name: "cam" });
      const found = res.status === 200 ? await res.json() as unknown[] : [];
      return found.length > 0 ? true : undefined;
    });
    const decoded = await decodeWithFfmpeg(`${server.rtspUrl}/cam`, "tcp", decodeSeconds);
    assert.equal(decoded.errors, "");
    assert.ok(decoded.video >= 70, `${decoded.video} pictures`);
    assert.ok(decoded.audio >= 130, `${decoded.audio} audio frames`);
    const streams = await probeRtsp(`${server.rtspUrl}/cam`);
    assert.deepEqual(streams.map((s) => [s.codec_name, s.width]), [["h264", 640], [
      "aac",
      undefined,
    ]]);
  } finally {
    await stopPublisher(publisher);
    await server.stop();
  }
});

/** Starts ffmpeg publishing testsrc2 640x360 + a tone as H.264 + AAC with `-f rtsp`. */
function publishRtsp(url: string, transport: "tcp" | "udp", seconds: number): Deno.ChildProcess {
  return new Deno.Command("ffmpeg", {
    args: [
      ...["-nostdin", "-v", "error", "-re", "-f", "lavfi", "-i", "testsrc2=size=640x360:rate=25"],
      ...["-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000", "-t", String(seconds)],
      ...["-c:v", "libx264", "-preset", "ultrafast", "-tune", "zerolatency", "-g", "25"],
      ...["-pix_fmt", "yuv420p", "-threads", "1", "-c:a", "aac", "-b:a", "64k"],
      ...["-f", "rtsp", "-rtsp_transport", transport, url],
    ],
    stdin: "null",
    stdout: "null",
    stderr: "piped",
  }).spawn();
}

Deno.test("RTSP server: ffmpeg publishing with -f rtsp (TCP and UDP) is a stream others play; a second publisher of the name gets 409", async () => {
  const server = await startTestServer();
  const publishers = [
    publishRtsp(`${server.rtspUrl}/pub-tcp`, "tcp", 30),
    publishRtsp(`${server.rtspUrl}/pub-udp`, "udp", 30),
  ];
  try {
    for (const name of ["pub-tcp", "pub-udp"]) {
      const record = await waitFor(`the stream ${name}`, async () => {
        const res = await server.post("/stream/find", { name });
        const found = res.status === 200
          ? await res.json() as { mediaProvider: string; width: number }[]
          : [];
        return found[0]?.width ? found[0] : undefined;
      });
      assert.equal(record.mediaProvider, "RTSP");
      assert.equal(record.width, 640);
    }
    const [tcp, udp] = await Promise.all([
      decodeWithFfmpeg(`${server.rtspUrl}/pub-tcp`, "tcp", decodeSeconds),
      decodeWithFfmpeg(`${server.rtspUrl}/pub-udp`, "udp", decodeSeconds),
    ]);
    for (const [name, d] of [["tcp", tcp], ["udp", udp]] as const) {
      assert.equal(d.errors, "", `${name}: ${d.errors}`);
      assert.ok(d.video >= 70, `${name}: ${d.video} pictures`);
      assert.ok(d.audio >= 130, `${name}: ${d.audio} audio frames`);
    }
    const second = await publishRtsp(`${server.rtspUrl}/pub-tcp`, "tcp", 5).output();
    assert.equal(second.success, false);
    assert.match(new TextDecoder().decode(second.stderr), /409 Conflict/);
    // The publisher gone, its stream ends.
    await stopPublisher(publishers.shift()!);
    await waitFor("the end of pub-tcp", async () => {
      const res = await server.post("/stream/find", { name: "pub-tcp" });
      return (await res.json() as unknown[]).length === 0 ? true : undefined;
    });
  } finally {
    for (const p of publishers) await stopPublisher(p);
    await server.stop();
  }
});

Deno.test("RTSP server with users: ffmpeg with the password in the URL decodes (Digest), a wrong password gets 401", async () => {
  const config = testConfig({ rtsp: { serverUsers: ["alice:s3cret"] } });
  await Deno.mkdir(config.folders.media, { recursive: true });
  await makeClip(`${config.folders.media}/clip.mp4`, { seconds: 20, audio: "aac" });
  const server = await startTestServer(config);
  try {
    await startVod(server, "clip.mp4", "vod");
    const url = (credentials: string) =>
      server.rtspUrl.replace("rtsp://", `rtsp://${credentials}@`) + "/vod";
    const decoded = await decodeWithFfmpeg(url("alice:s3cret"), "tcp", 2);
    assert.equal(decoded.errors, "");
    assert.ok(decoded.video >= 45, `${decoded.video} pictures`);
    const refused = await decodeWithFfmpeg(url("alice:wrong"), "tcp", 2);
    assert.match(refused.errors, /401 Unauthorized/);
    assert.equal(refused.video, 0);
  } finally {
    await server.stop();
  }
});

Deno.test("RTSP server: an H.265 + Opus VOD goes out as H.265 (RFC 7798) and Opus, decoded by ffmpeg over TCP", async () => {
  const config = testConfig();
  await Deno.mkdir(config.folders.media, { recursive: true });
  const path = `${config.folders.media}/hevc.mp4`;
  const made = await new Deno.Command("ffmpeg", {
    args: [
      ...["-v", "error", "-y", "-f", "lavfi", "-i", "testsrc2=size=320x240:rate=25"],
      ...["-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000", "-t", "20"],
      ...["-c:v", "libx265", "-preset", "ultrafast", "-x265-params", "log-level=error:keyint=25"],
      ...["-pix_fmt", "yuv420p", "-c:a", "libopus", "-b:a", "64k", path],
    ],
  }).output();
  assert.ok(made.success, new TextDecoder().decode(made.stderr));
  const server = await startTestServer(config);
  try {
    await startVod(server, "hevc.mp4", "hevc");
    const url = `${server.rtspUrl}/hevc`;
    const streams = await probeRtsp(url);
    assert.deepEqual(streams.map((s) => [s.codec_name, s.width]), [["hevc", 320], [
      "opus",
      undefined,
    ]]);
    const decoded = await decodeWithFfmpeg(url, "tcp", decodeSeconds);
    assert.equal(decoded.errors, "");
    assert.ok(decoded.video >= 70, `${decoded.video} pictures`);
    // 20 ms Opus packets over 3 s.
    assert.ok(decoded.audio >= 140, `${decoded.audio} audio frames`);
  } finally {
    await server.stop();
  }
});
