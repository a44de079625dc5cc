/**
 * Server-wide caps (streams, pulls, VODs, recorders), the engine job pool and the recording
 * disk floor: each refuses with a 503 naming the cap, gives its slot back when the entry
 * ends, and shows in /health.
 */
import assert from "node:assert/strict";
import { ServiceUnavailableError } from "../core/errors.ts";
import type { CodecEngine, EngineJob } from "../media/engine/engine.ts";
import { EnginePool } from "../media/engine/job_pool.ts";
import { childrenNamed } from "./helpers/children.ts";
import { makeClip } from "./helpers/media_fixtures.ts";
import { testConfig, type TestServer, withServer } from "./helpers/test_server.ts";
import { WcsClient } from "./helpers/wcs_client.ts";
import { openPeerCount } from "../media/protocols/webrtc/peer.ts";
import { nextStatus, TestPublisher, weriftSanitizers } from "./webrtc_helpers.ts";

/** Polls `check` until true, or fails after `timeoutMs` naming `what`. */
async function waitFor(
  check: () => boolean | Promise<boolean>,
  timeoutMs: number,
  what: string,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!await check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

async function health(server: TestServer) {
  return await (await fetch(`${server.restUrl}/health`)).json();
}

/** POSTs and checks the status; returns the JSON body (or undefined for an empty one). */
async function post(server: TestServer, path: string, body: unknown, status = 200) {
  const res = await server.post(path, body);
  const text = await res.text();
  assert.equal(res.status, status, `${path} ${JSON.stringify(body)}: ${text}`);
  return text ? JSON.parse(text) : undefined;
}

async function withClips(
  overrides: Record<string, unknown>,
  clips: string[],
  fn: (server: TestServer) => Promise<void>,
): Promise<void> {
  const config = testConfig(overrides);
  await Deno.mkdir(config.folders.media, { recursive: true });
  await makeClip(`${config.folders.media}/clip.mp4`, { seconds: 30 });
  for (const name of clips) {
    await Deno.copyFile(`${config.folders.media}/clip.mp4`, `${config.folders.media}/${name}`);
  }
  await withServer(fn, config);
}

function vod(name: string) {
  return { uri: "vod-live://clip.mp4", localStreamName: name };
}

Deno.test("vods cap: the second VOD is a 503 naming the cap; a terminated one frees its slot", async () => {
  await withClips({ limits: { vods: 1 } }, [], async (server) => {
    await post(server, "/vod/startup", vod("a"));
    const refused = await post(server, "/vod/startup", vod("b"), 503);
    assert.equal(refused.message, "vods limit of 1 reached");
    const figures = (await health(server)).limits.vods;
    assert.deepEqual(figures, { current: 1, max: 1, refused: 1 });
    await post(server, "/vod/terminate", vod("a"));
    await waitFor(async () => (await health(server)).limits.vods.current === 0, 5000, "release");
    await post(server, "/vod/startup", vod("b"));
    assert.equal((await health(server)).limits.streams.current, 1);
  });
});

Deno.test("streams cap: a published stream of any provider takes a slot; beyond it a 503", async () => {
  await withClips({ limits: { streams: 1 } }, [], async (server) => {
    await post(server, "/vod/startup", vod("a"));
    const refused = await post(server, "/vod/startup", vod("b"), 503);
    assert.equal(refused.message, "streams limit of 1 reached");
    // The refused VOD gave its own slot back.
    assert.equal((await health(server)).limits.vods.current, 1);
    assert.equal((await server.post("/vod/find_all")).status, 200);
    const [stream] = await post(server, "/stream/find_all", {});
    await post(server, "/stream/terminate", { mediaSessionId: stream.mediaSessionId });
    await waitFor(async () => (await health(server)).limits.streams.current === 0, 5000, "release");
    await post(server, "/vod/startup", vod("b"));
  });
});

Deno.test("recorders cap: single and multi-recorders share it; a stopped recorder frees its slot", async () => {
  await withClips({ limits: { recorders: 1 } }, [], async (server) => {
    await post(server, "/vod/startup", vod("a"));
    await post(server, "/vod/startup", vod("b"));
    const streams = await post(server, "/stream/find_all", {});
    const [a, b] = ["a", "b"].map((n) =>
      streams.find((s: { name: string }) => s.name === n).mediaSessionId
    );
    await post(server, "/recorder/startup", { mediaSessionId: a });
    const refused = await post(server, "/recorder/startup", { mediaSessionId: b }, 503);
    assert.equal(refused.message, "recorders limit of 1 reached");
    await post(server, "/multipleRecorder/startup", { uri: "multi-recorder://m" }, 503);
    await post(server, "/recorder/terminate", { mediaSessionId: a });
    await post(server, "/stream/startRecording", { mediaSessionId: b });
    assert.deepEqual((await health(server)).limits.recorders, { current: 1, max: 1, refused: 2 });
  });
});

Deno.test("recording disk floor: below limits.recordMinFreeMb new recordings are 503s", async () => {
  // A floor of 1 PiB: more than any test machine's free space.
  await withClips({ limits: { recordMinFreeMb: 2 ** 30 } }, [], async (server) => {
    await post(server, "/vod/startup", vod("a"));
    const [stream] = await post(server, "/stream/find_all", {});
    const refused = await post(server, "/recorder/startup", {
      mediaSessionId: stream.mediaSessionId,
    }, 503);
    assert.match(refused.message, /MiB free for recordings, below the floor of 1073741824 MiB/);
    await post(server, "/multipleRecorder/startup", { uri: "multi-recorder://m" });
    await post(server, "/multipleRecorder/add", {
      uri: "multi-recorder://m",
      mediaSessionId: stream.mediaSessionId,
    }, 503);
    const figures = (await health(server)).limits;
    assert.deepEqual(figures.recordDisk, { minFreeMb: 2 ** 30, refused: 2 });
    assert.equal(figures.recorders.current, 1, "the multi-recorder only");
  });
});

Deno.test("pulls cap: a pull to a camera that never answers holds its slot until it fails", async () => {
  // A camera that accepts and never answers, until the test lets it go.
  const camera = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const held: Deno.Conn[] = [];
  const accepting = (async () => {
    for await (const conn of camera) held.push(conn);
  })();
  const uri = (n: number) => `rtsp://127.0.0.1:${(camera.addr as Deno.NetAddr).port}/cam${n}`;
  try {
    await withServer(async (server) => {
      const first = server.post("/rtsp/startup", { uri: uri(1), localStreamName: "c1" });
      await waitFor(() => held.length === 1, 5000, "the camera connection");
      const refused = await post(server, "/rtsp/startup", { uri: uri(2) }, 503);
      assert.equal(refused.message, "pulls limit of 1 reached");
      assert.deepEqual((await health(server)).limits.pulls, { current: 1, max: 1, refused: 1 });
      // The camera hangs up: the first pull fails and frees its slot.
      for (const conn of held.splice(0)) conn.close();
      const failed = await first;
      assert.equal(failed.status, 502, await failed.text());
      assert.equal((await health(server)).limits.pulls.current, 0);
    }, testConfig({ limits: { pulls: 1 }, rtsp: { transport: "tcp" } }));
  } finally {
    camera.close();
    for (const conn of held) conn.close();
    await accepting.catch(() => {});
  }
});

Deno.test("engine pool: 20 parallel snapshots with engineJobs 2 run at most 2 ffmpeg at once, all answer", async () => {
  await withClips(
    { limits: { engineJobs: 2 }, media: { engine: "native" } },
    [],
    async (server) => {
      await post(server, "/vod/startup", vod("cam"));
      let maxChildren = 0;
      let maxQueued = 0;
      let sampling = true;
      const sampler = (async () => {
        while (sampling) {
          maxChildren = Math.max(maxChildren, childrenNamed("ffmpeg"));
          await new Promise((r) => setTimeout(r, 5));
        }
      })();
      const healthTimes: number[] = [];
      const answers = Promise.all(
        Array.from({ length: 20 }, () => server.post("/stream/snapshot", { streamName: "cam" })),
      );
      const probing = (async () => {
        for (let i = 0; i < 5; i++) {
          const started = performance.now();
          maxQueued = Math.max(maxQueued, (await health(server)).limits.engineJobs.queued);
          healthTimes.push(performance.now() - started);
        }
      })();
      const results = await answers;
      await probing;
      sampling = false;
      await sampler;
      for (const res of results) {
        const body = await res.json();
        assert.equal(res.status, 200, JSON.stringify(body));
        assert.ok(body.data.length > 100, "a PNG");
      }
      assert.ok(maxChildren >= 1 && maxChildren <= 2, `${maxChildren} ffmpeg at once`);
      assert.ok(maxQueued > 0, "some snapshots waited in the queue");
      const figures = (await health(server)).limits.engineJobs;
      assert.deepEqual(figures, { running: 0, queued: 0, max: 2, maxQueued: 256, refused: 0 });
    },
  );
});

/** An engine whose jobs end when the test says. */
class HeldEngine implements CodecEngine {
  readonly kind = "native";
  running = 0;
  readonly #release: (() => void)[] = [];
  async run(_job: EngineJob): Promise<Uint8Array> {
    this.running++;
    const { promise, resolve } = Promise.withResolvers<void>();
    this.#release.push(resolve);
    await promise;
    this.running--;
    return new Uint8Array([1]);
  }
  releaseOne(): void {
    this.#release.shift()?.();
  }
  close(): Promise<void> {
    return Promise.resolve();
  }
}

Deno.test("engine pool: jobs beyond the running and queued bounds are 503s; close refuses the queued", async () => {
  const engine = new HeldEngine();
  const pool = new EnginePool(engine, { maxRunning: 1, maxQueued: 1 });
  const job = { inputArgs: [], input: new Uint8Array(), outputArgs: [] };
  const first = pool.run(job);
  const second = pool.run(job);
  await assert.rejects(pool.run(job), (err) => {
    assert.ok(err instanceof ServiceUnavailableError);
    assert.equal(err.message, "engine jobs limit of 1 running and 1 queued reached");
    return true;
  });
  assert.equal(engine.running, 1);
  assert.deepEqual(pool.figures(), { running: 1, queued: 1, max: 1, maxQueued: 1, refused: 1 });
  engine.releaseOne();
  assert.deepEqual(await first, new Uint8Array([1]));
  await waitFor(() => engine.running === 1, 1000, "the queued job to start");
  const third = pool.run(job);
  await pool.close();
  await assert.rejects(third, /the engine is closed/);
  engine.releaseOne();
  assert.deepEqual(await second, new Uint8Array([1]));
  assert.equal(pool.start, undefined, "an engine without live jobs gives none");
});

Deno.test("pushes cap: a second push is a 503; a terminated push frees its slot", async () => {
  await withClips({ limits: { pushes: 1 } }, [], async (server) => {
    await post(server, "/vod/startup", vod("a"));
    const target = (name: string) => ({
      streamName: "a",
      rtmpUrl: `rtmp://127.0.0.1:${server.rtmpPort}/live/${name}`,
      rtmpTransponderFullUrl: true,
    });
    const push = await post(server, "/push/startup", target("copy1"));
    const refused = await post(server, "/push/startup", target("copy2"), 503);
    assert.equal(refused.message, "pushes limit of 1 reached");
    await post(server, "/push/terminate", { mediaSessionId: push.mediaSessionId });
    await waitFor(async () => (await health(server)).limits.pushes.current === 0, 5000, "release");
    await post(server, "/push/startup", target("copy2"));
    assert.deepEqual((await health(server)).limits.pushes, { current: 1, max: 1, refused: 1 });
  });
});

Deno.test("/health answers the figures of every cap and the open descriptors", async () => {
  await withServer(async (server) => {
    const body = await health(server);
    assert.equal(body.status, "ok");
    for (const cap of ["sessions", "streams", "pulls", "pushes", "vods", "recorders"]) {
      assert.deepEqual(Object.keys(body.limits[cap]), ["current", "max", "refused"], cap);
    }
    assert.deepEqual(Object.keys(body.limits.listeners.ws), [
      "connections",
      "connectionsPerAddress",
    ]);
    assert.deepEqual(body.limits.engineJobs, {
      running: 0,
      queued: 0,
      max: navigator.hardwareConcurrency,
      maxQueued: 256,
      refused: 0,
    });
    assert.ok(body.fds.open > 0 && body.fds.open < body.fds.limit, JSON.stringify(body.fds));
    assert.ok(body.memory.heapUsedMiB > 0 && body.memory.rssMiB > body.memory.heapUsedMiB);
  });
});

Deno.test({
  name: "streams cap: a WebRTC publish beyond it ends FAILED with the cap's message, no peer left",
  ...weriftSanitizers,
  fn: async () => {
    await withClips({ limits: { streams: 1 } }, [], async (server) => {
      await post(server, "/vod/startup", vod("a"));
      const { client } = await WcsClient.connect(server.wsUrl);
      const publisher = new TestPublisher("VP8");
      try {
        const id = crypto.randomUUID();
        await publisher.pc.setLocalDescription(await publisher.pc.createOffer());
        client.send("publishStream", {
          mediaSessionId: id,
          name: "cam",
          published: true,
          sdp: publisher.pc.localDescription!.sdp,
        });
        const status = await nextStatus(client, id);
        assert.deepEqual([status.status, status.info], [
          "FAILED",
          "Failed by error: streams limit of 1 reached",
        ]);
        assert.equal(server.services.streams.published("cam"), undefined);
        assert.deepEqual((await health(server)).limits.streams, {
          current: 1,
          max: 1,
          refused: 1,
        });
        await waitFor(() => openPeerCount() === 0, 5000, "the refused peer to close");
      } finally {
        await publisher.close();
        await client.close();
      }
    });
  },
});

Deno.test("pulls cap: RTMP pulls share it with RTSP; a stopped pull frees its slot", async () => {
  await withClips({ limits: { pulls: 1 } }, [], async (server) => {
    await post(server, "/vod/startup", vod("a"));
    // The server's own RTMP port plays the VOD stream back: a remote that always answers.
    const uri = (n: number) => `rtmp://127.0.0.1:${server.rtmpPort}/live/a?n=${n}`;
    await post(server, "/pull/rtmp/pull", { uri: uri(1), localStreamName: "p1" });
    const refused = await post(
      server,
      "/pull/rtmp/pull",
      { uri: uri(2), localStreamName: "p2" },
      503,
    );
    assert.equal(refused.message, "pulls limit of 1 reached");
    const rtsp = await post(server, "/rtsp/startup", { uri: "rtsp://127.0.0.1:1/cam" }, 503);
    assert.equal(rtsp.message, "pulls limit of 1 reached");
    await post(server, "/pull/rtmp/terminate", { uri: uri(1) });
    await waitFor(async () => (await health(server)).limits.pulls.current === 0, 5000, "release");
    await post(server, "/pull/rtmp/pull", { uri: uri(2), localStreamName: "p2" });
  });
});

Deno.test("engine pool: a live chunk waits ahead of queued whole jobs and is never refused for a full queue", async () => {
  const engine = new HeldEngine();
  const pool = new EnginePool(engine, { maxRunning: 1, maxQueued: 1 });
  const order: string[] = [];
  const job = (name: string, live = false) =>
    pool.run({ inputArgs: [], input: new Uint8Array(), outputArgs: [], live }).then(() => {
      order.push(name);
    });
  const running = job("first");
  const snapshot = job("snapshot");
  const chunk = job("live chunk", true);
  assert.deepEqual(pool.figures().queued, 2, "the live chunk queued beyond maxQueued");
  await waitFor(() => engine.running === 1, 1000, "the first job");
  engine.releaseOne();
  await running;
  await waitFor(() => engine.running === 1, 1000, "the next job");
  engine.releaseOne();
  await chunk;
  await waitFor(() => engine.running === 1, 1000, "the snapshot");
  engine.releaseOne();
  await snapshot;
  assert.deepEqual(order, ["first", "live chunk", "snapshot"]);
  await pool.close();
});
