/**
 * The cluster stores (core/cluster/): one behavioural suite run against the in-process store
 * and against Redis (a redis-server of its own per test, on a free 127.0.0.1 port), then the
 * Redis outage: calls fail fast with 503 while it is down, and the store, its watchers and a
 * ClusterView come back by themselves when it returns.
 */
import assert from "node:assert/strict";
import { createClient } from "redis";
import { ClusterView } from "../core/cluster/cluster_view.ts";
import { MemoryClusterStore } from "../core/cluster/memory_store.ts";
import { RedisClusterStore } from "../core/cluster/redis_store.ts";
import type { ClusterChange, ClusterStore, NodeRecord } from "../core/cluster/store.ts";
import { ServiceUnavailableError } from "../core/errors.ts";
import { freePort } from "./helpers/process.ts";
import { type RedisServer, startRedis } from "./helpers/redis_server.ts";

/** The ServiceUnavailableError `call` rejects with (any other outcome fails). */
async function unavailable(call: () => Promise<unknown>): Promise<ServiceUnavailableError> {
  try {
    await call();
  } catch (error) {
    assert.ok(error instanceof ServiceUnavailableError, `rejected with ${error}`);
    return error;
  }
  assert.fail("resolved instead of rejecting with ServiceUnavailableError");
}

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Everything `store` delivers from now on, and a way to wait for one change. */
function collect(store: { watch(listener: (change: ClusterChange) => void): () => void }) {
  const changes: ClusterChange[] = [];
  const waiters = new Set<() => void>();
  const unwatch = store.watch((change) => {
    changes.push(change);
    for (const wake of waiters) wake();
  });
  return {
    changes,
    unwatch,
    /** The first change (already seen or coming) that `match` accepts, within `timeoutMs`. */
    async next(match: (change: ClusterChange) => boolean, timeoutMs = 3000) {
      const deadline = performance.now() + timeoutMs;
      for (;;) {
        const found = changes.find(match);
        if (found) return found;
        const left = deadline - performance.now();
        if (left <= 0) {
          throw new Error(
            `no matching change within ${timeoutMs} ms; ${changes.length} seen, the last: ${
              JSON.stringify(changes.slice(-5))
            }`,
          );
        }
        let timer: ReturnType<typeof setTimeout> | undefined;
        await new Promise<void>((resolve) => {
          waiters.add(resolve);
          timer = setTimeout(resolve, left);
        }).finally(() => clearTimeout(timer));
        waiters.clear();
      }
    },
  };
}

/** Polls `check` until true or `timeoutMs` passes. */
async function waitUntil(check: () => boolean, timeoutMs: number, what: string): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!check()) {
    if (performance.now() > deadline) throw new Error(`${what}: not within ${timeoutMs} ms`);
    await delay(20);
  }
}

function nodeRecord(id: string, streams = 0): NodeRecord {
  return {
    id,
    role: "edge",
    groups: ["g1"],
    url: "ws://127.0.0.1:1",
    version: "test",
    processingState: "NEW_STREAMS_ALLOWED",
    load: { streams, players: 0, transcodes: 0, loadAverage: 0 },
    startedAtMs: 1,
  };
}

/**
 * Two stores on the same cluster state: for memory one shared instance, for Redis two
 * clients of one server.
 */
interface Pair {
  writer: ClusterStore;
  reader: ClusterStore;
  close(): Promise<void>;
}

const backends: { name: string; open(): Promise<Pair> }[] = [
  {
    name: "memory",
    open() {
      const store = new MemoryClusterStore();
      return Promise.resolve({ writer: store, reader: store, close: () => store.close() });
    },
  },
  {
    name: "redis",
    async open() {
      const server = await startRedis();
      const writer = new RedisClusterStore({ url: server.url, expiryCheckMs: 250 });
      const reader = new RedisClusterStore({ url: server.url, expiryCheckMs: 250 });
      await Promise.all([writer.ready(5000), reader.ready(5000)]);
      return {
        writer,
        reader,
        async close() {
          await writer.close();
          await reader.close();
          await server.kill();
        },
      };
    },
  },
];

for (const backend of backends) {
  Deno.test(`${backend.name} store: a heartbeat lists the node alive and tells watchers`, async () => {
    const { writer, reader, close } = await backend.open();
    try {
      const seen = collect(reader);
      await writer.heartbeat(nodeRecord("edge1"), 5000);
      const change = await seen.next((c) => c.type === "node");
      assert.deepStrictEqual(change, {
        type: "node",
        entry: { record: nodeRecord("edge1"), alive: true },
      });
      const { nodes } = await reader.snapshot();
      assert.deepStrictEqual(nodes, [{ record: nodeRecord("edge1"), alive: true }]);
      // A plain refresh is no change; a new load figure is.
      await writer.heartbeat(nodeRecord("edge1"), 5000);
      await writer.heartbeat(nodeRecord("edge1", 3), 5000);
      await seen.next((c) => c.type === "node" && c.entry.record.load.streams === 3);
      assert.deepStrictEqual(seen.changes.length, 2);
      seen.unwatch();
    } finally {
      await close();
    }
  });

  Deno.test(`${backend.name} store: a node without heartbeats expires within its TTL and comes back`, async () => {
    const { writer, reader, close } = await backend.open();
    try {
      const seen = collect(reader);
      const ttlMs = 600;
      await writer.heartbeat(nodeRecord("edge1"), ttlMs);
      const lastBeat = performance.now();
      await seen.next((c) => c.type === "nodeExpired", ttlMs + 500);
      const elapsed = performance.now() - lastBeat;
      assert.ok(elapsed >= ttlMs - 50, `expired after ${elapsed} ms, before the TTL`);
      assert.deepStrictEqual(seen.changes.at(-1), { type: "nodeExpired", id: "edge1" });
      assert.deepStrictEqual(seen.changes.filter((c) => c.type === "nodeExpired").length, 1);
      assert.deepStrictEqual((await reader.snapshot()).nodes, [{
        record: nodeRecord("edge1"),
        alive: false,
      }]);

      await writer.heartbeat(nodeRecord("edge1"), 5000);
      await seen.next((c) => c === seen.changes.at(-1) && c.type === "node" && c.entry.alive);
      assert.deepStrictEqual((await reader.snapshot()).nodes, [{
        record: nodeRecord("edge1"),
        alive: true,
      }]);
      seen.unwatch();
    } finally {
      await close();
    }
  });

  Deno.test(`${backend.name} store: removeNode drops the node once`, async () => {
    const { writer, reader, close } = await backend.open();
    try {
      const seen = collect(reader);
      await writer.heartbeat(nodeRecord("edge1"), 5000);
      await writer.heartbeat(nodeRecord("edge2"), 5000);
      assert.deepStrictEqual(await writer.removeNode("edge1"), true);
      assert.deepStrictEqual(await writer.removeNode("edge1"), false);
      await seen.next((c) => c.type === "nodeRemoved");
      assert.deepStrictEqual((await reader.snapshot()).nodes.map((n) => n.record.id), ["edge2"]);
      await delay(100);
      assert.deepStrictEqual(seen.changes.filter((c) => c.type === "nodeRemoved").length, 1);
      seen.unwatch();
    } finally {
      await close();
    }
  });

  Deno.test(`${backend.name} store: put and delete reach another store's watchers`, async () => {
    const { writer, reader, close } = await backend.open();
    try {
      const seen = collect(reader);
      const value = { stream: "s1", node: "origin1", keys: ["k1"] };
      await writer.put("route", "s1", value);
      await writer.put("acl", "s1", ["k1", "k2"]);
      assert.deepStrictEqual(await seen.next((c) => c.type === "put" && c.kind === "route"), {
        type: "put",
        kind: "route",
        key: "s1",
        value,
      });
      const snapshot = await reader.snapshot();
      assert.deepStrictEqual(snapshot.records.route, new Map([["s1", value]]));
      assert.deepStrictEqual(snapshot.records.acl, new Map([["s1", ["k1", "k2"]]]));
      assert.deepStrictEqual(snapshot.records.profile, new Map());

      assert.deepStrictEqual(await writer.delete("route", "s1"), true);
      assert.deepStrictEqual(await writer.delete("route", "s1"), false);
      await seen.next((c) => c.type === "delete");
      assert.deepStrictEqual((await reader.snapshot()).records.route, new Map());
      await delay(100);
      assert.deepStrictEqual(seen.changes.map((c) => c.type), ["put", "put", "delete"]);
      seen.unwatch();
    } finally {
      await close();
    }
  });

  Deno.test(`${backend.name} store: a ClusterView follows the store`, async () => {
    const { writer, reader, close } = await backend.open();
    try {
      await writer.put("profile", "240p", { video: { height: 240 } });
      await writer.heartbeat(nodeRecord("edge1"), 5000);
      const view = await ClusterView.open(reader);
      try {
        assert.ok(view.synced);
        assert.deepStrictEqual(view.get("profile", "240p"), { video: { height: 240 } });
        assert.deepStrictEqual(view.node("edge1"), { record: nodeRecord("edge1"), alive: true });

        // The view's own watchers run after the change is applied.
        const appliedWhenTold: unknown[] = [];
        const unwatch = view.watch((c) => {
          if (c.type === "put") appliedWhenTold.push(view.get(c.kind, c.key));
        });
        const seen = collect(view);
        await writer.put("acl", "s1", ["k1"]);
        await seen.next((c) => c.type === "put");
        assert.deepStrictEqual(appliedWhenTold, [["k1"]]);
        assert.deepStrictEqual([...view.records("acl")], [["s1", ["k1"]]]);

        await writer.delete("profile", "240p");
        await writer.heartbeat(nodeRecord("edge2"), 400);
        await seen.next((c) => c.type === "nodeExpired" && c.id === "edge2", 1500);
        assert.deepStrictEqual(view.get("profile", "240p"), undefined);
        assert.deepStrictEqual(view.node("edge2")?.alive, false);
        await writer.removeNode("edge2");
        await seen.next((c) => c.type === "nodeRemoved");
        assert.deepStrictEqual(view.nodes().map((n) => n.record.id), ["edge1"]);
        unwatch();
        seen.unwatch();
      } finally {
        view.close();
      }
    } finally {
      await close();
    }
  });
}

const expiryCases = [
  {
    name: "without keyspace events (CONFIG refused) expiry is found by polling",
    extraArgs: ["--rename-command", "CONFIG", ""],
    expiryCheckMs: 200,
  },
  {
    name: "with keyspace events expiry is seen without polling",
    extraArgs: [],
    // A poll far beyond the test: only the `expired` event can report the expiry in time.
    expiryCheckMs: 60_000,
  },
];

for (const { name, extraArgs, expiryCheckMs } of expiryCases) {
  Deno.test(`redis store: ${name}`, async () => {
    const server = await startRedis({ extraArgs });
    const store = new RedisClusterStore({ url: server.url, expiryCheckMs });
    try {
      await store.ready(5000);
      const seen = collect(store);
      await store.heartbeat(nodeRecord("edge1"), 400);
      await seen.next((c) => c.type === "nodeExpired", 400 + 500);
    } finally {
      await store.close();
      await server.kill();
    }
  });
}

Deno.test("redis store: a feed trimmed past the last change read makes a resync", async () => {
  const server = await startRedis();
  const store = new RedisClusterStore({ url: server.url });
  const raw = createClient({ url: server.url });
  try {
    await store.ready(5000);
    await raw.connect();
    const seen = collect(store);
    await store.put("route", "first", 1);
    await seen.next((c) => c.type === "put");
    // 12000 changes in one script: the feed (MAXLEN ~ 10000) drops the oldest of them
    // before the store's read can run.
    await raw.eval(
      `for i = 1, 12000 do
         redis.call('XADD', KEYS[1], 'MAXLEN', '~', '10000', '*', 'c', ARGV[1])
       end`,
      {
        keys: ["cdn:changes"],
        arguments: [JSON.stringify({ type: "delete", kind: "acl", key: "x" })],
      },
    );
    await seen.next((c) => c.type === "resync");
    // After the resync the feed runs on from the newest change.
    await store.put("route", "after", 2);
    await seen.next((c) => c.type === "put" && c.key === "after");
    assert.ok(seen.changes.filter((c) => c.type === "delete").length < 12000);
    seen.unwatch();
  } finally {
    raw.destroy();
    await store.close();
    await server.kill();
  }
});

Deno.test("redis store: separate key prefixes are separate clusters", async () => {
  const server = await startRedis();
  const a = new RedisClusterStore({ url: server.url, keyPrefix: "a:" });
  const b = new RedisClusterStore({ url: server.url, keyPrefix: "b:" });
  try {
    await Promise.all([a.ready(5000), b.ready(5000)]);
    await a.put("route", "s1", 1);
    await a.heartbeat(nodeRecord("edge1"), 5000);
    const snapshot = await b.snapshot();
    assert.deepStrictEqual(snapshot.nodes, []);
    assert.deepStrictEqual(snapshot.records.route.size, 0);
  } finally {
    await a.close();
    await b.close();
    await server.kill();
  }
});

Deno.test("redis store: an outage fails calls fast, then the store, its feed and a view recover", async () => {
  const server = await startRedis();
  const store = new RedisClusterStore({ url: server.url, expiryCheckMs: 250 });
  let other: RedisClusterStore | undefined;
  let view: ClusterView | undefined;
  try {
    await store.ready(5000);
    await store.put("route", "before", { node: "origin1" });
    await store.heartbeat(nodeRecord("edge1"), 5000);
    view = await ClusterView.open(store);
    assert.deepStrictEqual(view.get("route", "before"), { node: "origin1" });
    const seen = collect(store);
    const viewSeen = collect(view);

    await server.kill();
    await waitUntil(() => !store.available, 1000, "available turns false");
    await delay(2000);
    for (
      const [name, call] of [
        ["heartbeat", () => store.heartbeat(nodeRecord("edge1"), 5000)],
        ["put", () => store.put("route", "x", 1)],
        ["delete", () => store.delete("route", "x")],
        ["removeNode", () => store.removeNode("edge1")],
        ["snapshot", () => store.snapshot()],
      ] as const
    ) {
      const started = performance.now();
      const error = await unavailable(call);
      const ms = performance.now() - started;
      assert.ok(ms < 1000, `${name} took ${ms} ms to fail`);
      assert.ok(/Redis/.test(error.message), error.message);
      assert.deepStrictEqual(error.status, 503);
    }
    assert.deepStrictEqual(store.available, false);
    // The view keeps answering from what it had.
    assert.deepStrictEqual(view.get("route", "before"), { node: "origin1" });

    // Redis comes back empty (no persistence); another node writes before ours reconnects.
    await server.start();
    other = new RedisClusterStore({ url: server.url });
    await other.ready(5000);
    await other.put("route", "during", { node: "origin2" });
    await other.heartbeat(nodeRecord("edge9"), 5000);

    await store.ready(5000);
    await seen.next((c) => c.type === "resync");
    await store.heartbeat(nodeRecord("edge1"), 5000);
    await viewSeen.next((c) => c.type === "resync");
    await waitUntil(() => view!.node("edge1") !== undefined, 2000, "the view lists edge1 again");
    assert.deepStrictEqual(view.get("route", "during"), { node: "origin2" });
    assert.deepStrictEqual(view.get("route", "before"), undefined);
    assert.deepStrictEqual(view.node("edge9")?.alive, true);
    assert.ok(view.synced);

    // The feed runs again: a write after the return reaches the view.
    await other.put("acl", "s1", ["k"]);
    await viewSeen.next((c) => c.type === "put" && c.kind === "acl");
    assert.deepStrictEqual(view.get("acl", "s1"), ["k"]);
    seen.unwatch();
    viewSeen.unwatch();
  } finally {
    view?.close();
    await other?.close();
    await store.close();
    await server.kill();
  }
});

Deno.test("redis store: created while Redis is down, it connects when Redis starts", async () => {
  const port = freePort();
  const store = new RedisClusterStore({ url: `redis://127.0.0.1:${port}` });
  let server: RedisServer | undefined;
  let view: ClusterView | undefined;
  try {
    assert.deepStrictEqual(store.available, false);
    const error = await unavailable(() => store.snapshot());
    assert.ok(error.message.includes(`127.0.0.1:${port}`), error.message);
    await unavailable(() => store.ready(300));
    // A view opened meanwhile starts empty and loads the state once it can.
    view = await ClusterView.open(store);
    assert.equal(view.synced, false);
    server = await startRedis({ port });
    await store.ready(5000);
    await store.heartbeat(nodeRecord("edge1"), 5000);
    assert.deepStrictEqual((await store.snapshot()).nodes.length, 1);
    await waitUntil(() => view!.synced, 2000, "the view loads the state");
    await waitUntil(() => view!.node("edge1") !== undefined, 2000, "the view lists edge1");
  } finally {
    view?.close();
    await store.close();
    await server?.kill();
  }
});

Deno.test("memory store: closed, it rejects calls", async () => {
  const store = new MemoryClusterStore();
  await store.close();
  assert.deepStrictEqual(store.available, false);
  await unavailable(() => store.put("route", "a", 1));
});

Deno.test("redis store: closed while Redis is down, it stops retrying", async () => {
  const store = new RedisClusterStore({ url: `redis://127.0.0.1:${freePort()}` });
  await delay(300); // a few failed connection attempts
  await store.close();
  assert.equal(store.available, false);
  const error = await unavailable(() => store.heartbeat(nodeRecord("edge1"), 1000));
  assert.match(error.message, /closed/);
});
