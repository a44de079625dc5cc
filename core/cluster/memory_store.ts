/**
 * The in-process `ClusterStore`: the single-node default, and the shared state of several
 * servers started in one process (tests). Plain maps, one timer per node for its liveness.
 */
import { ServiceUnavailableError } from "../errors.ts";
import type { Logger } from "../log.ts";
import {
  type ClusterChange,
  type ClusterSnapshot,
  type ClusterStore,
  type NodeRecord,
  type RecordKind,
  recordKinds,
} from "./store.ts";
import { Watchers } from "./watchers.ts";

/** A node as the store keeps it. */
interface NodeState {
  /** The record as JSON: compared to tell a changed record from a plain refresh. */
  json: string;
  alive: boolean;
  expiryTimer?: ReturnType<typeof setTimeout>;
}

/**
 * `ClusterStore` in memory, with no global state: servers sharing one instance share one
 * cluster. Values go through JSON on the way in and out, as with Redis, so callers never
 * share objects with the store. Watchers are called from microtasks (see `Watchers`).
 */
export class MemoryClusterStore implements ClusterStore {
  #nodes = new Map<string, NodeState>();
  #records = new Map<RecordKind, Map<string, string>>(
    recordKinds.map((kind) => [kind, new Map()]),
  );
  #watchers: Watchers;
  #closed = false;

  /** `log` receives the failures of watchers. */
  constructor(log?: Logger) {
    this.#watchers = new Watchers(log);
  }

  /** True until closed: nothing in between can be unreachable. */
  get available(): boolean {
    return !this.#closed;
  }

  heartbeat(node: NodeRecord, ttlMs: number): Promise<void> {
    return this.#run(() => {
      const json = JSON.stringify(node);
      const state = this.#nodes.get(node.id);
      const changed = !state || state.json !== json || !state.alive;
      clearTimeout(state?.expiryTimer);
      const next: NodeState = { json, alive: true };
      next.expiryTimer = setTimeout(() => this.#expire(node.id, next), ttlMs);
      this.#nodes.set(node.id, next);
      if (changed) {
        this.#watchers.emit({ type: "node", entry: { record: JSON.parse(json), alive: true } });
      }
    });
  }

  removeNode(id: string): Promise<boolean> {
    return this.#run(() => {
      const state = this.#nodes.get(id);
      if (!state) return false;
      clearTimeout(state.expiryTimer);
      this.#nodes.delete(id);
      this.#watchers.emit({ type: "nodeRemoved", id });
      return true;
    });
  }

  put(kind: RecordKind, key: string, value: unknown): Promise<void> {
    return this.#run(() => {
      const json = JSON.stringify(value);
      if (json === undefined) throw new TypeError(`cluster record ${kind}/${key} is not JSON`);
      this.#records.get(kind)!.set(key, json);
      this.#watchers.emit({ type: "put", kind, key, value: JSON.parse(json) });
    });
  }

  delete(kind: RecordKind, key: string): Promise<boolean> {
    return this.#run(() => {
      if (!this.#records.get(kind)!.delete(key)) return false;
      this.#watchers.emit({ type: "delete", kind, key });
      return true;
    });
  }

  snapshot(): Promise<ClusterSnapshot> {
    return this.#run(() => ({
      nodes: [...this.#nodes.values()].map((state) => ({
        record: JSON.parse(state.json),
        alive: state.alive,
      })),
      records: Object.fromEntries(recordKinds.map((kind) => [
        kind,
        new Map([...this.#records.get(kind)!].map(([key, json]) => [key, JSON.parse(json)])),
      ])) as ClusterSnapshot["records"],
    }));
  }

  watch(listener: (change: ClusterChange) => void): () => void {
    return this.#watchers.add(listener);
  }

  close(): Promise<void> {
    this.#closed = true;
    for (const state of this.#nodes.values()) clearTimeout(state.expiryTimer);
    this.#watchers.clear();
    return Promise.resolve();
  }

  /** The liveness of `state` ran out (unless a heartbeat replaced it meanwhile). */
  #expire(id: string, state: NodeState): void {
    if (this.#nodes.get(id) !== state) return;
    state.alive = false;
    state.expiryTimer = undefined;
    this.#watchers.emit({ type: "nodeExpired", id });
  }

  /** Runs `operation` as a promise, rejecting (not throwing) once the store is closed. */
  #run<T>(operation: () => T): Promise<T> {
    try {
      if (this.#closed) throw new ServiceUnavailableError("the cluster store is closed");
      return Promise.resolve(operation());
    } catch (error) {
      return Promise.reject(error);
    }
  }
}
