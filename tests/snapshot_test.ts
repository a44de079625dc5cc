/** /stream/snapshot: a PNG of the current picture, with the native and the wasm engine. */
import assert from "node:assert/strict";
import { Buffer } from "node:buffer";
import type { StreamRecord } from "../core/records.ts";
import { NativeEngine } from "../media/engine/native.ts";
import { takeSnapshot } from "../media/publishers/snapshot.ts";
import { Stream } from "../media/stream.ts";
import { makeClip, pngSize } from "./helpers/media_fixtures.ts";
import { testConfig, withServer } from "./helpers/test_server.ts";

for (const engine of ["native", "wasm"] as const) {
  Deno.test(`snapshot with the ${engine} engine is a PNG of the stream's size`, async () => {
    const config = testConfig({ media: { engine } });
    await Deno.mkdir(config.folders.media, { recursive: true });
    await makeClip(`${config.folders.media}/clip.mp4`, { seconds: 10, width: 352, height: 288 });
    await withServer(async (server) => {
      assert.equal(server.services.engine.kind, engine);
      const start = await server.post("/vod/startup", {
        uri: "vod-live://clip.mp4",
        localStreamName: "cam",
      });
      assert.equal(start.status, 200);
      const res = await server.post("/stream/snapshot", { streamName: "cam" });
      const body = await res.json();
      assert.equal(res.status, 200, JSON.stringify(body));
      const png = new Uint8Array(Buffer.from(body.data, "base64"));
      const [stream] = await (await server.post("/stream/find_all")).json() as StreamRecord[];
      assert.deepEqual(pngSize(png), { width: stream.width, height: stream.height });
      assert.deepEqual(pngSize(png), { width: 352, height: 288 });
    }, config);
  });
}

Deno.test("snapshot: 404 for an unknown stream, 409 for a stream without video", async () => {
  const config = testConfig();
  await Deno.mkdir(config.folders.media, { recursive: true });
  await makeClip(`${config.folders.media}/audio.mp4`, { seconds: 2, audio: "aac", noVideo: true });
  await withServer(async (server) => {
    const unknown = await server.post("/stream/snapshot", { streamName: "nobody" });
    assert.equal(unknown.status, 404);
    await unknown.body?.cancel();
    await server.post("/vod/startup", { uri: "vod-live://audio.mp4", localStreamName: "radio" });
    const audio = await server.post("/stream/snapshot", { streamName: "radio" });
    assert.equal(audio.status, 409);
    assert.match((await audio.json()).message, /no video/);
  }, config);
});

Deno.test("snapshot of a stream that sends no keyframe fails with a 409 after the timeout", async () => {
  const stream = new Stream({
    name: "silent",
    mediaSessionId: "m",
    tracks: [{ id: 0, kind: "video", codec: "H264", clockRate: 90000 }],
    mediaProvider: "test",
    stopProvider: () => Promise.resolve(),
  });
  const engine = new NativeEngine();
  const started = performance.now();
  await assert.rejects(takeSnapshot(stream, engine, 300), (err: Error & { status?: number }) => {
    assert.equal(err.status, 409);
    assert.match(err.message, /no keyframe within 300 ms/);
    return true;
  });
  assert.ok(performance.now() - started >= 290);
  assert.equal(stream.readerCount, 0, "the snapshot's reader is detached");
  await engine.close();
});
