/** Picks the cluster store the configuration asks for. */
import type { Config } from "../../config.ts";
import type { Logger } from "../log.ts";
import { MemoryClusterStore } from "./memory_store.ts";
import { RedisClusterStore } from "./redis_store.ts";
import type { ClusterStore } from "./store.ts";

/**
 * The Redis store when `cluster.redisUrl` is set (it connects in the background and keeps
 * retrying), otherwise an in-process store for this node alone.
 */
export function createClusterStore(config: Config, log: Logger): ClusterStore {
  const storeLog = log.child({ component: "cluster" });
  const url = config.cluster.redisUrl;
  if (url === undefined) return new MemoryClusterStore(storeLog);
  return new RedisClusterStore({
    url,
    // Expiries show within half a TTL even when keyspace events are off.
    expiryCheckMs: Math.max(100, Math.floor(config.cdn.nodeTtlMs / 2)),
    log: storeLog,
  });
}
