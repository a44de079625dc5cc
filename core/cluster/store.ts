/**
 * The CDN's shared state behind one small interface: nodes with a liveness TTL, and records
 * (routes, ACLs, profiles) with a change feed. Two implementations: in-process (one node, the
 * default) and Redis (`cluster.redisUrl`). Redis is the source of truth; every node keeps a
 * local cache (`ClusterView`) fed by the change feed and rebuilt after a reconnect.
 */

/** What a node does in the CDN. */
export type CdnRole = "origin" | "edge" | "transcoder";

/** Which new work a node takes (WCS's node processing states). */
export type ProcessingState =
  | "NEW_STREAMS_ALLOWED"
  | "CONNECTIONS_ALLOWED"
  | "GROUP_CONNECTIONS_ALLOWED";

/** A node as it announces itself. */
export interface NodeRecord {
  /** Unique id of the node (its `nodeId`). */
  id: string;
  role: CdnRole;
  /** Groups the node belongs to; empty: the default group. */
  groups: string[];
  /** URL of the node's CDN listener, `ws://host:port` or `wss://host:port`. */
  url: string;
  /** Server version. */
  version: string;
  processingState: ProcessingState;
  /** Load figures the route election reads (streams published, players, transcodes). */
  load: { streams: number; players: number; transcodes: number; loadAverage: number };
  /** When the node started, ms since the epoch. */
  startedAtMs: number;
}

/** A node and whether its liveness is current. */
export interface NodeEntry {
  record: NodeRecord;
  /** True while the node refreshes its liveness within its TTL (ACTIVE), false after (PASSIVE). */
  alive: boolean;
}

/** Kinds of shared records; each kind is a map from key to a JSON value. */
export type RecordKind = "route" | "acl" | "profile";

/** Every record kind, in a stable order. */
export const recordKinds: readonly RecordKind[] = ["route", "acl", "profile"];

/** One change of the shared state, as the change feed delivers it. */
export type ClusterChange =
  /** A node announced itself, changed its record, or came back alive. */
  | { type: "node"; entry: NodeEntry }
  /** A node's liveness ran out (it is PASSIVE now). */
  | { type: "nodeExpired"; id: string }
  /** A node was removed (`/cdn/remove_node`). */
  | { type: "nodeRemoved"; id: string }
  /** A record was set. */
  | { type: "put"; kind: RecordKind; key: string; value: unknown }
  /** A record was deleted. */
  | { type: "delete"; kind: RecordKind; key: string }
  /**
   * The store lost changes (it reconnected, or the feed was trimmed past the last one read):
   * caches must reload a snapshot.
   */
  | { type: "resync" };

/** The whole shared state at one moment. */
export interface ClusterSnapshot {
  nodes: NodeEntry[];
  /** Records by kind, then key. */
  records: Record<RecordKind, Map<string, unknown>>;
}

/**
 * Shared state of the CDN. Every method that talks to the backend rejects with
 * `ServiceUnavailableError` (core/errors.ts) when it is unreachable; none queues a write for
 * later (a heartbeat replayed after an outage would lie about liveness).
 */
export interface ClusterStore {
  /** True while the backend is reachable. */
  readonly available: boolean;
  /**
   * Writes this node's record and refreshes its liveness for `ttlMs`; called every
   * `cdn.heartbeatMs`. A node whose liveness runs out stays listed as not alive until removed.
   */
  heartbeat(node: NodeRecord, ttlMs: number): Promise<void>;
  /** Removes a node's record; false when there was none. */
  removeNode(id: string): Promise<boolean>;
  /** Sets a record and tells every watcher (on every node). */
  put(kind: RecordKind, key: string, value: unknown): Promise<void>;
  /** Deletes a record and tells every watcher; false when there was none. */
  delete(kind: RecordKind, key: string): Promise<boolean>;
  /** Reads the whole state. */
  snapshot(): Promise<ClusterSnapshot>;
  /** Calls `listener` on every change, until the returned function is called. */
  watch(listener: (change: ClusterChange) => void): () => void;
  /** Stops timers and connections; the store is unusable afterwards. */
  close(): Promise<void>;
}
