/**
 * Recording through the REST API, checked with ffprobe: codecs, durations, frame counts,
 * rotation, the multi-recorder's tracks, a kill -9 mid-recording, and the refusals.
 */
import assert from "node:assert/strict";
import type { MultiRecorderRecord, RecorderRecord, StreamRecord } from "../core/records.ts";
import { decode } from "../media/formats/test_fixtures.ts";
import { makeClip, probe, waitFor } from "./helpers/media_fixtures.ts";
import { spawnDeno, waitForHttp } from "./helpers/process.ts";
import { freePortsEnv } from "./helpers/server_process.ts";
import { testConfig, type TestServer, withServer } from "./helpers/test_server.ts";

async function streamNamed(server: TestServer, name: string): Promise<StreamRecord> {
  const found = await (await server.post("/stream/find", { name })).json() as StreamRecord[];
  assert.equal(found.length, 1, `stream ${name}`);
  return found[0];
}

async function startVod(server: TestServer, file: string, name: string): Promise<string> {
  const res = await server.post("/vod/startup", {
    uri: `vod-live://${file}`,
    localStreamName: name,
  });
  assert.equal(res.status, 200, await res.text());
  return (await streamNamed(server, name)).mediaSessionId;
}

async function post(server: TestServer, path: string, body: unknown, status = 200): Promise<void> {
  const res = await server.post(path, body);
  const text = await res.text();
  assert.equal(res.status, status, `${path} ${JSON.stringify(body)}: ${text}`);
}

async function recordings(dir: string): Promise<string[]> {
  const names: string[] = [];
  for await (const entry of Deno.readDir(dir)) if (entry.isFile) names.push(entry.name);
  return names.sort();
}

async function mediaFolderWith(
  config: ReturnType<typeof testConfig>,
  clips: Record<string, Parameters<typeof makeClip>[1]>,
): Promise<void> {
  await Deno.mkdir(config.folders.media, { recursive: true });
  await Promise.all(
    Object.entries(clips).map(([name, options]) =>
      makeClip(`${config.folders.media}/${name}`, options)
    ),
  );
}

Deno.test("a recorder of a VOD stream holds every frame and closes cleanly when the stream ends", async () => {
  const config = testConfig();
  await mediaFolderWith(config, { "clip.mp4": { seconds: 3, audio: "aac" } });
  await withServer(async (server) => {
    const id = await startVod(server, "clip.mp4", "cam");
    await post(server, "/recorder/startup", { mediaSessionId: id });
    const [record] = await (await server.post("/recorder/find_all")).json() as RecorderRecord[];
    assert.equal(record.mediaSessionId, id);
    assert.match(record.fileName, /^cam-\d{13}-\{endTime\}\.mp4$/);
    const stream = await streamNamed(server, "cam");
    assert.equal(stream.record, true);
    assert.equal(stream.recordName, record.fileName);
    await waitFor("the recorder to close with its stream", async () => {
      const list = await (await server.post("/recorder/find_all")).json() as RecorderRecord[];
      return list.length === 0 || undefined;
    });
    const [file] = await recordings(config.folders.records);
    assert.equal(file, record.fileName.replace("{endTime}", file.match(/-(\d{13})\.mp4$/)![1]));
    const path = `${config.folders.records}/${file}`;
    const info = await probe(path);
    assert.deepEqual(info.streams.map((s) => s.codec_name), ["h264", "aac"]);
    assert.ok(Math.abs(info.duration - 3) < 0.3, `duration ${info.duration} s`);
    assert.equal(Number(info.streams[0].nb_read_frames), 75, "every video frame");
    assert.equal((await decode(path)).errors, "");
  }, config);
});

Deno.test("startRecording/stopRecording: the file lasts the recorded time", async () => {
  const config = testConfig();
  await mediaFolderWith(config, { "clip.mp4": { seconds: 4, audio: "opus", gop: 2 } });
  await withServer(async (server) => {
    const id = await startVod(server, "clip.mp4", "talk");
    await new Promise((r) => setTimeout(r, 500));
    const started = performance.now();
    await post(server, "/stream/startRecording", {
      mediaSessionId: id,
      config: { fileTemplate: "{streamName}-{mediaSessionId}-{startTime}-{endTime}" },
    });
    await new Promise((r) => setTimeout(r, 2000));
    await post(server, "/stream/stopRecording", { mediaSessionId: id });
    const recordedSec = (performance.now() - started) / 1000;
    const [file] = await recordings(config.folders.records);
    assert.match(file, new RegExp(`^talk-${id}-\\d{13}-\\d{13}\\.mp4$`));
    const info = await probe(`${config.folders.records}/${file}`);
    assert.deepEqual(info.streams.map((s) => s.codec_name), ["h264", "opus"]);
    assert.ok(
      Math.abs(info.duration - recordedSec) <= recordedSec * 0.1,
      `duration ${info.duration} s for ${recordedSec} s recorded`,
    );
    const frames = Number(info.streams[0].nb_read_frames);
    assert.ok(Math.abs(frames - recordedSec * 25) <= recordedSec * 2.5, `${frames} frames`);
    assert.equal((await streamNamed(server, "talk")).record, false);
  }, config);
});

Deno.test("rotation starts new files at the given size, each playable on its own", async () => {
  const config = testConfig();
  await mediaFolderWith(config, { "clip.mp4": { seconds: 3, audio: "aac", gop: 10 } });
  await withServer(async (server) => {
    const id = await startVod(server, "clip.mp4", "rot");
    await post(server, "/recorder/startup", { mediaSessionId: id, config: { rotation: "80K" } });
    await waitFor("the recorder to end", async () => {
      const list = await (await server.post("/recorder/find_all")).json() as RecorderRecord[];
      return list.length === 0 || undefined;
    });
    const files = await recordings(config.folders.records);
    assert.ok(files.length >= 2, `only ${files.length} file(s)`);
    let frames = 0;
    for (const [i, file] of files.entries()) {
      const path = `${config.folders.records}/${file}`;
      const { size } = await Deno.stat(path);
      // Cut at the first keyframe past 80 KiB: over the size by less than a GOP (10 frames).
      if (i < files.length - 1) {
        assert.ok(size >= 80 * 1024 && size < 140 * 1024, `${file}: ${size}`);
      }
      const info = await probe(path);
      assert.deepEqual(info.streams.map((s) => s.codec_name), ["h264", "aac"], file);
      assert.equal((await decode(path)).errors, "", file);
      frames += Number(info.streams[0].nb_read_frames);
    }
    assert.equal(frames, 75, "the files hold every frame between them");
  }, config);
});

Deno.test("a multi-recorder file holds the tracks of every added stream", async () => {
  const config = testConfig();
  await mediaFolderWith(config, {
    "a.mp4": { seconds: 4, audio: "aac" },
    "b.mp4": { seconds: 4, audio: "opus", width: 160, height: 120 },
  });
  await withServer(async (server) => {
    const a = await startVod(server, "a.mp4", "a");
    const b = await startVod(server, "b.mp4", "b");
    const uri = "multi-recorder://room";
    await post(server, "/multipleRecorder/startup", { uri });
    const addedAt = performance.now();
    await post(server, "/multipleRecorder/add", { uri, mediaSessionId: a });
    await post(server, "/multipleRecorder/add", { uri, mediaSessionId: b });
    const [record] = await (await server.post("/multipleRecorder/find_all"))
      .json() as MultiRecorderRecord[];
    assert.deepEqual(record.mediaSessionsId, [a, b]);
    assert.equal(record.uri, uri);
    assert.match(record.fileName, /^room-\d{13}-\{endTime\}\.mp4$/);
    await new Promise((r) => setTimeout(r, 2000));
    await post(server, "/multipleRecorder/remove", { uri, mediaSessionId: a });
    await post(server, "/multipleRecorder/terminate", { uri });
    const recordedS = (performance.now() - addedAt) / 1000;
    assert.deepEqual(await (await server.post("/multipleRecorder/find_all")).json(), []);
    const files = await recordings(config.folders.records);
    // Adding b closes a file a already started (an MP4 declares its tracks up front), which a
    // slow machine fills before the second add: the file holding both is the one ended last.
    const prefix = record.fileName.slice(0, -"{endTime}.mp4".length);
    const last = files.filter((f) => f.startsWith(prefix)).sort().at(-1);
    assert.ok(last, `${record.fileName} not among ${files}`);
    const info = await probe(`${config.folders.records}/${last}`);
    assert.deepEqual(
      info.streams.map((s) => `${s.codec_name}${s.width ? `@${s.width}x${s.height}` : ""}`),
      ["h264@320x240", "aac", "h264@160x120", "opus"],
    );
    // From the cached keyframe (at most one 1 s GOP before the add) to the terminate.
    assert.ok(
      info.duration > 1.6 && info.duration < recordedS + 1.2,
      `duration ${info.duration} for ${recordedS.toFixed(2)} s of recording`,
    );
    for (const s of info.streams) assert.ok(Number(s.nb_read_frames) > 0, s.codec_name);
  }, config);
});

Deno.test("recording refuses unknown streams (404), second recorders (409) and escaping templates (400)", async () => {
  const config = testConfig();
  await mediaFolderWith(config, { "clip.mp4": { seconds: 3 } });
  await withServer(async (server) => {
    const id = await startVod(server, "clip.mp4", "cam");
    for (const fileTemplate of ["../{streamName}", "/tmp/{streamName}", "a/../../b"]) {
      const res = await server.post("/recorder/startup", {
        mediaSessionId: id,
        config: { fileTemplate },
      });
      const body = await res.json();
      assert.equal(res.status, 400, fileTemplate);
      assert.equal(body.field, "config.fileTemplate");
    }
    await post(server, "/recorder/startup", { mediaSessionId: "nope" }, 404);
    await post(server, "/stream/startRecording", { mediaSessionId: "nope" }, 404);
    await post(server, "/recorder/terminate", { mediaSessionId: id }, 404);
    await post(server, "/stream/stopRecording", { mediaSessionId: id }, 404);
    await post(server, "/recorder/startup", {
      mediaSessionId: id,
      config: { fileTemplate: "sub/{streamName}-{startTime}" },
    });
    await post(server, "/stream/startRecording", { mediaSessionId: id }, 409);
    await post(server, "/recorder/startup", { mediaSessionId: id }, 409);
    await post(
      server,
      "/recorder/startup",
      { mediaSessionId: id, config: { rotation: "20X" } },
      400,
    );

    const uri = "multi-recorder://m";
    await post(server, "/multipleRecorder/add", { uri, mediaSessionId: id }, 404);
    await post(server, "/multipleRecorder/terminate", { uri }, 404);
    await post(server, "/multipleRecorder/startup", { uri });
    await post(server, "/multipleRecorder/startup", { uri }, 409);
    await post(server, "/multipleRecorder/add", { uri, mediaSessionId: "nope" }, 404);
    await post(server, "/multipleRecorder/remove", { uri, mediaSessionId: id }, 404);
    await post(server, "/multipleRecorder/add", { uri, mediaSessionId: id });
    await post(server, "/multipleRecorder/add", { uri, mediaSessionId: id }, 409);
    await post(server, "/recorder/terminate", { mediaSessionId: id });
    const files = await recordings(`${config.folders.records}/sub`);
    assert.equal(files.length, 1, "the template's sub-folder holds the file");
    assert.match(files[0], /^cam-\d{13}\.mp4$/);
  }, config);
});

Deno.test("kill -9 of the server mid-recording leaves a playable file with all but the last second", async () => {
  const config = testConfig();
  await mediaFolderWith(config, { "clip.mp4": { seconds: 4, audio: "aac" } });
  const { ports, env } = freePortsEnv();
  const base = `http://127.0.0.1:${ports.rest}/rest-api`;
  const server = spawnDeno(["run", "-A", "main.ts"], {
    ...env,
    MEDIASERVER_FOLDERS_MEDIA: config.folders.media,
    MEDIASERVER_FOLDERS_RECORDS: config.folders.records,
    MEDIASERVER_FOLDERS_LOGS: config.folders.logs,
    MEDIASERVER_LOG_LEVEL: "error",
  }, "null");
  try {
    const call = (path: string, body: unknown) =>
      fetch(base + path, {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify(body),
      });
    await waitForHttp(`http://127.0.0.1:${ports.rest}/health`, 30_000);
    assert.equal(
      (await call("/vod/startup", { uri: "vod-live://clip.mp4", localStreamName: "k" })).status,
      200,
    );
    const [stream] = await (await call("/stream/find", { name: "k" })).json() as StreamRecord[];
    const started = performance.now();
    const rec = await call("/recorder/startup", { mediaSessionId: stream.mediaSessionId });
    assert.equal(rec.status, 200);
    await rec.body?.cancel();
    await new Promise((r) => setTimeout(r, 2500));
    server.kill("SIGKILL");
    const recordedSec = (performance.now() - started) / 1000;
    await server.status;
    const [file] = await recordings(config.folders.records);
    assert.match(file, /\{endTime\}\.mp4$/, "the file was never closed");
    const info = await probe(`${config.folders.records}/${file}`);
    assert.deepEqual(info.streams.map((s) => s.codec_name), ["h264", "aac"]);
    assert.ok(
      info.duration >= recordedSec - 1.2 && info.duration <= recordedSec + 0.2,
      `${info.duration} s kept of ${recordedSec} s recorded`,
    );
    assert.ok(Number(info.streams[0].nb_read_frames) >= (recordedSec - 1.2) * 25);
  } finally {
    try {
      server.kill("SIGKILL");
    } catch {
      // Already gone.
    }
    await server.status;
  }
});

Deno.test("/client/records serves recordings read-only, with ranges, and nothing outside the folder", async () => {
  const config = testConfig();
  const records = config.folders.records;
  await Deno.mkdir(records, { recursive: true });
  await makeClip(`${records}/rec-1-2.mp4`, { seconds: 1 });
  const file = await Deno.readFile(`${records}/rec-1-2.mp4`);
  const secret = `${records}/../secret.txt`;
  await Deno.writeTextFile(secret, "secret");
  await Deno.symlink(secret, `${records}/link.mp4`);
  await Deno.mkdir(`${records}/sub`);
  await withServer(async (server) => {
    const get = (path: string, headers?: HeadersInit) =>
      fetch(`${server.restUrl}/client/records/${path}`, { headers });

    const whole = await get("rec-1-2.mp4");
    assert.equal(whole.status, 200);
    assert.equal(whole.headers.get("Content-Type"), "video/mp4");
    assert.equal(whole.headers.get("Accept-Ranges"), "bytes");
    assert.equal(whole.headers.get("Content-Length"), String(file.length));
    assert.deepEqual(new Uint8Array(await whole.arrayBuffer()), file);

    const part = await get("rec-1-2.mp4", { Range: "bytes=100-199" });
    assert.equal(part.status, 206);
    assert.equal(part.headers.get("Content-Range"), `bytes 100-199/${file.length}`);
    assert.deepEqual(new Uint8Array(await part.arrayBuffer()), file.subarray(100, 200));
    const open = await get("rec-1-2.mp4", { Range: "bytes=100-" });
    assert.deepEqual(new Uint8Array(await open.arrayBuffer()), file.subarray(100));
    const tail = await get("rec-1-2.mp4", { Range: "bytes=-10" });
    assert.deepEqual(new Uint8Array(await tail.arrayBuffer()), file.subarray(file.length - 10));
    const beyond = await get("rec-1-2.mp4", { Range: `bytes=${file.length}-` });
    await beyond.body?.cancel();
    assert.equal(beyond.status, 416);
    assert.equal(beyond.headers.get("Content-Range"), `bytes */${file.length}`);
    const head = await fetch(`${server.restUrl}/client/records/rec-1-2.mp4`, { method: "HEAD" });
    assert.equal(head.status, 200);
    assert.equal(head.headers.get("Content-Length"), String(file.length));
    assert.equal(await head.text(), "");
    // A client that reads part of a body and goes away leaves no file open behind.
    const cut = await get("rec-1-2.mp4");
    await cut.body?.cancel();

    for (
      const [path, status] of [
        ["nobody.mp4", 404],
        ["..%2Fsecret.txt", 400],
        // The URL parser resolves a `..` segment before routing: /client/ is no route.
        ["%2E%2E", 404],
        ["sub%2F..%2F..%2Fsecret.txt", 400],
        ["a%5Cb.mp4", 400],
        ["rec%00.mp4", 400],
        ["%E0%A4%A", 400],
        ["link.mp4", 400],
        ["sub", 400],
      ] as const
    ) {
      const res = await get(path);
      const body = await res.text();
      assert.equal(res.status, status, `${path}: ${body}`);
      assert.doesNotMatch(body, /secret\b|mediaserver-test/, `${path} leaks nothing: ${body}`);
    }
    const put = await fetch(`${server.restUrl}/client/records/rec-1-2.mp4`, {
      method: "PUT",
      body: "x",
    });
    await put.body?.cancel();
    assert.equal(put.status, 404);
    assert.deepEqual(await Deno.readFile(`${records}/rec-1-2.mp4`), file);
  }, config);
});

Deno.test("/client/records is behind REST auth when it is on", async () => {
  const token = "records-token-0123456789";
  const config = testConfig({ rest: { authTokens: [token] } });
  await Deno.mkdir(config.folders.records, { recursive: true });
  await Deno.writeFile(`${config.folders.records}/rec.mp4`, new Uint8Array([1, 2, 3]));
  await withServer(async (server) => {
    const url = `${server.restUrl}/client/records/rec.mp4`;
    const refused = await fetch(url);
    await refused.body?.cancel();
    assert.equal(refused.status, 401);
    const allowed = await fetch(url, { headers: { Authorization: `Bearer ${token}` } });
    assert.equal(allowed.status, 200);
    assert.deepEqual(new Uint8Array(await allowed.arrayBuffer()), new Uint8Array([1, 2, 3]));
  }, config);
});
