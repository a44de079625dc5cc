/**
 * The Redis `ClusterStore` (`cluster.redisUrl`). Keys, under a prefix (default `cdn:`):
 * - `<p>nodes`: set of node ids;
 * - `<p>node:<id>`: hash {record: JSON, alive: "1"|"0" as last announced on the feed},
 *   kept until removeNode;
 * - `<p>alive:<id>`: the node's liveness, set with a TTL by each heartbeat;
 * - `<p>route`, `<p>acl`, `<p>profile`: one hash per record kind, key → JSON;
 * - `<p>changes`: the change feed, a Stream (MAXLEN ~ 10000) with one field `c` = the change
 *   as JSON, appended by the same Lua script as the write it describes (atomic).
 * Each store reads the feed with XREAD BLOCK from the last id it saw; after a reconnect, or
 * when its last id was trimmed, it emits {type:"resync"}. A node's expiry is put on the feed
 * by whichever store notices first (keyspace `expired` event, or a periodic check) through a
 * script that writes it once.
 */
import { createClient, ErrorReply } from "redis";
import { ServiceUnavailableError } from "../errors.ts";
import type { Logger } from "../log.ts";
import {
  type ClusterChange,
  type ClusterSnapshot,
  type ClusterStore,
  type NodeEntry,
  type NodeRecord,
  type RecordKind,
  recordKinds,
} from "./store.ts";
import { Watchers } from "./watchers.ts";

/** Options of RedisClusterStore. */
export interface RedisClusterStoreOptions {
  /** `redis://[user:password@]host:port[/db]` or `rediss://…`. */
  url: string;
  /** Prefix of every key; stores sharing a prefix share a cluster. Default `cdn:`. */
  keyPrefix?: string;
  /** How often the store looks for nodes whose liveness ran out, in ms; default 1000. */
  expiryCheckMs?: number;
  /** A command without an answer for this long fails as unavailable, in ms; default 2000. */
  commandTimeoutMs?: number;
  log?: Logger;
}

/** Longest wait between two reconnection attempts, in ms. */
const reconnectMaxDelayMs = 1000;
/** How long one XREAD waits for changes before it is issued again, in ms. */
const feedBlockMs = 5000;
/** Most changes one XREAD returns. */
const feedBatchSize = 500;
/** Approximate length the change feed is trimmed to. */
const feedMaxLength = 10_000;
/** Pause after an unexpected feed error on a live connection, in ms (no hot loop). */
const feedRetryDelayMs = 500;

/** Sets a node's record and liveness; appends ARGV[4] when the record or liveness changed. */
const heartbeatScript = `
redis.call('SADD', KEYS[1], ARGV[1])
local old = redis.call('HMGET', KEYS[2], 'record', 'alive')
redis.call('HSET', KEYS[2], 'record', ARGV[2], 'alive', '1')
redis.call('SET', KEYS[3], '1', 'PX', ARGV[3])
if old[1] ~= ARGV[2] or old[2] ~= '1' then
  redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[5], '*', 'c', ARGV[4])
end
return 0`;

/** Removes a node; appends ARGV[2] and returns 1 when there was one. */
const removeNodeScript = `
local member = redis.call('SREM', KEYS[1], ARGV[1])
redis.call('DEL', KEYS[3])
local record = redis.call('DEL', KEYS[2])
if member == 0 and record == 0 then return 0 end
redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[3], '*', 'c', ARGV[2])
return 1`;

/** Sets a record and appends its change. */
const putScript = `
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[4], '*', 'c', ARGV[3])
return 0`;

/** Deletes a record; appends its change and returns 1 when there was one. */
const deleteScript = `
if redis.call('HDEL', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[3], '*', 'c', ARGV[2])
return 1`;

/**
 * Marks the nodes (ARGV[3], or all) whose liveness key is gone but which were last announced
 * alive, and appends their expiry once: stores racing on the same expiry write it once.
 */
const expireScript = `
local ids = ARGV[3] and {ARGV[3]} or redis.call('SMEMBERS', KEYS[1])
local expired = 0
for _, id in ipairs(ids) do
  local node = ARGV[1] .. 'node:' .. id
  if redis.call('HGET', node, 'alive') == '1' and redis.call('EXISTS', ARGV[1] .. 'alive:' .. id) == 0 then
    redis.call('HSET', node, 'alive', '0')
    redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[2], '*', 'c', cjson.encode({type = 'nodeExpired', id = id}))
    expired = expired + 1
  end
end
return expired`;

/** The whole state in one atomic read: {[record, alive]…} then one HGETALL per kind. */
const snapshotScript = `
local nodes = {}
for _, id in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local record = redis.call('HGET', ARGV[1] .. 'node:' .. id, 'record')
  if record then
    table.insert(nodes, {record, redis.call('EXISTS', ARGV[1] .. 'alive:' .. id)})
  end
end
local out = {nodes}
for i = 2, #ARGV do table.insert(out, redis.call('HGETALL', ARGV[1] .. ARGV[i])) end
return out`;

type RedisClient = ReturnType<typeof createClient>;

/** One XREAD answer, as node-redis shapes it (RESP2). */
type FeedReply = { name: string; messages: { id: string; message: Record<string, string> }[] }[];

/**
 * `ClusterStore` on Redis. Three connections: commands, the blocking feed reader, and the
 * keyspace-event subscriber. Nothing is queued while Redis is unreachable: every call
 * rejects at once with `ServiceUnavailableError`, and the connections come back by
 * themselves (retrying at most every second).
 */
export class RedisClusterStore implements ClusterStore {
  #client: RedisClient;
  #reader: RedisClient;
  #subscriber: RedisClient;
  #prefix: string;
  #keys: { nodes: string; changes: string };
  #host: string;
  #db: number;
  #log?: Logger;
  #watchers: Watchers;
  #closed = false;
  /** The id of the last feed entry read; valid while `#feedLive`. */
  #lastId = "0-0";
  /** The reader is positioned on the feed: nothing written since has been or will be missed. */
  #feedLive = false;
  /** Set once the feed was first positioned: losing it later is a resync. */
  #feedStarted = false;
  /** Resolved when a connection becomes ready or the store closes (the feed loop waits). */
  #wake = Promise.withResolvers<void>();
  #reportedDown = false;
  #expiryTimer: ReturnType<typeof setInterval>;
  #feedLoop: Promise<void>;

  constructor(options: RedisClusterStoreOptions) {
    const url = new URL(options.url);
    this.#host = url.host;
    this.#db = Number(url.pathname.slice(1) || 0);
    this.#prefix = options.keyPrefix ?? "cdn:";
    this.#keys = { nodes: `${this.#prefix}nodes`, changes: `${this.#prefix}changes` };
    this.#log = options.log;
    this.#watchers = new Watchers(options.log);
    const socket = {
      reconnectStrategy: (retries: number) => Math.min(50 * 2 ** retries, reconnectMaxDelayMs),
    };
    this.#client = createClient({
      url: options.url,
      disableOfflineQueue: true,
      socket,
      commandOptions: { timeout: options.commandTimeoutMs ?? 2000 },
    });
    // The reader blocks on XREAD; a longer wait than the block time means a dead link.
    this.#reader = createClient({
      url: options.url,
      disableOfflineQueue: true,
      socket,
      commandOptions: { timeout: feedBlockMs + (options.commandTimeoutMs ?? 2000) },
    });
    this.#subscriber = createClient({ url: options.url, disableOfflineQueue: true, socket });

    this.#client.on("error", (error: Error) => this.#onConnectionError(error));
    this.#reader.on("error", () => this.#onReaderDown());
    this.#subscriber.on("error", () => {/* reported by the command connection */});
    this.#client.on("ready", () => this.#onClientReady());
    this.#reader.on("ready", () => this.#wakeFeed());

    // connect() resolves at the first success and keeps retrying until then.
    for (const connection of [this.#client, this.#reader]) {
      connection.connect().catch(() => {/* closed before it ever connected */});
    }
    // Subscribed once; node-redis subscribes again by itself after each reconnect.
    this.#subscriber.connect()
      .then(() =>
        this.#subscriber.subscribe(
          `__keyevent@${this.#db}__:expired`,
          (key: string) => this.#onKeyExpired(key),
        )
      )
      .catch(() => {/* closed meanwhile */});
    this.#expiryTimer = setInterval(() => this.#checkExpiries(), options.expiryCheckMs ?? 1000);
    this.#feedLoop = this.#readFeed();
  }

  /** True while the command connection is ready and the change feed is being followed. */
  get available(): boolean {
    return !this.#closed && this.#client.isReady && this.#feedLive;
  }

  /**
   * Resolves once the store is available; rejects with `ServiceUnavailableError` when it is
   * not within `timeoutMs` (Redis unreachable at startup).
   */
  async ready(timeoutMs: number): Promise<void> {
    const deadline = performance.now() + timeoutMs;
    while (!this.available) {
      if (this.#closed || performance.now() >= deadline) throw this.#unavailable();
      let timer: ReturnType<typeof setTimeout> | undefined;
      await Promise.race([
        this.#wake.promise,
        new Promise((resolve) => timer = setTimeout(resolve, 50)),
      ]);
      clearTimeout(timer);
    }
  }

  heartbeat(node: NodeRecord, ttlMs: number): Promise<void> {
    const entry: NodeEntry = { record: node, alive: true };
    return this.#command(async () => {
      await this.#client.eval(heartbeatScript, {
        keys: [
          this.#keys.nodes,
          this.#nodeKey(node.id),
          this.#aliveKey(node.id),
          this.#keys.changes,
        ],
        arguments: [
          node.id,
          JSON.stringify(node),
          String(Math.max(1, Math.round(ttlMs))),
          JSON.stringify({ type: "node", entry } satisfies ClusterChange),
          String(feedMaxLength),
        ],
      });
    });
  }

  removeNode(id: string): Promise<boolean> {
    return this.#command(async () => {
      const removed = await this.#client.eval(removeNodeScript, {
        keys: [this.#keys.nodes, this.#nodeKey(id), this.#aliveKey(id), this.#keys.changes],
        arguments: [
          id,
          JSON.stringify({ type: "nodeRemoved", id } satisfies ClusterChange),
          String(feedMaxLength),
        ],
      });
      return removed === 1;
    });
  }

  put(kind: RecordKind, key: string, value: unknown): Promise<void> {
    const json = JSON.stringify(value);
    if (json === undefined) {
      return Promise.reject(new TypeError(`cluster record ${kind}/${key} is not JSON`));
    }
    return this.#command(async () => {
      await this.#client.eval(putScript, {
        keys: [this.#prefix + kind, this.#keys.changes],
        arguments: [
          key,
          json,
          JSON.stringify({ type: "put", kind, key, value: JSON.parse(json) }),
          String(feedMaxLength),
        ],
      });
    });
  }

  delete(kind: RecordKind, key: string): Promise<boolean> {
    return this.#command(async () => {
      const deleted = await this.#client.eval(deleteScript, {
        keys: [this.#prefix + kind, this.#keys.changes],
        arguments: [
          key,
          JSON.stringify({ type: "delete", kind, key } satisfies ClusterChange),
          String(feedMaxLength),
        ],
      });
      return deleted === 1;
    });
  }

  snapshot(): Promise<ClusterSnapshot> {
    return this.#command(async () => {
      const [nodes, ...hashes] = await this.#client.eval(snapshotScript, {
        keys: [this.#keys.nodes],
        arguments: [this.#prefix, ...recordKinds],
      }) as [[string, number][], ...string[][]];
      const records = {} as ClusterSnapshot["records"];
      recordKinds.forEach((kind, i) => {
        const map = new Map<string, unknown>();
        const flat = hashes[i];
        for (let j = 0; j < flat.length; j += 2) map.set(flat[j], JSON.parse(flat[j + 1]));
        records[kind] = map;
      });
      return {
        nodes: nodes.map(([record, alive]) => ({ record: JSON.parse(record), alive: alive === 1 })),
        records,
      };
    });
  }

  watch(listener: (change: ClusterChange) => void): () => void {
    return this.#watchers.add(listener);
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    clearInterval(this.#expiryTimer);
    this.#watchers.clear();
    this.#wake.resolve();
    // destroy(), not close(): close() would wait for the blocked XREAD to time out.
    for (const connection of [this.#client, this.#reader, this.#subscriber]) {
      if (connection.isOpen) connection.destroy();
    }
    await this.#feedLoop;
  }

  #nodeKey(id: string): string {
    return `${this.#prefix}node:${id}`;
  }

  #aliveKey(id: string): string {
    return `${this.#prefix}alive:${id}`;
  }

  #unavailable(cause?: unknown): ServiceUnavailableError {
    if (this.#closed) return new ServiceUnavailableError("the cluster store is closed");
    const reason = cause instanceof Error ? `: ${cause.message}` : "";
    return new ServiceUnavailableError(
      `Redis at ${this.#host} (cluster state) is unreachable${reason}`,
      { cause },
    );
  }

  /**
   * Runs a command when the store is available. A failure of the link (offline, closed,
   * timed out) becomes `ServiceUnavailableError`; an error Redis answered is a bug and stays.
   */
  async #command<T>(run: () => Promise<T>): Promise<T> {
    if (!this.available) throw this.#unavailable();
    try {
      return await run();
    } catch (error) {
      if (error instanceof ErrorReply) throw error;
      throw this.#unavailable(error);
    }
  }

  #onConnectionError(error: Error): void {
    this.#feedLive = false;
    if (this.#reportedDown || this.#closed) return;
    this.#reportedDown = true;
    this.#log?.warn("Redis unreachable; cluster calls fail until it is back", {
      host: this.#host,
      error: error.message,
    });
  }

  #onReaderDown(): void {
    this.#feedLive = false;
  }

  #onClientReady(): void {
    if (this.#reportedDown) {
      this.#reportedDown = false;
      this.#log?.info("Redis reachable again", { host: this.#host });
    }
    this.#enableExpiryEvents();
    this.#wakeFeed();
  }

  #wakeFeed(): void {
    this.#wake.resolve();
    this.#wake = Promise.withResolvers<void>();
  }

  /**
   * Adds expired-key events (E + x) to the server's keyspace events, keeping the flags it
   * has. Managed Redis often refuses CONFIG: the periodic check then finds expiries alone.
   */
  async #enableExpiryEvents(): Promise<void> {
    try {
      const reply = await this.#client.configGet("notify-keyspace-events");
      const flags = String(reply["notify-keyspace-events"] ?? "");
      const has = (flag: string) => flags.includes(flag);
      const needed = (has("E") ? "" : "E") + (has("x") || has("A") ? "" : "x");
      if (needed) await this.#client.configSet("notify-keyspace-events", flags + needed);
    } catch (error) {
      if (this.#closed) return;
      this.#log?.info("Redis keyspace events unavailable; node expiry found by polling", {
        error: error instanceof Error ? error.message : String(error),
      });
    }
  }

  #onKeyExpired(key: string): void {
    const alivePrefix = `${this.#prefix}alive:`;
    if (key.startsWith(alivePrefix)) this.#expire(key.slice(alivePrefix.length));
  }

  #checkExpiries(): void {
    if (this.available) this.#expire();
  }

  /** Puts the expiry of node `id` (or of every node whose liveness ran out) on the feed. */
  #expire(id?: string): void {
    if (!this.#client.isReady) return;
    this.#client.eval(expireScript, {
      keys: [this.#keys.nodes, this.#keys.changes],
      arguments: [this.#prefix, String(feedMaxLength), ...(id === undefined ? [] : [id])],
    }).catch((error: unknown) => {
      if (this.#closed || !this.#client.isReady) return; // reported as the outage
      this.#log?.warn("cluster node expiry check failed", { error });
    });
  }

  /** The id of the newest feed entry, "0-0" when the feed is empty. */
  async #newestId(): Promise<string> {
    const newest = await this.#reader.xRevRange(this.#keys.changes, "+", "-", { COUNT: 1 });
    return newest?.[0]?.id ?? "0-0";
  }

  /**
   * True when the feed no longer holds entry `id`: it was trimmed past it, so changes after it
   * may be lost. (From "0-0", an empty feed's start, a loss cannot be told; it would take
   * 10000 writes within one read's round trip.)
   */
  async #trimmedPast(id: string): Promise<boolean> {
    if (id === "0-0") return false;
    const oldest = await this.#reader.xRange(this.#keys.changes, "-", "+", { COUNT: 1 });
    const oldestId = oldest?.[0]?.id;
    return oldestId !== undefined && compareStreamIds(oldestId, id) > 0;
  }

  /** Follows the change feed until closed, repositioning (and resyncing) after any loss. */
  async #readFeed(): Promise<void> {
    while (!this.#closed) {
      if (!this.#client.isReady || !this.#reader.isReady) {
        this.#feedLive = false;
        await this.#wake.promise;
        continue;
      }
      try {
        if (!this.#feedLive) {
          this.#lastId = await this.#newestId();
          // Live before the resync goes out: a snapshot taken for it misses nothing after.
          this.#feedLive = true;
          if (this.#feedStarted) this.#watchers.emit({ type: "resync" });
          this.#feedStarted = true;
          this.#wakeFeed();
        }
        const reply = await this.#reader.xRead(
          { key: this.#keys.changes, id: this.#lastId },
          { BLOCK: feedBlockMs, COUNT: feedBatchSize },
        ) as unknown as FeedReply | null;
        const messages = reply?.[0]?.messages ?? [];
        // Checked after the read: a trim while it was blocked shows only now.
        if (messages.length > 0 && await this.#trimmedPast(this.#lastId)) {
          this.#log?.warn("cluster change feed trimmed past the last change read; resyncing");
          this.#feedLive = false; // the snapshot of the resync covers this batch
          continue;
        }
        for (const { id, message } of messages) {
          this.#lastId = id;
          this.#deliver(message.c);
        }
      } catch (error) {
        if (this.#closed) return;
        this.#feedLive = false;
        if (this.#reader.isReady && this.#client.isReady) {
          this.#log?.warn("cluster change feed read failed; resyncing", { error });
          await new Promise((resolve) => setTimeout(resolve, feedRetryDelayMs));
        }
      }
    }
  }

  #deliver(json: string | undefined): void {
    try {
      this.#watchers.emit(JSON.parse(json ?? "") as ClusterChange);
    } catch (error) {
      this.#log?.warn("malformed cluster change skipped", { error });
    }
  }
}

/** Orders two stream ids `<ms>-<seq>`. */
function compareStreamIds(a: string, b: string): number {
  const [aMs, aSeq] = a.split("-").map(BigInt);
  const [bMs, bSeq] = b.split("-").map(BigInt);
  if (aMs !== bMs) return aMs < bMs ? -1 : 1;
  return aSeq === bSeq ? 0 : aSeq < bSeq ? -1 : 1;
}
