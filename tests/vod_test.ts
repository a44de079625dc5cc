/** VOD: files of the media folder published as live streams, through the REST API. */
import assert from "node:assert/strict";
import type { StreamRecord, VodRecord } from "../core/records.ts";
import { run } from "../media/formats/test_fixtures.ts";
import { makeClip, waitFor } from "./helpers/media_fixtures.ts";
import { testConfig, type TestServer, withServer } from "./helpers/test_server.ts";

async function json<T>(res: Response): Promise<T> {
  return await res.json() as T;
}

async function streams(server: TestServer): Promise<StreamRecord[]> {
  return json(await server.post("/stream/find_all"));
}

async function vods(server: TestServer): Promise<VodRecord[]> {
  return json(await server.post("/vod/find_all"));
}

Deno.test("an H.264 + AAC file plays as a live stream with real fields and ends with the file", async () => {
  const config = testConfig();
  await Deno.mkdir(config.folders.media, { recursive: true });
  await makeClip(`${config.folders.media}/clip.mp4`, { seconds: 3, audio: "aac" });
  await withServer(async (server) => {
    const before = Date.now();
    const res = await server.post("/vod/startup", {
      uri: "vod-live://clip.mp4",
      localStreamName: "live1",
    });
    assert.equal(res.status, 200, await res.text());
    const started = performance.now();
    // Rates are measured over a 1 s window of the paced stream.
    await new Promise((r) => setTimeout(r, 1300));
    const [stream] = await streams(server);
    assert.equal(stream.name, "live1");
    assert.equal(stream.status, "PUBLISHING");
    assert.equal(stream.published, true);
    assert.equal(stream.hasVideo, true);
    assert.equal(stream.hasAudio, true);
    assert.equal(stream.videoCodec, "H264");
    assert.equal(stream.audioCodec, "AAC");
    assert.equal(stream.width, 320);
    assert.equal(stream.height, 240);
    assert.equal(stream.fps, 25);
    assert.ok(stream.bitrate > 20, `bitrate ${stream.bitrate} kbps`);
    assert.ok(
      stream.audioBitrate > 20 && stream.audioBitrate < 120,
      `audio ${stream.audioBitrate}`,
    );
    assert.equal(stream.mediaProvider, "VOD");
    assert.ok(stream.createDate >= before && stream.createDate <= Date.now());
    assert.match(stream.mediaSessionId, /^[0-9a-f-]{36}$/);

    const [vod] = await vods(server);
    assert.deepEqual(vod, {
      localMediaSessionId: stream.mediaSessionId,
      localStreamName: "live1",
      uri: "vod-live://clip.mp4",
      status: "PROCESSED_LOCAL",
      hasAudio: true,
      hasVideo: true,
      record: false,
    });
    const found = await json<VodRecord[]>(
      await server.post("/vod/find", { localStreamName: "live1" }),
    );
    assert.equal(found.length, 1);
    const none = await json<VodRecord[]>(
      await server.post("/vod/find", { localStreamName: "other" }),
    );
    assert.deepEqual(none, []);

    await waitFor(
      "the stream to end",
      async () => (await streams(server)).length === 0 || undefined,
    );
    const playedMs = performance.now() - started;
    assert.ok(playedMs > 2500 && playedMs < 4500, `played for ${playedMs} ms, expected about 3 s`);
    assert.deepEqual(await vods(server), []);
  }, config);
});

Deno.test("an H.264 + Opus file plays; /vod/terminate and /stream/terminate end it", async () => {
  const config = testConfig();
  await Deno.mkdir(config.folders.media, { recursive: true });
  await makeClip(`${config.folders.media}/opus.mp4`, { seconds: 4, audio: "opus" });
  await withServer(async (server) => {
    assert.equal((await server.post("/vod/startup", { uri: "vod-live://opus.mp4" })).status, 200);
    const [stream] = await streams(server);
    assert.equal(stream.name, "opus.mp4", "the stream is named after the file by default");
    assert.equal(stream.audioCodec, "OPUS");
    assert.equal(stream.videoCodec, "H264");
    const wrongName = await server.post("/vod/terminate", {
      uri: "vod-live://opus.mp4",
      localStreamName: "nope",
    });
    assert.equal(wrongName.status, 404);
    await wrongName.body?.cancel();
    const end = await server.post("/vod/terminate", { uri: "vod-live://opus.mp4" });
    assert.equal(end.status, 200);
    assert.deepEqual(await streams(server), []);
    assert.deepEqual(await vods(server), []);

    assert.equal((await server.post("/vod/startup", { uri: "vod-live://opus.mp4" })).status, 200);
    const [again] = await streams(server);
    const res = await server.post("/stream/terminate", { mediaSessionId: again.mediaSessionId });
    assert.equal(res.status, 200);
    assert.deepEqual(await streams(server), []);
    assert.deepEqual(await vods(server), []);
  }, config);
});

Deno.test("vod/startup refuses bad names (400), missing files (404), unplayable files (400) and duplicates (409)", async () => {
  const config = testConfig();
  const media = config.folders.media;
  await Deno.mkdir(media, { recursive: true });
  await makeClip(`${media}/ok.mp4`, { seconds: 2 });
  const outside = `${media}/../outside.mp4`;
  await Deno.copyFile(`${media}/ok.mp4`, outside);
  await Deno.symlink(outside, `${media}/link.mp4`);
  await Deno.writeTextFile(`${media}/text.mp4`, "this is not a movie");
  await run("ffmpeg", [
    "-v",
    "error",
    "-f",
    "lavfi",
    "-i",
    "sine=duration=1",
    "-c:a",
    "libmp3lame",
    `${media}/mp3.mp4`,
  ]);
  await withServer(async (server) => {
    const cases: [string, number, RegExp][] = [
      ["vod-live://../outside.mp4", 400, /inside its folder/],
      ["vod-live:///etc/passwd", 400, /inside its folder/],
      ["vod-live://link.mp4", 400, /links outside/],
      ["vod-live://missing.mp4", 404, /not found/],
      ["vod-live://text.mp4", 400, /not a playable MP4/],
      ["vod-live://mp3.mp4", 400, /no playable track/],
      ["vod://ok.mp4", 400, /vod-live/],
    ];
    for (const [uri, status, message] of cases) {
      const res = await server.post("/vod/startup", { uri, localStreamName: "x" });
      const body = await res.json();
      assert.equal(res.status, status, `${uri}: ${JSON.stringify(body)}`);
      assert.match(body.message, message, uri);
      if (status === 400) assert.equal(body.field, "uri");
    }
    assert.deepEqual(await streams(server), []);
    const first = await server.post("/vod/startup", {
      uri: "vod-live://ok.mp4",
      localStreamName: "dup",
    });
    assert.equal(first.status, 200);
    const second = await server.post("/vod/startup", {
      uri: "vod-live://ok.mp4",
      localStreamName: "dup",
    });
    assert.equal(second.status, 409);
    await second.body?.cancel();
    assert.equal((await streams(server)).length, 1);
    const unknown = await server.post("/vod/terminate", { uri: "vod-live://none.mp4" });
    assert.equal(unknown.status, 404);
    await unknown.body?.cancel();
  }, config);
});

/** Per stream of a file: the packets' decode and presentation times, in decode order, in s. */
async function packetTimes(path: string): Promise<{ dts: number; pts: number }[][]> {
  const { out } = await run("ffprobe", [
    ...["-v", "error", "-show_entries", "packet=stream_index,dts_time,pts_time"],
    ...["-of", "json", path],
  ]);
  const byStream: { dts: number; pts: number }[][] = [[], []];
  for (const p of JSON.parse(out).packets) {
    byStream[p.stream_index].push({ dts: Number(p.dts_time), pts: Number(p.pts_time) });
  }
  return byStream;
}

Deno.test("a file starting before 0 (B-frames, AAC priming) plays over RTMP shifted, not clamped", async () => {
  const config = testConfig();
  await Deno.mkdir(config.folders.media, { recursive: true });
  // Its edit lists start video decoding 2 frames and the AAC priming 1024 samples before 0.
  await run("ffmpeg", [
    ...["-v", "error", "-f", "lavfi", "-i", "testsrc=size=320x240:rate=25"],
    ...["-f", "lavfi", "-i", "sine", "-c:v", "libx264", "-bf", "2", "-c:a", "aac", "-t", "3"],
    `${config.folders.media}/early.mp4`,
  ]);
  const flv = await Deno.makeTempFile({ suffix: ".flv" });
  try {
    await withServer(async (server) => {
      const res = await server.post("/vod/startup", {
        uri: "vod-live://early.mp4",
        localStreamName: "early",
      });
      assert.equal(res.status, 200, await res.text());
      // The whole file is one GOP: a player joining now gets it from its first frame.
      await run("ffmpeg", [
        ...["-v", "error", "-y", "-rw_timeout", "10000000"],
        ...["-i", `rtmp://127.0.0.1:${server.rtmpPort}/live/early`, "-c", "copy", flv],
      ]);
    }, config);
    const [video, audio] = await packetTimes(flv);
    assert.ok(Math.abs(video.length - 75) <= 1, `video frames: ${video.length}`);
    for (const [name, packets] of [["video", video], ["audio", audio]] as const) {
      for (let i = 1; i < packets.length; i++) {
        assert.ok(packets[i].dts > packets[i - 1].dts, `${name} dts repeats at packet ${i}`);
      }
    }
    const videoStart = Math.min(...video.map((p) => p.pts));
    const audioStart = audio[0].pts;
    assert.ok(
      Math.abs(videoStart - audioStart) < 0.05,
      `A/V start apart: video ${videoStart} s, audio ${audioStart} s`,
    );
    const { err } = await run("ffmpeg", ["-v", "error", "-i", flv, "-f", "null", "-"]);
    assert.equal(err.trim(), "");
  } finally {
    await Deno.remove(flv);
  }
});
