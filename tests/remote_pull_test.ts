/**
 * `/pull/pull` and `/pull/push` between two of our servers in one process: server B plays a
 * stream of server A over A's Web SDK WebSocket and WebRTC into a local stream (and publishes
 * one of its own to A), checked with ffmpeg reading the result over RTMP; refusals (502 for an
 * unreachable remote or a missing remote stream, 404, 409); and the reconnect of a pull when
 * A stops and comes back on the same port.
 */
import assert from "node:assert/strict";
import { run, tempPath } from "../media/formats/test_fixtures.ts";
import { openPeerCount } from "../media/protocols/webrtc/peer.ts";
import { Stream } from "../media/stream.ts";
import { publishRtmp, stopPublisher } from "./helpers/ffmpeg_rtmp.ts";
import { probe, waitFor } from "./helpers/media_fixtures.ts";
import { freePort } from "./helpers/process.ts";
import { refused } from "./helpers/rest_checks.ts";
import { startTestServer, testConfig, type TestServer } from "./helpers/test_server.ts";
import { weriftSanitizers } from "./webrtc_helpers.ts";

type Json = Record<string, unknown>;

async function post(server: TestServer, path: string, body: unknown = {}): Promise<unknown> {
  const res = await server.post(path, body);
  const text = await res.text();
  assert.equal(res.status, 200, `${path} ${JSON.stringify(body)}: ${text}`);
  return text === "" ? undefined : JSON.parse(text);
}

async function findAll(server: TestServer): Promise<Json[]> {
  return await post(server, "/pull/find_all") as Json[];
}

/** Starts ffmpeg publishing H.264 + AAC to `server` as `name`, and waits for the stream. */
async function camera(server: TestServer, name: string): Promise<Deno.ChildProcess> {
  const child = publishRtmp(`rtmp://127.0.0.1:${server.rtmpPort}/live/${name}`, 120);
  await waitFor(
    `${name} published`,
    () => server.services.streams.published(name) ? true : undefined,
  );
  return child;
}

/** What ffmpeg records of `name` played over RTMP from `server` for 2 s, as ffprobe reads it. */
async function playedOverRtmp(server: TestServer, name: string) {
  const file = await tempPath(`played-${crypto.randomUUID()}.flv`);
  try {
    await run("ffmpeg", [
      ...["-v", "error", "-y", "-rw_timeout", "10000000"],
      ...["-i", `rtmp://127.0.0.1:${server.rtmpPort}/live/${name}`, "-t", "2", "-c", "copy", file],
    ]);
    return await probe(file);
  } finally {
    await Deno.remove(file).catch(() => {});
  }
}

/** The only remote pull record of `server` when its status is `wanted`. */
async function status(server: TestServer, wanted: string): Promise<Json | undefined> {
  const records = await findAll(server);
  assert.equal(records.length, 1, JSON.stringify(records));
  return records[0].status === wanted ? records[0] : undefined;
}

/** The next video keyframe of the local stream `name` of `server`, within `timeoutMs`. */
async function nextKeyframe(server: TestServer, name: string, timeoutMs = 10_000) {
  const stream = server.services.streams.published(name);
  assert.ok(stream instanceof Stream, `${name} is not a local stream`);
  const reader = stream.reader();
  const timer = setTimeout(() => reader.close(), timeoutMs);
  try {
    for await (const frame of reader) {
      if (stream.tracks[frame.trackId].kind === "video" && frame.keyframe) return frame;
    }
    throw new Error(`no keyframe of ${name} within ${timeoutMs} ms`);
  } finally {
    clearTimeout(timer);
    reader.close();
  }
}

Deno.test({
  name:
    "/pull/pull plays a stream of another server into a local stream; terminate ends it on both",
  ...weriftSanitizers,
  async fn() {
    const a = await startTestServer();
    const b = await startTestServer();
    const cam = await camera(a, "src");
    try {
      const startMs = performance.now();
      await post(b, "/pull/pull", {
        uri: a.wsUrl,
        remoteStreamName: "src",
        localStreamName: "copy",
      });
      console.log(`pull to first media: ${Math.round(performance.now() - startMs)} ms`);

      const [record] = await findAll(b);
      const local = b.services.streams.published("copy");
      assert.ok(local instanceof Stream);
      assert.deepEqual(record, {
        localMediaSessionId: local.mediaSessionId,
        remoteMediaSessionId: record.remoteMediaSessionId,
        localStreamName: "copy",
        remoteStreamName: "src",
        uri: a.wsUrl,
        status: "PROCESSED_REMOTE",
      });
      assert.equal(typeof record.remoteMediaSessionId, "string");
      // Opus stays Opus; the video is A's H.264.
      assert.deepEqual(local.tracks.map((t) => t.codec).sort(), ["H264", "OPUS"]);

      // A plays the stream to B over WebRTC: its play session has B's remote id.
      const aStreams = await post(a, "/stream/find_all") as Json[];
      const play = aStreams.find((s) => s.mediaSessionId === record.remoteMediaSessionId);
      assert.ok(play, JSON.stringify(aStreams));
      assert.equal(play.name, "src");
      assert.equal(play.mediaType, "play");
      assert.equal(play.status, "PLAYING");

      // What B republishes decodes: ffmpeg plays it over RTMP from B.
      const probed = await playedOverRtmp(b, "copy");
      const video = probed.streams.find((s) => s.codec_type === "video");
      const audio = probed.streams.find((s) => s.codec_type === "audio");
      assert.equal(video?.codec_name, "h264");
      assert.equal(video?.width, 640);
      assert.equal(video?.height, 360);
      assert.ok(Number(video?.nb_read_frames) >= 25, JSON.stringify(probed));
      assert.equal(audio?.codec_name, "aac");
      assert.ok(Number(audio?.nb_read_frames) > 0, JSON.stringify(probed));

      await post(b, "/pull/terminate", { uri: a.wsUrl });
      assert.deepEqual(await findAll(b), []);
      assert.equal(b.services.streams.published("copy"), undefined);
      await waitFor(
        "A's play session ended",
        () =>
          a.services.streams.list().some((s) => s.mediaSessionId === record.remoteMediaSessionId)
            ? undefined
            : true,
      );
      await refused(b, "/pull/terminate", { uri: a.wsUrl }, 404, /not found/);
    } finally {
      await stopPublisher(cam);
      await b.stop();
      await a.stop();
    }
  },
});

Deno.test({
  name: "/pull/push publishes a local stream on another server, playable there",
  ...weriftSanitizers,
  async fn() {
    const a = await startTestServer();
    const b = await startTestServer();
    b.services.remotePulls.setBackoff({ minMs: 200, maxMs: 1000 });
    const cam = await camera(b, "local");
    try {
      await post(b, "/pull/push", {
        uri: a.wsUrl,
        localStreamName: "local",
        remoteStreamName: "pushed",
      });
      const local = b.services.streams.published("local")!;
      const [record] = await findAll(b);
      assert.deepEqual(record, {
        localMediaSessionId: local.mediaSessionId,
        remoteMediaSessionId: record.remoteMediaSessionId,
        localStreamName: "local",
        remoteStreamName: "pushed",
        uri: a.wsUrl,
        status: "PROCESSED_REMOTE",
      });
      const published = a.services.streams.published("pushed");
      assert.ok(published instanceof Stream);
      // B's peer is on its ICE mux and the push's video and audio go through its send engine
      // (when FFI loads: the test servers then have both).
      if (b.services.sendPaths.engine) {
        await waitFor(
          "the push's tracks on B's send engine",
          () => b.services.sendPaths.size === 2 ? true : undefined,
        );
      }
      assert.equal(published.mediaSessionId, record.remoteMediaSessionId);
      assert.equal(published.mediaProvider, "WebRTC");

      const probed = await playedOverRtmp(a, "pushed");
      const video = probed.streams.find((s) => s.codec_type === "video");
      assert.equal(video?.codec_name, "h264");
      assert.equal(video?.width, 640);
      assert.ok(Number(video?.nb_read_frames) >= 25, JSON.stringify(probed));
      assert.equal(probed.streams.find((s) => s.codec_type === "audio")?.codec_name, "aac");

      await refused(
        b,
        "/pull/push",
        { uri: a.wsUrl, localStreamName: "local", remoteStreamName: "pushed" },
        409,
        /already runs/,
      );

      // The pushed stream is terminated on A: B publishes it again.
      await post(a, "/stream/terminate", { mediaSessionId: published.mediaSessionId });
      const republished = await waitFor("the push is back on A", () => {
        const again = a.services.streams.published("pushed");
        return again && again !== published ? again : undefined;
      }, 20_000);
      await waitFor("PROCESSED_REMOTE after the new publish", () => status(b, "PROCESSED_REMOTE"));
      assert.equal((await findAll(b))[0].remoteMediaSessionId, republished.mediaSessionId);
      await post(b, "/pull/terminate", { uri: a.wsUrl });
      assert.deepEqual(await findAll(b), []);
      await waitFor(
        "the pushed stream ended on A",
        () => a.services.streams.published("pushed") ? undefined : true,
      );
      // The local stream is untouched.
      assert.equal(b.services.streams.published("local"), local);
    } finally {
      await stopPublisher(cam);
      await b.stop();
      await a.stop();
    }
  },
});

Deno.test({
  name:
    "/pull refusals: unreachable remote and missing remote stream are 502s leaving nothing; 404; 409",
  ...weriftSanitizers,
  async fn() {
    const a = await startTestServer();
    const b = await startTestServer();
    const cam = await camera(a, "src");
    try {
      const closed = `ws://127.0.0.1:${freePort()}`;
      const res = await b.post("/pull/pull", {
        uri: closed,
        remoteStreamName: "src",
        localStreamName: "copy",
      });
      assert.equal(res.status, 502);
      const body = await res.json();
      assert.equal(body.error, "bad gateway");
      assert.match(body.message, new RegExp(closed.replaceAll(".", "\\.")));

      await refused(
        b,
        "/pull/pull",
        { uri: a.wsUrl, remoteStreamName: "nope", localStreamName: "copy" },
        502,
        /stream nope: FAILED Stream not found/,
      );
      assert.deepEqual(await findAll(b), []);
      assert.equal(b.services.streams.published("copy"), undefined);
      assert.equal(b.services.limits.pulls.current, 0);
      await waitFor(
        "A has no play session left",
        () => a.services.streams.list().some((s) => !s.published) ? undefined : true,
      );

      await refused(
        b,
        "/pull/push",
        { uri: a.wsUrl, localStreamName: "absent", remoteStreamName: "x" },
        404,
        /stream absent not found/,
      );
      await post(b, "/pull/pull", {
        uri: a.wsUrl,
        remoteStreamName: "src",
        localStreamName: "copy",
      });
      await refused(
        b,
        "/pull/pull",
        { uri: a.wsUrl, remoteStreamName: "src", localStreamName: "other" },
        409,
        /already runs/,
      );
      await refused(
        b,
        "/pull/pull",
        { uri: a.wsUrl, remoteStreamName: "src2", localStreamName: "copy" },
        409,
        /copy is already published/,
      );
      assert.equal((await findAll(b)).length, 1);

      // The local stream terminated on B ends the pull (no reconnect) and A's play.
      const local = b.services.streams.published("copy")!;
      await post(b, "/stream/terminate", { mediaSessionId: local.mediaSessionId });
      await waitFor(
        "the pull ended with its local stream",
        async () => (await findAll(b)).length === 0 ? true : undefined,
      );
      await waitFor(
        "A's play ended",
        () => a.services.streams.list().some((s) => !s.published) ? undefined : true,
      );
      assert.equal(b.services.limits.pulls.current, 0);
    } finally {
      await stopPublisher(cam);
      await b.stop();
      await a.stop();
    }
    // Server stop ended the pull and gave its slot back; no peer is left open.
    assert.equal(b.services.limits.pulls.current, 0);
    assert.equal(openPeerCount(), 0);
  },
});

Deno.test({
  name: "a pull reconnects with backoff when the remote server stops and comes back on its port",
  ...weriftSanitizers,
  async fn() {
    const config = testConfig({
      ports: { rest: 0, ws: freePort(), wss: 0, hls: 0, rtmp: 0, rtsp: 0, srt: 0, sip: 0 },
    });
    let a = await startTestServer(config);
    const b = await startTestServer();
    b.services.remotePulls.setBackoff({ minMs: 200, maxMs: 1000 });
    let cam: Deno.ChildProcess | undefined = await camera(a, "src");
    try {
      await post(b, "/pull/pull", {
        uri: a.wsUrl,
        remoteStreamName: "src",
        localStreamName: "copy",
      });
      await nextKeyframe(b, "copy");

      // The remote's publisher stops while its server runs: B waits for it to come back.
      await stopPublisher(cam);
      await waitFor("RECONNECTING once A's stream stopped", () => status(b, "RECONNECTING"));
      assert.equal(b.services.streams.published("copy"), undefined);
      cam = await camera(a, "src");
      await waitFor(
        "PROCESSED_REMOTE once A's stream is back",
        () => status(b, "PROCESSED_REMOTE"),
        20_000,
      );
      await nextKeyframe(b, "copy");
      const [before] = await findAll(b);

      // The remote server stops (its WebSocket closes), then starts again on the same port.
      await stopPublisher(cam);
      await a.stop();
      const reconnecting = await waitFor(
        "RECONNECTING once A stopped",
        () => status(b, "RECONNECTING"),
      );
      assert.equal(reconnecting.localStreamName, "copy");
      assert.equal(b.services.streams.published("copy"), undefined);

      a = await startTestServer(config);
      cam = await camera(a, "src");
      const startMs = performance.now();
      const after = await waitFor(
        "PROCESSED_REMOTE once A is back",
        () => status(b, "PROCESSED_REMOTE"),
        20_000,
      );
      console.log(`back after the remote returned: ${Math.round(performance.now() - startMs)} ms`);
      assert.notEqual(after.remoteMediaSessionId, before.remoteMediaSessionId);
      const keyframe = await nextKeyframe(b, "copy");
      assert.ok(keyframe.data.byteLength > 1000);

      // Terminated while it waits to reconnect: it stops at once.
      await stopPublisher(cam);
      cam = undefined;
      await waitFor("RECONNECTING once A's stream stopped", () => status(b, "RECONNECTING"));
      await post(b, "/pull/terminate", { uri: a.wsUrl });
      assert.deepEqual(await findAll(b), []);
      assert.equal(b.services.limits.pulls.current, 0);
    } finally {
      if (cam) await stopPublisher(cam);
      await b.stop();
      await a.stop();
    }
  },
});
