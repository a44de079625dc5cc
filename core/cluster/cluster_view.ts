/**
 * A node's local copy of the cluster state, read synchronously on hot paths (route election,
 * ACL checks) and kept current by the store's change feed. It keeps answering from the last
 * state it had while the store is unreachable, and reloads a snapshot on `resync`.
 */
import { ServiceUnavailableError } from "../errors.ts";
import type { Logger } from "../log.ts";
import {
  type ClusterChange,
  type ClusterSnapshot,
  type ClusterStore,
  type NodeEntry,
  type RecordKind,
  recordKinds,
} from "./store.ts";
import { Watchers } from "./watchers.ts";

/** Wait before loading the snapshot again after a failed load, in ms. */
const reloadRetryMs = 500;

/**
 * Synchronous cache over a `ClusterStore`. Entries and maps it returns are its own: read
 * them, do not change them.
 */
export class ClusterView {
  #store: ClusterStore;
  #log?: Logger;
  #nodes = new Map<string, NodeEntry>();
  #records = new Map<RecordKind, Map<string, unknown>>(
    recordKinds.map((kind) => [kind, new Map()]),
  );
  #watchers: Watchers;
  #unwatch: () => void;
  /** Changes that arrived while a snapshot loads; applied on top of it. */
  #pending?: ClusterChange[];
  #synced = false;
  #retryTimer?: ReturnType<typeof setTimeout>;
  #closed = false;

  private constructor(store: ClusterStore, log?: Logger) {
    this.#store = store;
    this.#log = log;
    this.#watchers = new Watchers(log);
    this.#unwatch = store.watch((change) => this.#onChange(change));
  }

  /**
   * A view of `store`, loaded from a snapshot. When the store is unreachable the view starts
   * empty (`synced` false) and loads the snapshot as soon as it can.
   */
  static async open(store: ClusterStore, log?: Logger): Promise<ClusterView> {
    const view = new ClusterView(store, log);
    await view.#reload();
    return view;
  }

  /** True once a snapshot is loaded and until the store asks for a resync. */
  get synced(): boolean {
    return this.#synced;
  }

  /** Every node, alive or not. */
  nodes(): NodeEntry[] {
    return [...this.#nodes.values()];
  }

  /** The node `id`, if listed. */
  node(id: string): NodeEntry | undefined {
    return this.#nodes.get(id);
  }

  /** The records of `kind`, by key. */
  records(kind: RecordKind): ReadonlyMap<string, unknown> {
    return this.#records.get(kind)!;
  }

  /** The record `kind`/`key`, if set. */
  get(kind: RecordKind, key: string): unknown {
    return this.#records.get(kind)!.get(key);
  }

  /**
   * Calls `listener` after each change is applied to the view, until the returned function is
   * called. `resync` means the view was reloaded: read it all again.
   */
  watch(listener: (change: ClusterChange) => void): () => void {
    return this.#watchers.add(listener);
  }

  /** Stops following the store (the store itself stays open). */
  close(): void {
    this.#closed = true;
    clearTimeout(this.#retryTimer);
    this.#unwatch();
    this.#watchers.clear();
  }

  #onChange(change: ClusterChange): void {
    if (this.#closed) return;
    if (change.type === "resync") {
      this.#synced = false;
      this.#reload();
      return;
    }
    if (this.#pending) {
      this.#pending.push(change);
      return;
    }
    this.#apply(change);
    this.#watchers.emit(change);
  }

  /** Loads a snapshot, then replays what arrived meanwhile; retries until it succeeds. */
  async #reload(): Promise<void> {
    if (this.#pending || this.#closed) return; // a load is under way: it covers this one
    clearTimeout(this.#retryTimer);
    this.#pending = [];
    let snapshot: ClusterSnapshot;
    try {
      snapshot = await this.#store.snapshot();
    } catch (error) {
      this.#pending = undefined;
      if (this.#closed) return;
      if (!(error instanceof ServiceUnavailableError)) {
        this.#log?.error("cluster snapshot failed", { error });
      }
      this.#retryTimer = setTimeout(() => this.#reload(), reloadRetryMs);
      return;
    }
    if (this.#closed) return;
    const pending = this.#pending;
    this.#pending = undefined;
    this.#nodes = new Map(snapshot.nodes.map((entry) => [entry.record.id, entry]));
    for (const kind of recordKinds) {
      // Refilled in place: maps handed out by records() stay current.
      const records = this.#records.get(kind)!;
      records.clear();
      for (const [key, value] of snapshot.records[kind]) records.set(key, value);
    }
    for (const change of pending) this.#apply(change);
    this.#synced = true;
    this.#watchers.emit({ type: "resync" });
    for (const change of pending) this.#watchers.emit(change);
  }

  #apply(change: ClusterChange): void {
    switch (change.type) {
      case "node":
        this.#nodes.set(change.entry.record.id, change.entry);
        break;
      case "nodeExpired": {
        const entry = this.#nodes.get(change.id);
        if (entry) this.#nodes.set(change.id, { record: entry.record, alive: false });
        break;
      }
      case "nodeRemoved":
        this.#nodes.delete(change.id);
        break;
      case "put":
        this.#records.get(change.kind)!.set(change.key, change.value);
        break;
      case "delete":
        this.#records.get(change.kind)!.delete(change.key);
        break;
    }
  }
}
