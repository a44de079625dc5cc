/**
 * Web SDK features beyond publish and play, over the signaling protocol: `stream.snapshot()`
 * and the record name of a `record: true` publish with its download at /client/records.
 */
import assert from "node:assert/strict";
import { Buffer } from "node:buffer";
import { makeClip, pngSize } from "./helpers/media_fixtures.ts";
import { testConfig, withServer } from "./helpers/test_server.ts";
import { WcsClient } from "./helpers/wcs_client.ts";
import { createEngine } from "../media/engine/select.ts";
import { run } from "../media/formats/test_fixtures.ts";
import { takeSnapshot } from "../media/publishers/snapshot.ts";
import { Stream } from "../media/stream.ts";
import { nextStatus, startPublishing, TestPublisher, weriftSanitizers } from "./webrtc_helpers.ts";

/** The next frame named `message` whose data[0] has this mediaSessionId. */
async function nextOf(
  client: WcsClient,
  message: string,
  mediaSessionId: string,
  timeoutMs = 15_000,
): Promise<Record<string, unknown>> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const [body] = await client.next(message, deadline - Date.now()) as [Record<string, unknown>];
    if (body.mediaSessionId === mediaSessionId) return body;
  }
}

Deno.test("snapshot message: snapshotCompleted event and SNAPSHOT_COMPLETE status with the PNG", async () => {
  const config = testConfig();
  await Deno.mkdir(config.folders.media, { recursive: true });
  await makeClip(`${config.folders.media}/clip.mp4`, { seconds: 4, width: 352, height: 288 });
  await withServer(async (server) => {
    const start = await server.post("/vod/startup", {
      uri: "vod-live://clip.mp4",
      localStreamName: "cam",
    });
    assert.equal(start.status, 200, await start.text());
    const { client } = await WcsClient.connect(server.wsUrl);
    try {
      // As the SDK's stream-snapshot demo does: a NEW stream of the name, snapshot() at once.
      const id = crypto.randomUUID();
      client.send("snapshot", { name: "cam", mediaSessionId: id });
      const event = await nextOf(client, "notifyStreamEvent", id);
      assert.equal(event.type, "snapshotCompleted", JSON.stringify(event).slice(0, 300));
      const snapshot = (event.payload as { snapshot: string }).snapshot;
      const png = new Uint8Array(Buffer.from(snapshot, "base64"));
      assert.deepEqual(pngSize(png), { width: 352, height: 288 });
      const status = await nextOf(client, "notifyStreamStatusEvent", id);
      assert.deepEqual([status.status, status.info], ["SNAPSHOT_COMPLETE", snapshot]);
      assert.equal(client.frames.filter((f) => f.message === "fail").length, 0);
    } finally {
      await client.close();
    }
  }, config);
});

Deno.test("snapshot message: an unknown stream gets snapshotFailed and FAILED with the reason", async () => {
  await withServer(async (server) => {
    const { client } = await WcsClient.connect(server.wsUrl);
    try {
      const id = crypto.randomUUID();
      client.send("snapshot", { name: "nobody", mediaSessionId: id });
      const event = await nextOf(client, "notifyStreamEvent", id);
      assert.deepEqual([event.type, event.payload], ["snapshotFailed", {
        info: "Stream not found",
      }]);
      const status = await nextOf(client, "notifyStreamStatusEvent", id);
      assert.deepEqual([status.status, status.info], ["FAILED", "Stream not found"]);
      client.send("snapshot", { mediaSessionId: id });
      const [fail] = await client.next("fail") as [Record<string, unknown>];
      assert.equal(fail.apiMethod, "snapshot");
      assert.match(String(fail.info), /name/);
    } finally {
      await client.close();
    }
  });
});

for (const codec of ["H264", "VP8"] as const) {
  Deno.test({
    name:
      `record: true ${codec} publish: UNPUBLISHED carries recordName, served at /client/records`,
    ...weriftSanitizers,
    fn: async () => {
      const config = testConfig();
      await withServer(async (server) => {
        const { client } = await WcsClient.connect(server.wsUrl);
        const publisher = new TestPublisher(codec);
        try {
          const id = await startPublishing(publisher, client, { name: "cam", record: true });
          await new Promise((r) => setTimeout(r, 2500));
          client.send("unPublishStream", { mediaSessionId: id, name: "cam" });
          const final = await nextStatus(client, id);
          assert.equal(final.status, "UNPUBLISHED");
          const recordName = String(final.recordName);
          assert.match(recordName, /^cam-\d{13}-\d{13}\.mp4$/);
          const res = await fetch(`${server.restUrl}/client/records/${recordName}`);
          assert.equal(res.status, 200);
          const served = new Uint8Array(await res.arrayBuffer());
          const path = `${config.folders.records}/${recordName}`;
          assert.deepEqual(served, await Deno.readFile(path));
          const { out } = await run("ffprobe", [
            "-v",
            "error",
            "-show_entries",
            "stream=codec_name,width,height:format=duration",
            "-of",
            "json",
            path,
          ]);
          const probed = JSON.parse(out);
          const codecs = probed.streams.map((s: { codec_name: string }) => s.codec_name).sort();
          assert.deepEqual(codecs, [codec.toLowerCase(), "opus"].sort());
          const video = probed.streams.find((s: { width?: number }) => s.width);
          assert.deepEqual([video.width, video.height], [640, 480]);
          const duration = Number(probed.format.duration);
          assert.ok(duration > 1.5 && duration < 4, `duration ${duration}`);
        } finally {
          await publisher.close();
          await client.close();
        }
      }, config);
    },
  });
}

for (const iceMux of ["off", "on"] as const) {
  Deno.test({
    name: iceMux === "off"
      ? "publishes answered at the same time each get a port of their own and all publish"
      : "publishes answered at the same time all share the ICE mux's port and all publish",
    ...weriftSanitizers,
    fn: async () => {
      // A narrow range: werift alone probed it from its bottom for every peer at once, and all
      // but one bind failed (EADDRINUSE, uncaught: the process died).
      const config = testConfig({ media: { udpPortMin: 41000, udpPortMax: 41040, iceMux } });
      await withServer(async (server) => {
        const count = 12;
        const clients = await Promise.all(
          [...Array(count)].map(async () => (await WcsClient.connect(server.wsUrl)).client),
        );
        const publishers = clients.map(() => new TestPublisher("VP8"));
        try {
          const ids = clients.map(() => crypto.randomUUID());
          const answers = await Promise.all(
            publishers.map((p, i) =>
              p.publish(clients[i], { mediaSessionId: ids[i], name: `c${i}` })
            ),
          );
          const ports = answers.map((sdp) =>
            Number(/a=candidate:\S+ 1 udp \d+ \S+ (\d+)/.exec(sdp)?.[1])
          );
          const expected = iceMux === "off" ? count : 1;
          assert.equal(new Set(ports).size, expected, `ports ${ports}`);
          assert.ok(ports.every((p) => p >= 41000 && p <= 41040), `ports ${ports}`);
          if (iceMux === "on") assert.equal(ports[0], server.webrtcUdpPort);
          for (const p of publishers) p.start();
          const statuses = await Promise.all(ids.map((id, i) => nextStatus(clients[i], id)));
          assert.deepEqual(statuses.map((s) => s.status), Array(count).fill("PUBLISHING"));
        } finally {
          await Promise.all(publishers.map((p) => p.close()));
          await Promise.all(clients.map((c) => c.close()));
        }
      }, config);
    },
  });
}

for (const engine of ["native", "wasm"] as const) {
  Deno.test(`snapshot of a VP8 stream (as browsers publish) with the ${engine} engine`, async () => {
    const ivf = `${await Deno.makeTempDir()}/key.ivf`;
    await run("ffmpeg", [
      ...["-v", "error", "-f", "lavfi", "-i", "testsrc2=size=352x288:rate=25", "-frames:v", "1"],
      ...["-c:v", "libvpx", "-f", "ivf", ivf],
    ]);
    const file = await Deno.readFile(ivf);
    const size = new DataView(file.buffer).getUint32(32, true);
    const keyframe = file.subarray(44, 44 + size);
    const stream = new Stream({
      name: "vp8",
      mediaSessionId: "m",
      tracks: [{ id: 0, kind: "video", codec: "VP8", clockRate: 90000 }],
      mediaProvider: "test",
      stopProvider: () => Promise.resolve(),
    });
    stream.push({ trackId: 0, codec: "VP8", pts: 0, dts: 0, keyframe: true, data: keyframe });
    const codecEngine = createEngine(engine);
    try {
      const png = await takeSnapshot(stream, codecEngine, 2000);
      assert.deepEqual(pngSize(png), { width: 352, height: 288 });
    } finally {
      await codecEngine.close();
      await Deno.remove(ivf);
    }
  });
}
