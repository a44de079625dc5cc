/**
 * RTMP against third-party peers on 127.0.0.1: ffmpeg publishing to and playing from our
 * server, pushes to and pulls from nginx-rtmp, checked the way a user would (ffprobe codecs
 * and frame counts, audio level, HTTP statuses).
 */
import { publishRtmp, stopPublisher } from "./helpers/ffmpeg_rtmp.ts";
import assert from "node:assert/strict";
import { RtmpConn } from "../media/protocols/rtmp/conn.ts";
import { openRtmpClient } from "../media/protocols/rtmp/client.ts";
import { parseRtmpUrl } from "../media/protocols/rtmp/url.ts";
import { run } from "../media/formats/test_fixtures.ts";
import { makeClip, probe, waitFor } from "./helpers/media_fixtures.ts";
import { startNginxRtmp } from "./helpers/nginx_rtmp.ts";
import { startTestServer, testConfig, type TestServer } from "./helpers/test_server.ts";

/** Copies `seconds` of an RTMP stream to an FLV file and probes it (decoded frame counts). */
async function copyStream(url: string, seconds: number) {
  const path = await Deno.makeTempFile({ suffix: ".flv" });
  try {
    await run("ffmpeg", [
      ...["-v", "error", "-y", "-rw_timeout", "10000000", "-i", url],
      ...["-t", String(seconds), "-c", "copy", path],
    ]);
    const probed = await probe(path);
    const video = probed.streams.find((s) => s.codec_type === "video");
    const audio = probed.streams.find((s) => s.codec_type === "audio");
    return {
      video: video && `${video.codec_name} ${video.width}x${video.height}`,
      audio: audio?.codec_name,
      videoFrames: Number(video?.nb_read_frames ?? 0),
      audioFrames: Number(audio?.nb_read_frames ?? 0),
    };
  } finally {
    await Deno.remove(path);
  }
}

/** Mean volume of `seconds` of the audio of an RTMP stream, in dB (volumedetect). */
async function meanVolumeDb(url: string, seconds: number): Promise<number> {
  const db = await measuredVolumeDb(url, seconds);
  assert.ok(db !== undefined, `no volume measured on ${url}`);
  return db;
}

/** Mean volume of `seconds` of the audio at `url`, undefined when no audio came in that time. */
async function measuredVolumeDb(url: string, seconds: number): Promise<number | undefined> {
  const out = await new Deno.Command("ffmpeg", {
    args: [
      ...["-hide_banner", "-nostdin", "-rw_timeout", "10000000", "-i", url, "-t", String(seconds)],
      ...["-vn", "-af", "volumedetect", "-f", "null", "-"],
    ],
    stdout: "null",
    stderr: "piped",
  }).output();
  const text = new TextDecoder().decode(out.stderr);
  const match = text.match(/mean_volume: (-?[\d.]+|-inf) dB/);
  if (!match) return undefined;
  return match[1] === "-inf" ? -Infinity : Number(match[1]);
}

async function json(res: Response): Promise<unknown> {
  return await res.json();
}

async function waitForStream(server: TestServer, name: string) {
  return await waitFor(`stream ${name}`, async () => {
    const list = await json(await server.post("/stream/find", { name })) as {
      name: string;
      mediaProvider: string;
      videoCodec: string;
      audioCodec: string;
      width: number;
      height: number;
      status: string;
    }[];
    return list[0];
  });
}

Deno.test("ffmpeg publishes H.264+AAC to us and plays it back; a second publisher of the name is refused", async () => {
  const server = await startTestServer(testConfig());
  const base = `rtmp://127.0.0.1:${server.rtmpPort}/live`;
  const publisher = publishRtmp(`${base}/cam`, 20);
  let stalled: Awaited<ReturnType<typeof openRtmpClient>> | undefined;
  try {
    const record = await waitForStream(server, "cam");
    assert.deepEqual(
      [
        record.mediaProvider,
        record.videoCodec,
        record.audioCodec,
        record.width,
        record.height,
        record.status,
      ],
      ["RTMP", "H264", "AAC", 640, 360, "PUBLISHING"],
    );

    const second = await new Deno.Command("ffmpeg", {
      args: [
        ...["-v", "error", "-f", "lavfi", "-i", "testsrc2=size=320x240:rate=25", "-t", "2"],
        ...["-c:v", "libx264", "-preset", "ultrafast", "-f", "flv", `${base}/cam`],
      ],
      stdout: "null",
      stderr: "piped",
    }).output();
    assert.equal(second.success, false);
    assert.match(new TextDecoder().decode(second.stderr), /already published/);
    assert.equal(
      (await json(await server.post("/stream/find", { name: "cam" })) as unknown[]).length,
      1,
    );

    // A player that never reads must not hold back the others.
    stalled = await openRtmpClient(parseRtmpUrl(`${base}/cam`, "uri"), "play");
    const played = await copyStream(`${base}/cam`, 3);
    assert.equal(played.video, "h264 640x360");
    assert.equal(played.audio, "aac");
    assert.ok(
      played.videoFrames >= 70 && played.videoFrames <= 80,
      `video frames ${played.videoFrames}`,
    );
    assert.ok(
      played.audioFrames >= 130 && played.audioFrames <= 150,
      `audio frames ${played.audioFrames}`,
    );

    const missing = await new Deno.Command("ffprobe", {
      args: ["-v", "error", "-rw_timeout", "5000000", `${base}/nothing`],
      stdout: "null",
      stderr: "null",
    }).output();
    assert.equal(missing.success, false);

    // Garbage after a good handshake costs only that connection.
    const raw = new RtmpConn(await Deno.connect({ hostname: "127.0.0.1", port: server.rtmpPort }));
    await raw.connectHandshake();
    await raw.writeRaw(Uint8Array.from({ length: 4096 }, (_, i) => (i * 7919) & 0xff));
    for await (const _ of raw.messages()) { /* until the server hangs up */ }
    assert.ok(raw.closed);
    assert.equal((await copyStream(`${base}/cam`, 1)).video, "h264 640x360");
  } finally {
    stalled?.conn.close();
    await stopPublisher(publisher);
    await server.stop();
  }
});

Deno.test("push to nginx-rtmp: nginx serves H.264+AAC; mute gives silence; a restarted nginx gets the push again", async () => {
  const nginx = await startNginxRtmp();
  const server = await startTestServer(testConfig());
  const publisher = publishRtmp(`rtmp://127.0.0.1:${server.rtmpPort}/live/src`, 40, {
    channels: 2,
  });
  try {
    await waitForStream(server, "src");
    const started = await server.post("/push/startup", {
      streamName: "src",
      rtmpUrl: nginx.liveUrl,
      rtmpTransponderFullUrl: false,
    });
    assert.equal(started.status, 200);
    const push = await json(started) as {
      mediaSessionId: string;
      streamName: string;
      rtmpUrl: string;
    };
    assert.deepEqual(push, { ...push, streamName: "src", rtmpUrl: `${nginx.liveUrl}/src` });
    assert.deepEqual(
      await json(await server.post("/push/find", { rtmpUrl: `${nginx.liveUrl}/src` })),
      [push],
    );

    const remote = `${nginx.liveUrl}/src`;
    const seen = await copyStream(remote, 2);
    assert.equal(seen.video, "h264 640x360");
    assert.equal(seen.audio, "aac");
    // nginx starts a new player at a keyframe (GOP 1 s): between one and two seconds of pictures.
    assert.ok(seen.videoFrames >= 25 && seen.videoFrames <= 55, `video frames ${seen.videoFrames}`);
    assert.ok(await meanVolumeDb(remote, 1) > -40);

    assert.equal(
      (await server.post("/push/mute", { mediaSessionId: push.mediaSessionId })).status,
      200,
    );
    assert.ok(await meanVolumeDb(remote, 1) < -80, "muted push is not silent");
    assert.equal(
      (await server.post("/push/unmute", { mediaSessionId: push.mediaSessionId })).status,
      200,
    );
    assert.ok(await meanVolumeDb(remote, 1) > -40, "unmuted push is silent");

    await nginx.restart();
    const resumed = await waitFor("the push to resume", async () => {
      const again = await copyStream(remote, 1).catch(() => undefined);
      return again?.video ? again : undefined;
    }, 15_000);
    assert.equal(resumed.audio, "aac");
    assert.ok(server.services.pushes.get(push.mediaSessionId).reconnects >= 1);
    assert.equal((await json(await server.post("/push/find_all")) as unknown[]).length, 1);

    assert.equal(
      (await server.post("/push/terminate", { mediaSessionId: push.mediaSessionId })).status,
      200,
    );
    assert.deepEqual(await json(await server.post("/push/find_all")), []);
    assert.equal(
      (await server.post("/push/terminate", { mediaSessionId: push.mediaSessionId })).status,
      404,
    );
    assert.equal(
      (await server.post("/push/mute", { mediaSessionId: push.mediaSessionId })).status,
      404,
    );
    const unknown = await server.post("/push/startup", {
      streamName: "none",
      rtmpUrl: nginx.liveUrl,
    });
    assert.equal(unknown.status, 404);
    await unknown.body?.cancel();
    const bad = await server.post("/push/startup", {
      streamName: "src",
      rtmpUrl: `rtmp://127.0.0.1:${nginx.port}`,
      rtmpTransponderFullUrl: true,
    });
    assert.equal(bad.status, 400);
    assert.equal((await json(bad) as { field: string }).field, "rtmpUrl");
    const refused = await server.post("/push/startup", {
      streamName: "src",
      rtmpUrl: "rtmp://127.0.0.1:1/live",
    });
    assert.equal(refused.status, 502);
    assert.match((await json(refused) as { message: string }).message, /refused/i);
    assert.deepEqual(await json(await server.post("/push/find_all")), []);
  } finally {
    await stopPublisher(publisher);
    await server.stop();
    await nginx.stop();
  }
});

Deno.test("push of a VOD stream to nginx-rtmp", async () => {
  const nginx = await startNginxRtmp();
  const config = testConfig();
  await Deno.mkdir(config.folders.media, { recursive: true });
  await makeClip(`${config.folders.media}/clip.mp4`, { seconds: 8, audio: "aac" });
  const server = await startTestServer(config);
  try {
    const vod = await server.post("/vod/startup", {
      uri: "vod-live://clip.mp4",
      localStreamName: "clip",
    });
    assert.equal(vod.status, 200, await vod.text());
    const started = await server.post("/push/startup", {
      streamName: "clip",
      rtmpUrl: nginx.liveUrl,
    });
    assert.equal(started.status, 200);
    await started.body?.cancel();
    const seen = await copyStream(`${nginx.liveUrl}/clip`, 2);
    assert.equal(seen.video, "h264 320x240");
    assert.equal(seen.audio, "aac");
    // nginx starts a new player at a keyframe (GOP 1 s): between one and two seconds of pictures.
    assert.ok(seen.videoFrames >= 25 && seen.videoFrames <= 55, `video frames ${seen.videoFrames}`);
  } finally {
    await server.stop();
    await nginx.stop();
  }
});

Deno.test("pull from nginx-rtmp into a local stream that plays; duplicates 409, unknown 404, unreachable 502", async () => {
  const nginx = await startNginxRtmp();
  const server = await startTestServer(testConfig());
  const publisher = publishRtmp(`${nginx.liveUrl}/cam`, 20);
  const uri = `${nginx.liveUrl}/cam`;
  try {
    await waitFor("nginx to carry the stream", async () => {
      const out = await new Deno.Command("ffprobe", {
        args: ["-v", "error", "-rw_timeout", "3000000", uri],
        stdout: "null",
        stderr: "null",
      }).output();
      return out.success ? true : undefined;
    });
    const pulled = await server.post("/pull/rtmp/pull", { uri, localStreamName: "pulled" });
    assert.equal(pulled.status, 200, await pulled.text());
    const [entry] = await json(await server.post("/pull/rtmp/find_all")) as Record<
      string,
      unknown
    >[];
    const stream = await waitForStream(server, "pulled");
    assert.deepEqual(entry, {
      localMediaSessionId: entry.localMediaSessionId,
      localStreamName: "pulled",
      uri,
      status: "PROCESSED_REMOTE",
      hasAudio: true,
      hasVideo: true,
      record: false,
    });
    assert.deepEqual(
      [stream.videoCodec, stream.audioCodec, stream.width, stream.height],
      ["H264", "AAC", 640, 360],
    );
    const played = await copyStream(`rtmp://127.0.0.1:${server.rtmpPort}/live/pulled`, 2);
    assert.equal(played.video, "h264 640x360");
    assert.equal(played.audio, "aac");
    assert.ok(played.videoFrames >= 45, `video frames ${played.videoFrames}`);

    const duplicate = await server.post("/pull/rtmp/pull", { uri, localStreamName: "other" });
    assert.equal(duplicate.status, 409);
    await duplicate.body?.cancel();
    assert.equal((await server.post("/pull/rtmp/terminate", { uri })).status, 200);
    assert.deepEqual(await json(await server.post("/pull/rtmp/find_all")), []);
    assert.deepEqual(await json(await server.post("/stream/find", { name: "pulled" })), []);
    const again = await server.post("/pull/rtmp/terminate", { uri });
    assert.equal(again.status, 404);
    await again.body?.cancel();

    const unreachable = await server.post("/pull/rtmp/pull", { uri: "rtmp://127.0.0.1:1/live/x" });
    assert.equal(unreachable.status, 502);
    assert.match((await json(unreachable) as { message: string }).message, /refused/i);
    assert.deepEqual(await json(await server.post("/pull/rtmp/find_all")), []);
    for (const bad of ["rtmp://127.0.0.1/live", "http://127.0.0.1/live/x"]) {
      const res = await server.post("/pull/rtmp/pull", { uri: bad });
      assert.equal(res.status, 400, bad);
      assert.equal((await json(res) as { field: string }).field, "uri");
    }
  } finally {
    await stopPublisher(publisher);
    await server.stop();
    await nginx.stop();
  }
});

Deno.test("a VOD stream of H.264+Opus plays over RTMP and is pushed to nginx-rtmp as H.264+AAC", async () => {
  const nginx = await startNginxRtmp();
  const config = testConfig();
  await Deno.mkdir(config.folders.media, { recursive: true });
  await makeClip(`${config.folders.media}/opus.mp4`, { seconds: 10, audio: "opus" });
  const server = await startTestServer(config);
  try {
    const vod = await server.post("/vod/startup", {
      uri: "vod-live://opus.mp4",
      localStreamName: "opus",
    });
    assert.equal(vod.status, 200, await vod.text());
    const started = await server.post("/push/startup", {
      streamName: "opus",
      rtmpUrl: nginx.liveUrl,
    });
    assert.equal(started.status, 200);
    await started.body?.cancel();

    const played = await copyStream(`rtmp://127.0.0.1:${server.rtmpPort}/live/opus`, 3);
    assert.equal(played.video, "h264 320x240");
    assert.equal(played.audio, "aac");
    // 3 s of 48 kHz AAC is 140 frames of 1024 samples.
    assert.ok(
      played.audioFrames >= 130 && played.audioFrames <= 150,
      `audio frames ${played.audioFrames}`,
    );
    const pushed = await copyStream(`${nginx.liveUrl}/opus`, 2);
    assert.equal(pushed.video, "h264 320x240");
    assert.equal(pushed.audio, "aac");
    assert.ok(
      await meanVolumeDb(`${nginx.liveUrl}/opus`, 1) > -40,
      "the converted audio is silent",
    );
  } finally {
    await server.stop();
    await nginx.stop();
  }
});

Deno.test("sound_on mixes a sound file into a push; sound_off takes it out", async () => {
  const nginx = await startNginxRtmp();
  const config = testConfig();
  await Deno.mkdir(config.folders.media, { recursive: true });
  await run("ffmpeg", [
    ...["-v", "error", "-f", "lavfi", "-i", "sine=frequency=1000:sample_rate=48000", "-t", "1"],
    `${config.folders.media}/beep.wav`,
  ]);
  const server = await startTestServer(config);
  const publisher = publishRtmp(`rtmp://127.0.0.1:${server.rtmpPort}/live/quiet`, 40, {
    channels: 2,
    silent: true,
  });
  const remote = `${nginx.liveUrl}/quiet`;
  try {
    await waitForStream(server, "quiet");
    const started = await server.post("/push/startup", {
      streamName: "quiet",
      rtmpUrl: nginx.liveUrl,
    });
    const { mediaSessionId } = await json(started) as { mediaSessionId: string };
    assert.ok(await meanVolumeDb(remote, 1) < -80, "the source is not silent");

    const missing = await server.post("/push/sound_on", { mediaSessionId, soundFile: "none.wav" });
    assert.equal(missing.status, 404);
    await missing.body?.cancel();
    const on = await server.post("/push/sound_on", {
      mediaSessionId,
      soundFile: "beep.wav",
      loop: true,
    });
    assert.equal(on.status, 200, await on.text());
    // The push may republish while the sound joins: a moment without audio is retried.
    const loud = await waitFor("the sound in the push", async () => {
      const db = await measuredVolumeDb(remote, 1);
      return db !== undefined && db > -40 ? db : undefined;
    }, 15_000);
    assert.ok(loud > -40);

    assert.equal((await server.post("/push/sound_off", { mediaSessionId })).status, 200);
    await waitFor(
      "the sound to stop",
      async () => ((await measuredVolumeDb(remote, 1) ?? 0) < -80 ? true : undefined),
      15_000,
    );
    const unknown = await server.post("/push/sound_on", {
      mediaSessionId: "none",
      soundFile: "beep.wav",
    });
    assert.equal(unknown.status, 404);
    await unknown.body?.cancel();
  } finally {
    await stopPublisher(publisher);
    await server.stop();
    await nginx.stop();
  }
});
