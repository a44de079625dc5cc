/**
 * An edge's pulls of streams from other nodes, made on demand: the first viewer of a name
 * opens one relay, later viewers share it, and it ends `graceMs` after the last one left.
 * Simultaneous first viewers wait for the same pull.
 */
import type { Logger } from "../log.ts";
import type { StreamRegistry } from "../stream_registry.ts";
import { RelayPull } from "../../media/providers/relay_pull.ts";
import type { Stream } from "../../media/stream.ts";

/**
 * Time from dialing to the first frame, in ms: a transcoder's encoding only answers once its
 * first keyframe is out.
 */
const helloTimeoutMs = 15_000;
/** How often a pull looks for viewers, in ms. */
const viewerCheckMs = 1000;

/** Where one pull comes from. */
export interface PullTarget {
  /** Id of the node pulled from. */
  nodeId: string;
  /** Full relay URL (the node's CDN listener, path and query). */
  url: string;
  /** Headers of the relay request (the CDN secret). */
  headers: Record<string, string>;
}

/** A running pull. */
export interface EdgePull {
  readonly name: string;
  readonly target: PullTarget;
  readonly stream: Stream;
  readonly startedAtMs: number;
}

interface Entry extends EdgePull {
  relay: RelayPull;
  timer: ReturnType<typeof setInterval>;
  idleSinceMs?: number;
}

/** The pulls of one edge, by local stream name. */
export class EdgePulls {
  #streams: StreamRegistry;
  #log: Logger;
  #graceMs: number;
  #running = new Map<string, Entry>();
  #starting = new Map<string, Promise<Stream>>();

  /**
   * @param graceMs how long a pull outlives its last viewer, in ms.
   */
  constructor(streams: StreamRegistry, log: Logger, graceMs: number) {
    this.#streams = streams;
    this.#log = log;
    this.#graceMs = graceMs;
  }

  /**
   * The local stream `name` relayed from `target`, opening the relay unless one runs or is
   * starting. Rejects with the relay's error (not found, refused, unreachable).
   */
  pull(name: string, target: () => PullTarget): Promise<Stream> {
    const running = this.#running.get(name);
    if (running && !running.stream.ended) return Promise.resolve(running.stream);
    let starting = this.#starting.get(name);
    if (!starting) {
      starting = this.#open(name, target()).finally(() => this.#starting.delete(name));
      this.#starting.set(name, starting);
    }
    return starting;
  }

  async #open(name: string, target: PullTarget): Promise<Stream> {
    const relay = await RelayPull.open({
      url: target.url,
      headers: target.headers,
      localName: name,
      streams: this.#streams,
      log: this.#log.child({ stream: name, from: target.nodeId }),
      helloTimeoutMs,
    });
    const entry: Entry = {
      name,
      target,
      stream: relay.stream,
      startedAtMs: Date.now(),
      relay,
      timer: setInterval(() => this.#checkViewers(entry), viewerCheckMs),
    };
    this.#running.set(name, entry);
    relay.closed.then(({ reason }) => {
      clearInterval(entry.timer);
      if (this.#running.get(name) === entry) this.#running.delete(name);
      this.#log.info("cdn pull ended", { stream: name, from: target.nodeId, reason });
    });
    this.#log.info("cdn pull started", { stream: name, from: target.nodeId });
    return relay.stream;
  }

  #checkViewers(entry: Entry): void {
    if (entry.stream.readerCount > 0) {
      entry.idleSinceMs = undefined;
      return;
    }
    const now = Date.now();
    entry.idleSinceMs ??= now;
    if (now - entry.idleSinceMs >= this.#graceMs) entry.relay.close("no viewers");
  }

  /** The running pulls. */
  list(): EdgePull[] {
    return [...this.#running.values()];
  }

  /** Ends the pulls from one node (all when `nodeId` is undefined); returns how many. */
  closeFrom(nodeId: string | undefined, reason: string): number {
    let closed = 0;
    for (const entry of [...this.#running.values()]) {
      if (nodeId !== undefined && entry.target.nodeId !== nodeId) continue;
      entry.relay.close(reason);
      closed++;
    }
    return closed;
  }

  /** Ends every pull and waits for them. */
  async closeAll(reason: string): Promise<void> {
    await Promise.allSettled([...this.#starting.values()]);
    const entries = [...this.#running.values()];
    for (const entry of entries) entry.relay.close(reason);
    await Promise.all(entries.map((entry) => entry.relay.closed));
  }
}
