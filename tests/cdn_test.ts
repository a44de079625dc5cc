/**
 * The CDN in one process: origin, edge and transcoder servers sharing one in-process cluster
 * store. ffmpeg publishes RTMP to the origin; players on the edge get the stream pulled on
 * demand, access lists and profiles apply on every node. (tests/cdn_redis_test.ts runs
 * separate processes on Redis.)
 */
import assert from "node:assert/strict";
import { type Config } from "../config.ts";
import { MemoryClusterStore } from "../core/cluster/memory_store.ts";
import { startTestServer, testConfig, type TestServer } from "./helpers/test_server.ts";
import { publishRtmp, stopPublisher } from "./helpers/ffmpeg_rtmp.ts";
import { probe, waitFor } from "./helpers/media_fixtures.ts";

type Role = "origin" | "edge" | "transcoder";

function cdnConfig(role: Role, cdn: Record<string, unknown> = {}): Config {
  return testConfig({
    cdn: { enabled: true, role, heartbeatMs: 200, nodeTtlMs: 1000, pullGraceMs: 1000, ...cdn },
  });
}

async function json<T>(res: Response): Promise<T> {
  assert.equal(res.status, 200, await res.clone().text());
  return await res.json() as T;
}

/** Reads `seconds` of an RTMP stream into an FLV file and probes it; throws when ffmpeg fails. */
async function recordRtmp(url: string, seconds: number) {
  const dir = await Deno.makeTempDir({ prefix: "cdn-test-" });
  const path = `${dir}/out.flv`;
  try {
    const out = await new Deno.Command("ffmpeg", {
      args: ["-hide_banner", "-nostdin", "-loglevel", "error", "-rw_timeout", "8000000", "-i", url]
        .concat(["-t", String(seconds), "-c", "copy", "-y", path]),
      stdout: "null",
      stderr: "piped",
    }).output();
    if (!out.success) throw new Error(`ffmpeg failed: ${new TextDecoder().decode(out.stderr)}`);
    return await probe(path);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

interface Cluster {
  store: MemoryClusterStore;
  origin: TestServer;
  edge: TestServer;
  publisher: Deno.ChildProcess;
  close(): Promise<void>;
}

async function startCluster(stream: string, extra: Record<Role, Config | undefined>) {
  const store = new MemoryClusterStore();
  const origin = await startTestServer(extra.origin ?? cdnConfig("origin"), undefined, {
    clusterStore: store,
  });
  const edge = await startTestServer(extra.edge ?? cdnConfig("edge"), undefined, {
    clusterStore: store,
  });
  const transcoder = extra.transcoder
    ? await startTestServer(extra.transcoder, undefined, { clusterStore: store })
    : undefined;
  const publisher = publishRtmp(`rtmp://127.0.0.1:${origin.rtmpPort}/live/${stream}`, 60);
  await waitFor(
    "the origin's route on the edge",
    async () => {
      const routes = await json<Record<string, string>>(await edge.post("/cdn/show_routes"));
      return Object.values(routes).includes(stream) ? true : undefined;
    },
  );
  return {
    store,
    origin,
    edge,
    transcoder,
    publisher,
    async close() {
      await stopPublisher(publisher);
      await transcoder?.stop();
      await edge.stop();
      await origin.stop();
      await store.close();
    },
  };
}

Deno.test("cdn: an edge pulls an origin's stream on demand for an RTMP player, and lets it go after the grace time", async () => {
  const cluster = await startCluster("cam", {
    origin: undefined,
    edge: undefined,
    transcoder: undefined,
  });
  const { origin, edge } = cluster;
  try {
    // Both nodes see the same nodes and routes.
    for (const node of [origin, edge]) {
      const nodes = await json<{ id: string; role: string; globalState: string }[]>(
        await node.post("/cdn/show_nodes"),
      );
      assert.deepEqual(nodes.map((n) => n.role).sort(), ["EDGE", "ORIGIN"]);
      assert(nodes.every((n) => n.globalState === "ACTIVE"));
    }
    assert.deepEqual(
      await json(await origin.post("/cdn/show_routes")),
      await json(await edge.post("/cdn/show_routes")),
    );
    assert.deepEqual(edge.services.streams.published("cam"), undefined);

    const played = await recordRtmp(`rtmp://127.0.0.1:${edge.rtmpPort}/live/cam`, 3);
    const video = played.streams.find((s) => s.codec_type === "video");
    assert.deepEqual(video?.codec_name, "h264");
    assert.deepEqual([video?.width, video?.height], [640, 360]);
    assert.deepEqual(played.streams.find((s) => s.codec_type === "audio")?.codec_name, "aac");
    assert(played.duration >= 2, `played ${played.duration} s`);

    const routes = await json<Record<string, string[]>>(
      await edge.post("/cdn/stream/show_routes", { streamName: "cam" }),
    );
    assert(Object.keys(routes).some((k) => k.startsWith("0-STREAM-")), JSON.stringify(routes));

    // No viewer left: the pull ends after the grace time (1 s here).
    await waitFor(
      "the edge's pull to end",
      () => edge.services.streams.published("cam") ? undefined : true,
      8000,
    );
    // The origin's stream goes on.
    assert(origin.services.streams.published("cam"));
  } finally {
    await cluster.close();
  }
});
