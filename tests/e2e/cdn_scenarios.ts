/**
 * The CDN as users run it: three server processes (origin, edge, transcoder) started like
 * `deno task start` with MEDIASERVER_* variables, sharing a `redis-server`; ffmpeg publishes
 * RTMP to the origin and the Web SDK in headless Chromium plays from the edge. Then access
 * lists, a profile encoded by the transcoder, and faults: Redis killed and restarted, the
 * origin killed and restarted, the edge killed. Runs inside a loopback-only network namespace
 * as root; `cdn_test.ts` re-executes this file there.
 */
import assert from "node:assert/strict";
import type { Page } from "playwright-core";
// Importing the package's manifest makes Deno install the package (and so its bundle).
import websdkPackage from "@flashphoner/websdk/package.json" with { type: "json" };
import { publishRtmp, stopPublisher } from "../helpers/ffmpeg_rtmp.ts";
import { probe } from "../helpers/media_fixtures.ts";
import { RedisServer } from "../helpers/redis_server.ts";
import { ServerProcess } from "../helpers/server_process.ts";
import { childrenNamed } from "../helpers/children.ts";
import { startBrowser } from "./browser.ts";
import { netnsEnv } from "./netns.ts";
import { call, type InboundStats } from "./webrtc_driver.ts";

/** Longest wait for a state in the page or a server, in ms. */
const waitMs = 15_000;
/** The nodes' liveness settings (short, so faults show within seconds). */
const heartbeatMs = 300;
const nodeTtlMs = 1500;
const pullGraceMs = 2000;

type Role = "origin" | "edge" | "transcoder";

async function until<T>(
  what: string,
  read: () => Promise<T>,
  ok: (value: T) => boolean,
  timeoutMs = waitMs,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await read();
    if (ok(value)) return value;
    if (Date.now() > deadline) {
      throw new Error(
        `timed out after ${timeoutMs} ms waiting for ${what}: ${JSON.stringify(value)}`,
      );
    }
    await new Promise((r) => setTimeout(r, 100));
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A REST answer: status and parsed body (the text when it is not JSON). */
interface Answer {
  status: number;
  body: unknown;
}

/** One node of the CDN: a server process of its role on the shared Redis. */
class CdnNode extends ServerProcess {
  readonly role: Role;

  constructor(role: Role, redis: RedisServer, dir: string, udpPortMin: number) {
    super(role, dir, {
      log: { level: "info" },
      media: { udpPortMin, udpPortMax: udpPortMin + 199 },
      cdn: { enabled: true, role, heartbeatMs, nodeTtlMs, pullGraceMs },
      cluster: { redisUrl: redis.url },
    });
    this.role = role;
  }

  /** Its id in the CDN: the host and port of its CDN listener. */
  get id(): string {
    return `127.0.0.1:${this.ports.cdn}`;
  }

  /** POSTs `body` to `/rest-api<path>`. */
  async post(path: string, body: unknown = {}): Promise<Answer> {
    const res = await fetch(`${this.restUrl}/rest-api${path}`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body),
    });
    const text = await res.text();
    let parsed: unknown = text;
    try {
      parsed = text === "" ? "" : JSON.parse(text);
    } catch {
      // Not JSON: kept as text.
    }
    return { status: res.status, body: parsed };
  }

  /** POSTs and asserts 200; returns the body. */
  async ok<T>(path: string, body: unknown = {}): Promise<T> {
    const answer = await this.post(path, body);
    assert.equal(answer.status, 200, `${this.role} ${path}: ${JSON.stringify(answer.body)}`);
    return answer.body as T;
  }
}

interface NodeView {
  id: string;
  globalState: string;
  role: string;
}

/** A played stream's last status as the page recorded it. */
function lastStatus(page: Page, key: string): Promise<{ status: string; info: string } | null> {
  return page.evaluate((key) => {
    const record = (globalThis as unknown as {
      streams: Record<string, { lastStatus: { status: string; info: string } | null }>;
    }).streams[key];
    return record?.lastStatus ?? null;
  }, key);
}

/** Plays `name` as stream `key` of session `session`; resolves with the first end or PLAYING. */
function play(page: Page, session: string, key: string, name: string) {
  return call<{ status: string; info: string }>(
    page,
    "startStream",
    session,
    key,
    "play",
    { name },
    ["PLAYING", "FAILED", "STOPPED"],
  );
}

/** Frames decoded by stream `key` over 2 s; asserts > 25 and returns the later figures. */
async function decodes(page: Page, key: string): Promise<InboundStats> {
  await until(
    `the first decoded frame of ${key}`,
    () => call<InboundStats>(page, "inboundStats", key),
    (s) => s.framesDecoded > 0,
  );
  const before = await call<InboundStats>(page, "inboundStats", key);
  await sleep(2000);
  const after = await call<InboundStats>(page, "inboundStats", key);
  assert.ok(
    after.framesDecoded > before.framesDecoded + 25,
    `${key}: ${JSON.stringify({ before, after })}`,
  );
  return after;
}

/** Stops stream `key` in the page and waits for its STOPPED. */
async function stopPlay(page: Page, key: string): Promise<void> {
  await call(page, "callStream", key, "stop");
  await until(`${key} STOPPED`, () => lastStatus(page, key), (s) => s?.status === "STOPPED");
}

/** Waits until `node` lists the three nodes ACTIVE; returns them sorted by role. */
function threeActive(node: CdnNode, timeoutMs = waitMs): Promise<NodeView[]> {
  return until(
    `three ACTIVE nodes on the ${node.role}`,
    async () =>
      (await node.ok<NodeView[]>("/cdn/show_nodes")).sort((a, b) => a.role < b.role ? -1 : 1),
    (nodes) => nodes.length === 3 && nodes.every((n) => n.globalState === "ACTIVE"),
    timeoutMs,
  );
}

/** Waits until `node`'s show_routes lists each of `names` (as a route's stream name). */
function routesListing(node: CdnNode, names: string[], timeoutMs = waitMs) {
  return until(
    `routes of ${names.join(", ")} on the ${node.role}`,
    () => node.ok<Record<string, string>>("/cdn/show_routes"),
    (routes) => names.every((name) => Object.values(routes).includes(name)),
    timeoutMs,
  );
}

/** The globalState `node` shows for the node `id` (undefined when it does not list it). */
async function stateOf(node: CdnNode, id: string): Promise<string | undefined> {
  return (await node.ok<NodeView[]>("/cdn/show_nodes")).find((n) => n.id === id)?.globalState;
}

Deno.test("CDN of three server processes on Redis, played by the Web SDK in Chromium", async (t) => {
  if (Deno.env.get(netnsEnv) !== "1") {
    throw new Error(`run through tests/e2e/cdn_test.ts (needs a loopback-only netns)`);
  }
  assert.equal(websdkPackage.version, "2.0.276");
  const suiteStarted = performance.now();
  const dir = await Deno.makeTempDir({ prefix: "cdn-e2e-" });
  const redis = new RedisServer();
  const origin = new CdnNode("origin", redis, dir, 40000);
  const edge = new CdnNode("edge", redis, dir, 40200);
  const transcoder = new CdnNode("transcoder", redis, dir, 40400);
  const servers = [origin, edge, transcoder];
  const publishers: Deno.ChildProcess[] = [];
  const publish = (name: string) => {
    const child = publishRtmp(`${origin.rtmpUrl}/${name}`, 120);
    publishers.push(child);
    return child;
  };
  let browser: Awaited<ReturnType<typeof startBrowser>> | undefined;
  let failed = false;
  // Each step builds on the state the last one left: the first failure ends the run.
  const step = async (name: string, fn: () => Promise<void>) => {
    if (!await t.step(name, fn)) throw new Error(`step failed: ${name}`);
  };
  try {
    await redis.start();
    await Promise.all(servers.map((s) => s.start()));
    console.log(`bench: three servers up in ${Math.round(performance.now() - suiteStarted)} ms`);
    browser = await startBrowser("cdn-chromium-", new URL("./webrtc_page.html", import.meta.url));
    const page = await browser.open();
    await call(page, "openSession", "plain", edge.wsUrl);
    await call(page, "openSession", "keyed", edge.wsUrl, { aclAuth: "k1" });

    await step(
      "ffmpeg publishes to the origin; the SDK and an RTMP player get it on the edge; every node agrees on nodes and routes",
      async () => {
        publish("cam");
        await routesListing(edge, ["cam"]);
        const played = await play(page, "plain", "cam-1", "cam");
        assert.equal(played.status, "PLAYING", played.info);
        const before = await call<InboundStats>(page, "inboundStats", "cam-1");
        const stats = await decodes(page, "cam-1");
        assert.deepEqual([stats.frameWidth, stats.frameHeight], [640, 360]);
        assert.equal(stats.audioMime, "audio/opus");
        assert.ok(stats.audioPackets > before.audioPackets + 10, JSON.stringify({ before, stats }));

        const file = `${dir}/edge-rtmp.flv`;
        const read = await new Deno.Command("ffmpeg", {
          args: ["-hide_banner", "-nostdin", "-loglevel", "error", "-rw_timeout", "8000000"]
            .concat(["-i", `${edge.rtmpUrl}/cam`, "-t", "2", "-c", "copy", "-y", file]),
          stdout: "null",
          stderr: "piped",
        }).output();
        assert.ok(read.success, new TextDecoder().decode(read.stderr));
        const probed = await probe(file);
        assert.deepEqual(probed.streams.map((s) => s.codec_name).sort(), ["aac", "h264"]);
        assert.ok(probed.duration >= 1.5, `the RTMP player got ${probed.duration} s`);

        const ids = servers.map((s) => s.id).sort();
        let routes: Record<string, string> | undefined;
        for (const node of servers) {
          const nodes = await threeActive(node);
          assert.deepEqual(nodes.map((n) => n.role), ["EDGE", "ORIGIN", "TRANSCODER"]);
          assert.deepEqual(nodes.map((n) => n.id).sort(), ids);
          const mine = await node.ok<Record<string, string>>("/cdn/show_routes");
          if (routes) assert.deepEqual(mine, routes, `${node.role}'s routes`);
          routes = mine;
        }
        assert.deepEqual(Object.values(routes!), ["cam"]);
        await stopPlay(page, "cam-1");
      },
    );

    await step(
      "an access list set on the origin refuses a keyless SDK viewer on the edge, admits the key, and stops its viewer when the key is removed",
      async () => {
        await origin.ok("/cdn/stream/access_list/add", { name: "cam", keys: ["k1"] });
        await until(
          "the list on the edge",
          () => edge.ok<string[]>("/cdn/stream/access_list/print", { name: "cam" }),
          (keys) => keys.includes("k1"),
        );
        const refused = await play(page, "plain", "acl-none", "cam");
        assert.deepEqual(refused, { status: "FAILED", info: "restricted access" });

        const admitted = await play(page, "keyed", "acl-k1", "cam");
        assert.equal(admitted.status, "PLAYING", admitted.info);
        await decodes(page, "acl-k1");

        const removedAt = performance.now();
        await origin.ok("/cdn/stream/access_list/remove", { name: "cam", keys: ["k1"] });
        const stopped = await until(
          "the keyed viewer stopped",
          () => lastStatus(page, "acl-k1"),
          (s) => s?.status === "FAILED" || s?.status === "STOPPED",
          5000,
        );
        assert.equal(stopped?.info, "restricted access");
        console.log(
          `bench: viewer stopped ${
            Math.round(performance.now() - removedAt)
          } ms after its key was removed`,
        );
        await origin.ok("/cdn/stream/access_list/delete", { name: "cam" });
        await until(
          "the list gone on the edge",
          () => edge.ok<string[]>("/cdn/stream/access_list/print", { name: "cam" }),
          (keys) => keys.length === 0,
        );
      },
    );

    await step(
      "<stream>-240p plays on the edge at 240p, encoded by the transcoder node",
      async () => {
        await origin.ok("/cdn/profile/add", {
          name: "-240p",
          profile: { video: { width: 0, height: 240, codec: "h264" } },
        });
        await until(
          "the profile on the edge",
          () => edge.ok<Record<string, unknown>>("/cdn/profile/print"),
          (profiles) => "-240p" in profiles,
        );
        const played = await play(page, "plain", "cam-240p", "cam-240p");
        assert.equal(played.status, "PLAYING", played.info);
        await until(
          "240-line frames",
          () => call<InboundStats>(page, "inboundStats", "cam-240p"),
          (s) => s.frameHeight === 240,
        );
        const stats = await decodes(page, "cam-240p");
        assert.equal(stats.frameHeight, 240);
        assert.ok(stats.frameWidth >= 426 && stats.frameWidth <= 428, `width ${stats.frameWidth}`);
        const routes = await edge.ok<Record<string, string[]>>("/cdn/stream/show_routes", {
          streamName: "cam-240p",
        });
        const hops = Object.keys(routes);
        assert.ok(hops.some((h) => h === `0-STREAM-${origin.id}`), JSON.stringify(routes));
        assert.ok(hops.some((h) => h === `1-PROFILE-${transcoder.id}`), JSON.stringify(routes));
        assert.deepEqual(routes["REQUESTED-PROFILE"], ["-240p"]);
        await stopPlay(page, "cam-240p");
      },
    );

    await step(
      "Redis killed: a running viewer keeps playing, new routes fail; Redis back: nodes re-announce and the new route plays",
      async () => {
        // A second stream, published before the outage, with no viewer yet: no pull exists.
        publish("late");
        await routesListing(edge, ["cam", "late"]);
        const played = await play(page, "plain", "cam-2", "cam");
        assert.equal(played.status, "PLAYING", played.info);
        await decodes(page, "cam-2");

        await redis.kill();
        const before = await call<InboundStats>(page, "inboundStats", "cam-2");
        const killedAt = performance.now();
        const refused = await until(
          "profile/add answering 503 on the edge",
          () =>
            edge.post("/cdn/profile/add", { name: "-180p", profile: { video: { height: 180 } } }),
          (answer) => answer.status !== 200,
          5000,
        );
        assert.equal(refused.status, 503, JSON.stringify(refused.body));
        assert.equal(
          (await origin.post("/cdn/profile/add", {
            name: "-180p",
            profile: { video: { height: 180 } },
          }))
            .status,
          503,
        );
        const late = await play(page, "plain", "late-1", "late");
        assert.equal(late.status, "FAILED", late.info);
        assert.match(late.info, /unreachable/);
        // The running viewer went on decoding through the outage (25 frames/s published).
        await sleep(Math.max(0, 3000 - (performance.now() - killedAt)));
        const during = await call<InboundStats>(page, "inboundStats", "cam-2");
        assert.ok(
          during.framesDecoded > before.framesDecoded + 60,
          JSON.stringify({ before, during, ms: Math.round(performance.now() - killedAt) }),
        );
        assert.equal((await lastStatus(page, "cam-2"))?.status, "PLAYING");

        await redis.start();
        const restartedAt = performance.now();
        // The restarted Redis is empty: the nodes and routes in it were announced again.
        await until(
          "three nodes and two routes in the restarted Redis",
          () => Promise.all([redis.cli("SCARD", "cdn:nodes"), redis.cli("HLEN", "cdn:route")]),
          (counts) => counts[0] === "3" && counts[1] === "2",
          8000,
        );
        // Each node's cache still shows the state from before the outage until its store is
        // back: a write it accepts says it is.
        for (const node of servers) {
          const name = `-${node.role}`;
          await until(
            `the ${node.role} writing to the cluster again`,
            () => node.post("/cdn/profile/add", { name, profile: { video: { height: 144 } } }),
            (answer) => answer.status === 200,
            8000,
          );
          await node.ok("/cdn/profile/remove", { name });
        }
        for (const node of servers) await threeActive(node, 8000);
        for (const node of servers) await routesListing(node, ["cam", "late"], 8000);
        console.log(
          `bench: nodes and routes back on every node ${
            Math.round(performance.now() - restartedAt)
          } ms after Redis restarted`,
        );
        const replayed = await play(page, "plain", "late-2", "late");
        assert.equal(replayed.status, "PLAYING", replayed.info);
        await decodes(page, "late-2");
        await stopPlay(page, "late-2");
      },
    );

    await step(
      "the origin killed: the edge's viewer ends, the origin goes PASSIVE; restarted and republished, the stream plays again",
      async () => {
        await origin.kill();
        const killedAt = performance.now();
        const ended = await until(
          "the edge's viewer to end",
          () => lastStatus(page, "cam-2"),
          (s) => s?.status === "STOPPED" || s?.status === "FAILED",
          5000,
        );
        const endedMs = Math.round(performance.now() - killedAt);
        await until(
          "the origin PASSIVE on the edge",
          () => stateOf(edge, origin.id),
          (state) => state === "PASSIVE",
          nodeTtlMs + 2000,
        );
        console.log(
          `bench: origin killed: viewer ${ended?.status} (${ended?.info}) after ${endedMs} ms, PASSIVE after ${
            Math.round(performance.now() - killedAt)
          } ms`,
        );
        for (const child of publishers.splice(0)) await stopPublisher(child);

        await origin.start();
        await until(
          "the origin ACTIVE again on the edge",
          () => stateOf(edge, origin.id),
          (state) => state === "ACTIVE",
        );
        // The routes its killed run left are gone by the time it is ACTIVE again.
        assert.deepEqual(await edge.ok("/cdn/show_routes"), {});
        publish("cam");
        await routesListing(edge, ["cam"]);
        const played = await play(page, "plain", "cam-3", "cam");
        assert.equal(played.status, "PLAYING", played.info);
        await decodes(page, "cam-3");
        // The stream not published again is no longer offered by the origin.
        const routes = await edge.ok<Record<string, string>>("/cdn/show_routes");
        assert.deepEqual(Object.values(routes).sort(), ["cam"], JSON.stringify(routes));
        await stopPlay(page, "cam-3");
      },
    );

    await step(
      "the edge killed: it goes PASSIVE on the origin, which removes it then (and refuses to remove an ACTIVE node)",
      async () => {
        await edge.kill();
        const killedAt = performance.now();
        await until(
          "the edge PASSIVE on the origin",
          () => stateOf(origin, edge.id),
          (state) => state === "PASSIVE",
          nodeTtlMs + 2000,
        );
        console.log(
          `bench: edge PASSIVE on the origin ${
            Math.round(performance.now() - killedAt)
          } ms after its kill`,
        );
        const active = await origin.post("/cdn/remove_node", { nodeIp: transcoder.id });
        assert.equal(active.status, 409, JSON.stringify(active.body));
        await origin.ok("/cdn/remove_node", { nodeIp: edge.id });
        const nodes = await origin.ok<NodeView[]>("/cdn/show_nodes");
        assert.deepEqual(nodes.map((n) => n.id).sort(), [origin.id, transcoder.id].sort());
        assert.equal((await origin.post("/cdn/remove_node", { nodeIp: edge.id })).status, 404);
      },
    );
  } catch (err) {
    failed = true;
    for (const server of servers) console.error(await server.tail(40));
    console.error(`the servers' logs are kept in ${dir}`);
    throw err;
  } finally {
    await browser?.close();
    for (const child of publishers) await stopPublisher(child);
    // SIGTERM: the servers leave the CDN as they would on a normal stop.
    await Promise.all(servers.map((s) => s.stop()));
    await redis.kill();
    if (!failed) await Deno.remove(dir, { recursive: true });
  }
  for (const name of ["redis-server", "ffmpeg", "deno", "chromium"]) {
    assert.equal(childrenNamed(name), 0, `a ${name} process is left`);
  }
  console.log(`bench: cdn suite ${Math.round(performance.now() - suiteStarted)} ms`);
});
