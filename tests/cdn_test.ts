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

    // An HLS viewer of the edge brings it back: its playlist request opens the pull.
    const playlist = await waitFor("the edge's HLS playlist", async () => {
      const res = await fetch(`${edge.hlsUrl}/cam/cam.m3u8`);
      const text = await res.text();
      return res.status === 200 && text.startsWith("#EXTM3U") ? text : undefined;
    }, 15_000);
    assert.match(playlist, /\.m3u8/);
    assert(edge.services.streams.published("cam"), "the edge pulled the stream for HLS");
    const missing = await fetch(`${edge.hlsUrl}/none/none.m3u8`);
    await missing.body?.cancel();
    assert.equal(missing.status, 404);
  } finally {
    await cluster.close();
  }
});

/** ffmpeg reading an RTMP stream into nothing; the caller waits for it to end. */
function readRtmp(url: string, seconds: number): Deno.ChildProcess {
  return new Deno.Command("ffmpeg", {
    args: ["-hide_banner", "-nostdin", "-loglevel", "error", "-rw_timeout", "8000000", "-i", url]
      .concat(["-t", String(seconds), "-f", "null", "-"]),
    stdout: "null",
    stderr: "piped",
  }).spawn();
}

Deno.test("cdn: a stream's access list set on the origin refuses keyless viewers on the edge, admits the key, and stops its viewer when the key is removed", async () => {
  const cluster = await startCluster("acl", {
    origin: undefined,
    edge: undefined,
    transcoder: undefined,
  });
  const { origin, edge } = cluster;
  try {
    // The list is managed on the origin, where the stream is published.
    assert.equal(
      (await edge.post("/cdn/stream/access_list/add", { name: "nope", keys: ["k"] })).status,
      404,
    );
    assert.equal(
      (await origin.post("/cdn/stream/access_list/add", { name: "acl", keys: ["k1"] })).status,
      200,
    );
    await waitFor("the list on the edge", async () => {
      const keys = await json<string[]>(
        await edge.post("/cdn/stream/access_list/print", { name: "acl" }),
      );
      return keys.includes("k1") ? true : undefined;
    });
    const base = `rtmp://127.0.0.1:${edge.rtmpPort}/live`;
    await assert.rejects(recordRtmp(`${base}/acl`, 1), /ffmpeg failed/);
    await assert.rejects(recordRtmp(`${base}?aclAuth=wrong/acl`, 1), /ffmpeg failed/);
    const played = await recordRtmp(`${base}?aclAuth=k1/acl`, 2);
    assert.equal(played.streams.find((s) => s.codec_type === "video")?.codec_name, "h264");

    // RTSP: the key in the URL's query.
    const rtspProbe = (query: string) =>
      new Deno.Command("ffprobe", {
        args: ["-v", "error", "-rtsp_transport", "tcp", "-show_entries", "stream=codec_name"]
          .concat(["-of", "csv=p=0", `${edge.rtspUrl}/acl${query}`]),
        stdout: "piped",
        stderr: "piped",
      }).output();
    const rtspRefused = await rtspProbe("");
    assert(!rtspRefused.success);
    assert.match(new TextDecoder().decode(rtspRefused.stderr), /403/);
    const rtspPlayed = await rtspProbe("?aclAuth=k1");
    assert.match(new TextDecoder().decode(rtspPlayed.stdout), /h264/);

    // HLS: the key in the master playlist's URL, copied into every variant URL.
    const hls = `${edge.hlsUrl}/acl/acl.m3u8`;
    const refused = await fetch(hls);
    await refused.body?.cancel();
    assert.equal(refused.status, 403);
    const master = await waitFor("the keyed master playlist", async () => {
      const res = await fetch(`${hls}?aclAuth=k1`);
      const text = await res.text();
      return res.status === 200 ? text : undefined;
    }, 15_000);
    const variant = master.split("\n").find((line) => line && !line.startsWith("#"))!;
    assert.match(variant, /[?&]aclAuth=k1$/);
    const media = await fetch(new URL(variant, `${edge.hlsUrl}/acl/`));
    assert.equal(media.status, 200, await media.text());

    const viewer = readRtmp(`${base}?aclAuth=k1/acl`, 30);
    await waitFor(
      "the keyed viewer on the edge",
      () => edge.services.streams.published("acl")?.record ? true : undefined,
    );
    await new Promise((r) => setTimeout(r, 1500));
    const removedAt = Date.now();
    assert.equal(
      (await origin.post("/cdn/stream/access_list/remove", { name: "acl", keys: ["k1"] })).status,
      200,
    );
    await viewer.output();
    const stoppedAfterMs = Date.now() - removedAt;
    assert(stoppedAfterMs < 5000, `the viewer ran ${stoppedAfterMs} ms after its key was removed`);
    assert.deepEqual(
      await json(await edge.post("/cdn/stream/access_list/print", { name: "acl" })),
      [],
    );
    // A list without keys opens to no one until it is deleted.
    await assert.rejects(recordRtmp(`${base}/acl`, 1), /ffmpeg failed/);
    assert.equal(
      (await origin.post("/cdn/stream/access_list/delete", { name: "acl" })).status,
      200,
    );
    assert.equal(
      (await origin.post("/cdn/stream/access_list/delete", { name: "acl" })).status,
      404,
    );
  } finally {
    await cluster.close();
  }
});

Deno.test("cdn: playing <stream>-240p on the edge elects the transcoder node, which encodes the origin's stream at 240p", async () => {
  const cluster = await startCluster("tc", {
    origin: undefined,
    edge: undefined,
    transcoder: cdnConfig("transcoder", { maxEncodings: 1 }),
  });
  const { origin, edge } = cluster;
  try {
    const profile = { video: { width: 0, height: 240, codec: "h264", bitrate: 300, gop: 25 } };
    assert.equal((await origin.post("/cdn/profile/add", { name: "-240p", profile })).status, 200);
    await waitFor("the profile on the edge", async () => {
      const profiles = await json<Record<string, unknown>>(await edge.post("/cdn/profile/print"));
      return profiles["-240p"] ? true : undefined;
    });
    assert.equal((await edge.post("/cdn/profile/add", { name: "-240p", profile })).status, 409);
    const played = await recordRtmp(`rtmp://127.0.0.1:${edge.rtmpPort}/live/tc-240p`, 3);
    const video = played.streams.find((s) => s.codec_type === "video");
    assert.equal(video?.codec_name, "h264");
    assert.equal(video?.height, 240);
    assert(video?.width === 426 || video?.width === 428, `width ${video?.width}`);
    const routes = await json<Record<string, string[]>>(
      await edge.post("/cdn/stream/show_routes", { streamName: "tc-240p" }),
    );
    assert.deepEqual(routes["REQUESTED-PROFILE"], ["-240p"]);
    assert(
      Object.keys(routes).some((key) => /^\d+-PROFILE-/.test(key)),
      JSON.stringify(routes),
    );
    // At its one encoding (cdn.maxEncodings) the transcoder takes no new stream.
    const viewer = readRtmp(`rtmp://127.0.0.1:${edge.rtmpPort}/live/tc-240p`, 30);
    const transcoder = cluster.transcoder!;
    try {
      await waitFor("the transcoder at its limit", async () => {
        const states = await json<string[]>(await transcoder.post("/cdn/show_state"));
        return states[0] === "GROUP_CONNECTIONS_ALLOWED" ? true : undefined;
      });
      assert.equal(
        (await origin.post("/cdn/profile/add", {
          name: "-180p",
          profile: { video: { height: 180 } },
        }))
          .status,
        200,
      );
      await waitFor("the -180p profile on the edge", async () => {
        const profiles = await json<Record<string, unknown>>(await edge.post("/cdn/profile/print"));
        return profiles["-180p"] ? true : undefined;
      });
      // A second edge shares the running encoding: one PROFILE hop, not one per edge.
      const edge2 = await startTestServer(cdnConfig("edge"), undefined, {
        clusterStore: cluster.store,
      });
      try {
        const second = await recordRtmp(`rtmp://127.0.0.1:${edge2.rtmpPort}/live/tc-240p`, 2);
        assert.equal(second.streams.find((s) => s.codec_type === "video")?.height, 240);
        const hops = await json<Record<string, string[]>>(
          await edge2.post("/cdn/stream/show_routes", { streamName: "tc-240p" }),
        );
        assert.equal(
          Object.keys(hops).filter((key) => /-PROFILE-/.test(key)).length,
          1,
          JSON.stringify(hops),
        );
      } finally {
        await edge2.stop();
      }
      const refused = await readRtmp(`rtmp://127.0.0.1:${edge.rtmpPort}/live/tc-180p`, 2).output();
      assert.match(
        new TextDecoder().decode(refused.stderr),
        /Server error: No available transcoders/,
      );
    } finally {
      await stopPublisher(viewer);
    }
    assert.equal(
      (await edge.post("/cdn/enforce_state", { state: "NEW_STREAMS_ALLOWED" })).status,
      200,
    );
    assert.deepEqual(await json(await edge.post("/cdn/show_state")), ["NEW_STREAMS_ALLOWED"]);
    assert.equal(
      (await edge.post("/cdn/enforce_state", { state: "BUSY" })).status,
      400,
    );
    assert.equal(
      (await edge.post("/cdn/profile/modify", {
        name: "-240p",
        profile: { video: { height: 180 } },
      }))
        .status,
      200,
    );
    assert.equal((await edge.post("/cdn/profile/remove", { name: "-360p" })).status, 404);
  } finally {
    await cluster.close();
  }
});

Deno.test("cdn: with no transcoder in the edge's group, a profile is refused with 'No available transcoders'", async () => {
  const cluster = await startCluster("nt", {
    origin: undefined,
    edge: cdnConfig("edge", { groups: ["EU"] }),
    transcoder: cdnConfig("transcoder", { groups: ["US"] }),
  });
  const { edge } = cluster;
  try {
    const profile = { video: { height: 240 } };
    assert.equal((await edge.post("/cdn/profile/add", { name: "-240p", profile })).status, 200);
    const viewer = readRtmp(`rtmp://127.0.0.1:${edge.rtmpPort}/live/nt-240p`, 2);
    const out = await viewer.output();
    assert(!out.success);
    // ffmpeg prints the server's NetStream.Play.Failed description.
    assert.match(new TextDecoder().decode(out.stderr), /Server error: No available transcoders/);
  } finally {
    await cluster.close();
  }
});

Deno.test("cdn: a stopped origin goes PASSIVE, ends its edge viewers, can be removed only once PASSIVE", async () => {
  const cluster = await startCluster("gone", {
    origin: undefined,
    edge: undefined,
    transcoder: undefined,
  });
  const { origin, edge } = cluster;
  let originStopped = false;
  try {
    const viewer = readRtmp(`rtmp://127.0.0.1:${edge.rtmpPort}/live/gone`, 30);
    await waitFor(
      "the edge's pull",
      () => edge.services.streams.published("gone") ? true : undefined,
    );
    const nodes = await json<{ id: string; role: string }[]>(await edge.post("/cdn/show_nodes"));
    const originId = nodes.find((n) => n.role === "ORIGIN")!.id;
    const edgeId = nodes.find((n) => n.role === "EDGE")!.id;
    assert.equal((await edge.post("/cdn/remove_node", { nodeIp: edgeId })).status, 409);
    assert.equal((await edge.post("/cdn/remove_node", { nodeIp: "10.9.9.9:1" })).status, 404);
    await stopPublisher(cluster.publisher);
    const stoppedAt = Date.now();
    await origin.stop();
    originStopped = true;
    // The viewer asked for 30 s: it ends with the origin, not with its own clock.
    await viewer.output();
    const endedAfterMs = Date.now() - stoppedAt;
    assert(
      endedAfterMs < 10_000,
      `the edge's viewer ran ${endedAfterMs} ms after the origin stopped`,
    );
    await waitFor("the origin PASSIVE on the edge", async () => {
      const list = await json<{ id: string; globalState: string }[]>(
        await edge.post("/cdn/show_nodes"),
      );
      return list.find((n) => n.id === originId)?.globalState === "PASSIVE" ? true : undefined;
    }, 5000);
    assert.equal(edge.services.streams.published("gone"), undefined);
    // A route a killed origin could not withdraw goes when the node is removed.
    await cluster.store.put("route", `9-${originId}-0`, {
      stream: "ghost",
      nodeId: originId,
      url: `ws://${originId}`,
      role: "origin",
      tracks: [],
    });
    await waitFor("the ghost route on the edge", async () => {
      const routes = await json<Record<string, string>>(await edge.post("/cdn/show_routes"));
      return Object.values(routes).includes("ghost") ? true : undefined;
    });
    assert.equal((await edge.post("/cdn/remove_node", { nodeIp: originId })).status, 200);
    await waitFor("the ghost route gone", async () => {
      const routes = await json<Record<string, string>>(await edge.post("/cdn/show_routes"));
      return Object.keys(routes).length === 0 ? true : undefined;
    });
    const after = await json<{ id: string }[]>(await edge.post("/cdn/show_nodes"));
    assert(!after.some((n) => n.id === originId));
  } finally {
    if (originStopped) {
      await edge.stop();
      await cluster.store.close();
    } else await cluster.close();
  }
});
