/**
 * Talks to the V8 inspector of a Deno process started with `--inspect=127.0.0.1:<port>`, for
 * benchmarks that read a server's memory: a full garbage collection before a reading (so what
 * is counted is what the server still holds, not garbage V8 has not collected yet) and heap
 * snapshots summed by constructor (what a load left behind). Only the bench uses it; the
 * server has no code for it.
 */

/** Live objects of one constructor (or V8 node kind) in a heap snapshot. */
export interface HeapCount {
  count: number;
  bytes: number;
}

/** A Chrome DevTools protocol session over the inspector's WebSocket. */
export class Inspector {
  #ws: WebSocket;
  #nextId = 1;
  #pending = new Map<number, (result: unknown) => void>();
  #chunks: string[] = [];

  private constructor(ws: WebSocket) {
    this.#ws = ws;
    ws.onmessage = (e) => {
      const message = JSON.parse(e.data);
      if (message.method === "HeapProfiler.addHeapSnapshotChunk") {
        this.#chunks.push(message.params.chunk);
      } else if (typeof message.id === "number") {
        this.#pending.get(message.id)?.(message.error ?? message.result);
        this.#pending.delete(message.id);
      }
    };
  }

  /** Connects to the first target listed by the inspector at `port` on 127.0.0.1. */
  static async connect(port: number): Promise<Inspector> {
    const targets = await (await fetch(`http://127.0.0.1:${port}/json/list`)).json();
    const ws = new WebSocket(targets[0].webSocketDebuggerUrl);
    await new Promise((resolve, reject) => {
      ws.onopen = resolve;
      ws.onerror = reject;
    });
    const inspector = new Inspector(ws);
    await inspector.#call("HeapProfiler.enable");
    return inspector;
  }

  #call(method: string, params: Record<string, unknown> = {}): Promise<unknown> {
    const id = this.#nextId++;
    const answered = new Promise((resolve) => this.#pending.set(id, resolve));
    this.#ws.send(JSON.stringify({ id, method, params }));
    return answered;
  }

  /** A full, compacting garbage collection in the inspected process. */
  async collectGarbage(): Promise<void> {
    await this.#call("HeapProfiler.collectGarbage");
  }

  /** `Deno.memoryUsage()` of the inspected process, in bytes. */
  async memoryUsage(): Promise<Deno.MemoryUsage> {
    const answer = await this.#call("Runtime.evaluate", {
      expression: "JSON.stringify(Deno.memoryUsage())",
      returnByValue: true,
    }) as { result: { value: string } };
    return JSON.parse(answer.result.value);
  }

  /**
   * Takes a heap snapshot (V8 collects garbage first) and sums its nodes by constructor name
   * for objects and by kind for the rest (`(closure) name`, `(string)`, `(array)`, ...).
   */
  async heapCounts(): Promise<Map<string, HeapCount>> {
    this.#chunks = [];
    await this.#call("HeapProfiler.takeHeapSnapshot", { reportProgress: false });
    const snapshot = JSON.parse(this.#chunks.join(""));
    this.#chunks = [];
    const fields: string[] = snapshot.snapshot.meta.node_fields;
    const types: string[] = snapshot.snapshot.meta.node_types[0];
    const typeAt = fields.indexOf("type");
    const nameAt = fields.indexOf("name");
    const sizeAt = fields.indexOf("self_size");
    const nodes: number[] = snapshot.nodes;
    const strings: string[] = snapshot.strings;
    const counts = new Map<string, HeapCount>();
    for (let i = 0; i < nodes.length; i += fields.length) {
      const type = types[nodes[i + typeAt]];
      const name = strings[nodes[i + nameAt]];
      const key = type === "object" || type === "native"
        ? name
        : type === "closure"
        ? `(closure) ${name}`
        : `(${type})`;
      const entry = counts.get(key) ?? { count: 0, bytes: 0 };
      entry.count++;
      entry.bytes += nodes[i + sizeAt];
      counts.set(key, entry);
    }
    return counts;
  }

  /** Closes the session. */
  async close(): Promise<void> {
    const closed = new Promise((resolve) => this.#ws.onclose = resolve);
    this.#ws.close();
    await closed;
  }
}

/** Lines `+count constructor (+KiB)` of what grew most from `before` to `after`. */
export function heapGrowth(
  before: Map<string, HeapCount>,
  after: Map<string, HeapCount>,
  top = 25,
): string[] {
  const rows: [string, number, number][] = [];
  for (const [key, a] of after) {
    const b = before.get(key) ?? { count: 0, bytes: 0 };
    if (a.count !== b.count || a.bytes !== b.bytes) {
      rows.push([key, a.count - b.count, a.bytes - b.bytes]);
    }
  }
  return rows.sort((x, y) => y[2] - x[2]).slice(0, top).map(([key, n, bytes]) =>
    `${n >= 0 ? "+" : ""}${n} ${key} (${bytes >= 0 ? "+" : ""}${(bytes / 1024).toFixed(1)} KiB)`
  );
}
