/**
 * What a WebRTC subscriber costs in the server's heap: the server (send engine `ffi` or
 * `werift`, ICE mux on) runs in a child with its V8 inspector open; this process publishes a
 * synthetic VP8 + Opus stream (tests/webrtc_helpers.ts TestPublisher) and connects N Web SDK
 * players (werift peers whose SRTP a Worker verifies off the main thread:
 * srtp_receivers.ts). After a full garbage collection with the publisher alone and again with
 * the N players playing, it prints the server's RSS, heap and external memory per subscriber
 * and the constructors whose live objects grew most, per subscriber.
 *
 * `deno run -A bench/support/webrtc_heap.ts [N=100] [ffi|werift]` (not part of `deno task
 * bench`: it is a probe for finding what to cut, not a figure of the README). The server runs
 * as deno.json's start task runs it (`--max-semi-space-size=2`, `MALLOC_ARENA_MAX=2
 * MALLOC_MMAP_THRESHOLD_=131072`); `WEBRTC_HEAP_DEFAULTS=1`: with V8's and glibc's defaults.
 */
import { configSchema } from "../../config.ts";
import { silentLogger } from "../../core/log.ts";
import { startServer } from "../../server.ts";
import { WcsClient } from "../../tests/helpers/wcs_client.ts";
import { nextStatus, TestPlayer, TestPublisher } from "../../tests/webrtc_helpers.ts";
import { type HeapCount, Inspector } from "./inspector.ts";
import { lines } from "./lines.ts";
import { SrtpReceiverPool } from "./srtp_receivers.ts";

/** Time the players play before the second reading, in milliseconds. */
const settleMs = 3_000;
/** Players that play before the first reading (see `probe`). */
const warmPlayers = 10;
/** Attempts to connect one player before the probe fails. */
const connectAttempts = 3;
/** Players connected at once. */
const connectBatch = 10;
/** Longest wait for a player's SRTP keys after PLAYING, in milliseconds. */
const keysTimeoutMs = 10_000;
/** Offset of the send-time stamp the receivers read (unused here, but the pool needs one). */
const stampOffset = 16;

/** Child mode: the server, printing its WebSocket URL, until stdin closes. */
async function serve(sendEngine: "ffi" | "werift"): Promise<void> {
  const config = configSchema.parse({
    ports: { rest: 0, ws: 0, wss: 0, hls: 0, rtmp: 0, rtsp: 0, srt: 0, sip: 0 },
    media: { iceMux: "on", sendEngine },
    limits: { connectionsPerAddress: 100_000 },
  });
  const server = await startServer(config, silentLogger);
  console.log(JSON.stringify({ ws: `ws://127.0.0.1:${server.wsPort}` }));
  for await (const _ of lines(Deno.stdin.readable)) {
    // Only the end of stdin matters.
  }
  await server.stop();
}

/** VmRSS of `pid`, in KB. */
async function rssKb(pid: number): Promise<number> {
  const status = await Deno.readTextFile(`/proc/${pid}/status`);
  return Number(status.match(/VmRSS:\s+(\d+)/)?.[1] ?? 0);
}

/**
 * Resident KB of `pid` by kind of mapping (/proc/<pid>/smaps): `heap` (malloc's main arena),
 * `anon>=64M` (anonymous mappings of 64 MiB and more: thread arenas and V8's reservations),
 * `anon` (smaller anonymous ones), `file` (binaries and libraries).
 */
async function residentByKind(pid: number): Promise<Record<string, number>> {
  const text = await Deno.readTextFile(`/proc/${pid}/smaps`);
  const kinds: Record<string, number> = {};
  let kind = "";
  for (const line of text.split("\n")) {
    const head = /^([0-9a-f]+)-([0-9a-f]+) \S+ \S+ \S+ \d+\s*(.*)$/.exec(line);
    if (head) {
      const bytes = parseInt(head[2], 16) - parseInt(head[1], 16);
      const name = head[3];
      kind = name === "[heap]"
        ? "heap"
        : name.startsWith("/")
        ? "file"
        : name === ""
        ? (bytes >= 64 * 1024 * 1024 ? "anon>=64M" : "anon")
        : name;
      continue;
    }
    const rss = /^Rss:\s+(\d+) kB/.exec(line);
    if (rss) kinds[kind] = (kinds[kind] ?? 0) + Number(rss[1]);
  }
  return kinds;
}

/** A free TCP port on 127.0.0.1 for the inspector. */
function freePort(): number {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (listener.addr as Deno.NetAddr).port;
  listener.close();
  return port;
}

async function probe(n: number, sendEngine: "ffi" | "werift"): Promise<void> {
  const inspectPort = freePort();
  // WEBRTC_HEAP_WRAP runs the server under a tool (e.g. "heaptrack -o /tmp/x"): its malloc
  // call sites then show what the native bytes per subscriber are; RSS figures are then the
  // wrapper's, not the server's.
  const defaults = Deno.env.get("WEBRTC_HEAP_DEFAULTS") === "1";
  const wrap = Deno.env.get("WEBRTC_HEAP_WRAP")?.split(" ").filter(Boolean) ?? [];
  const child = new Deno.Command(wrap[0] ?? Deno.execPath(), {
    args: [
      ...(wrap.length ? [...wrap.slice(1), Deno.execPath()] : []),
      "run",
      "-A",
      `--inspect=127.0.0.1:${inspectPort}`,
      // As deno.json's start task runs the server (WEBRTC_HEAP_DEFAULTS=1: V8's default).
      ...(defaults ? [] : ["--v8-flags=--max-semi-space-size=2"]),
      new URL(import.meta.url).pathname,
      "--serve",
      sendEngine,
    ],
    // The start task's malloc settings, unless WEBRTC_HEAP_DEFAULTS=1.
    ...(defaults ? {} : { env: { MALLOC_ARENA_MAX: "2", MALLOC_MMAP_THRESHOLD_: "131072" } }),
    stdin: "piped",
    stdout: "piped",
    stderr: "null",
  }).spawn();
  const out = lines(child.stdout)[Symbol.asyncIterator]();
  // A wrapper prints its own lines first.
  let first = await out.next();
  while (!first.done && !String(first.value).startsWith("{")) first = await out.next();
  const { ws } = JSON.parse(first.value as string) as { ws: string };
  const pool = new SrtpReceiverPool(1, stampOffset);
  pool.install();
  const inspector = await Inspector.connect(inspectPort);
  inspectorPorts.set(inspector, inspectPort);
  const publisher = new TestPublisher("VP8", 4);
  const { client: pubClient } = await WcsClient.connect(ws);
  const players: { player: TestPlayer; client: WcsClient }[] = [];
  const play = async (player: TestPlayer, client: WcsClient) => {
    const id = crypto.randomUUID();
    await player.play(client, { mediaSessionId: id, name: "heap" });
    const status = await nextStatus(client, id, 30_000);
    if (status.status !== "PLAYING") throw new Error(`PLAYING got ${status.status}`);
    const deadline = Date.now() + keysTimeoutMs;
    while (!pool.useKeys(player.pc)) {
      if (Date.now() > deadline) throw new Error("no SRTP keys after PLAYING");
      await new Promise((r) => setTimeout(r, 20));
    }
  };
  const connect = async (count: number) => {
    for (let i = 0; i < count; i += connectBatch) {
      await Promise.all(
        Array.from({ length: Math.min(connectBatch, count - i) }, async () => {
          // A connection that fails on the loaded machine is tried again, as the bench does.
          for (let attempt = 1;; attempt++) {
            const player = new TestPlayer("VP8");
            const { client } = await WcsClient.connect(ws);
            try {
              await play(player, client);
              players.push({ player, client });
              return;
            } catch (err) {
              await player.close();
              await client.close();
              if (attempt === connectAttempts) throw err;
            }
          }
        }),
      );
    }
  };
  try {
    await publisher.publish(pubClient, { mediaSessionId: crypto.randomUUID(), name: "heap" });
    publisher.start();
    // The first players compile code and fill caches every later one shares: they play
    // before the first reading, so what is counted is what each further player adds.
    await connect(warmPlayers);
    await new Promise((r) => setTimeout(r, settleMs));
    const before = await reading(inspector, child.pid);
    await connect(n);
    await new Promise((r) => setTimeout(r, settleMs));
    const after = await reading(inspector, child.pid);
    const counts = await pool.counts();
    console.log(
      `${n} subscribers (${sendEngine}), load ${(await Deno.readTextFile("/proc/loadavg")).trim()}`,
    );
    console.log(
      `receivers: ${counts.received} packets verified, ${counts.failed} failed, ${counts.gaps} gaps`,
    );
    const per = (a: number, b: number) => ((a - b) / n / 1024).toFixed(1);
    const line = (what: string, rss: [number, number], a: Deno.MemoryUsage, b: Deno.MemoryUsage) =>
      console.log(
        `per subscriber ${what}: RSS ${per(rss[0] * 1024, rss[1] * 1024)} KB, heap used ${
          per(a.heapUsed, b.heapUsed)
        } KB, heap total ${per(a.heapTotal, b.heapTotal)} KB, external ${
          per(a.external, b.external)
        } KB`,
      );
    line("as found", [after.ungcRssKb, before.ungcRssKb], after.ungc, before.ungc);
    line("after a full GC", [after.rssKb, before.rssKb], after.memory, before.memory);
    console.log(
      `per subscriber in malloc: ${per(after.malloc.used, before.malloc.used)} KB in use, ${
        per(after.malloc.free, before.malloc.free)
      } KB free but kept, ${per(after.malloc.mmapped, before.malloc.mmapped)} KB mmapped`,
    );
    const kinds = new Set([...Object.keys(before.resident), ...Object.keys(after.resident)]);
    console.log(
      `per subscriber resident by mapping: ${
        [...kinds].map((k) =>
          `${k} ${per((after.resident[k] ?? 0) * 1024, (before.resident[k] ?? 0) * 1024)} KB`
        ).join(", ")
      }`,
    );
    console.log("constructors grown, per subscriber: objects, bytes (self size)");
    for (const row of growth(before.heap, after.heap, n)) console.log(row);
  } finally {
    await inspector.close();
    for (const { player, client } of players) {
      await player.close();
      await client.close();
    }
    await publisher.close();
    await pubClient.close();
    await pool.close();
    await child.stdin.close();
    await child.status;
  }
}

interface Reading {
  rssKb: number;
  memory: Deno.MemoryUsage;
  /** RSS and memory usage before the garbage collection. */
  ungcRssKb: number;
  ungc: Deno.MemoryUsage;
  /** malloc's figures after the collection. */
  malloc: Mallinfo;
  /** Resident KB by kind of mapping after the collection. */
  resident: Record<string, number>;
  heap: Map<string, HeapCount>;
}

async function reading(inspector: Inspector, pid: number): Promise<Reading> {
  // As a benchmark sees the process (garbage included), then after a full collection.
  const ungcRss = await rssKb(pid);
  const ungc = await inspector.memoryUsage();
  await inspector.collectGarbage();
  const malloc = await mallinfo(inspector);
  const resident = await residentByKind(pid);
  // RSS and memory usage before the snapshots, whose own allocations would count.
  const rss = await rssKb(pid);
  const memory = await inspector.memoryUsage();
  const dir = Deno.env.get("HEAP_SNAPSHOT_DIR");
  if (dir) await saveSnapshot(inspector, `${dir}/${Date.now()}.heapsnapshot`);
  const heap = await inspector.heapCounts();
  return { rssKb: rss, memory, heap, ungcRssKb: ungcRss, ungc, malloc, resident };
}

/** glibc's mallinfo2() in the inspected process: bytes malloc has in use and holds free. */
const mallinfoExpression = `(() => {
  const lib = Deno.dlopen("libc.so.6", {
    mallinfo2: { parameters: [], result: { struct: Array(10).fill("usize") } },
  });
  const words = new BigUint64Array(lib.symbols.mallinfo2().buffer);
  lib.close();
  return JSON.stringify({ mmapped: Number(words[4]), used: Number(words[7]), free: Number(words[8]) });
})()`;

/** malloc's figures of the inspected process (a second inspector session). */
async function mallinfo(inspector: Inspector): Promise<Mallinfo> {
  const answer = await session(
    inspector,
    (send) => send("Runtime.evaluate", { expression: mallinfoExpression, returnByValue: true }),
  ) as { result: { value: string } };
  return JSON.parse(answer.result.value);
}

/** What glibc's malloc holds: in use (`used`), free but kept (`free`), mmapped chunks. */
interface Mallinfo {
  used: number;
  free: number;
  mmapped: number;
}

/**
 * Opens a second session on `inspector`'s process, runs `run` (which sends one command and
 * may collect events through `onEvent`) and returns the command's result.
 */
async function session(
  inspector: Inspector,
  run: (send: (method: string, params?: Record<string, unknown>) => void) => void,
  onEvent?: (message: { method: string; params: Record<string, unknown> }) => void,
): Promise<unknown> {
  const port = inspectorPort(inspector);
  const targets = await (await fetch(`http://127.0.0.1:${port}/json/list`)).json();
  const ws = new WebSocket(targets[0].webSocketDebuggerUrl);
  await new Promise((resolve, reject) => {
    ws.onopen = resolve;
    ws.onerror = reject;
  });
  const result = new Promise<unknown>((resolve) => {
    ws.onmessage = (e) => {
      const message = JSON.parse(e.data);
      if (message.method) onEvent?.(message);
      else if (message.id === 1) resolve(message.result ?? message.error);
    };
  });
  run((method, params = {}) => ws.send(JSON.stringify({ id: 1, method, params })));
  const answer = await result;
  const closed = new Promise((resolve) => ws.onclose = resolve);
  ws.close();
  await closed;
  return answer;
}

/**
 * Saves a heap snapshot of the inspected process to `file` (for tools that walk retainers),
 * through a second session, as Inspector keeps the chunks to itself.
 */
async function saveSnapshot(inspector: Inspector, file: string): Promise<void> {
  const chunks: string[] = [];
  await session(
    inspector,
    (send) => send("HeapProfiler.takeHeapSnapshot"),
    (message) => {
      if (message.method === "HeapProfiler.addHeapSnapshotChunk") {
        chunks.push(message.params.chunk as string);
      }
    },
  );
  await Deno.writeTextFile(file, chunks.join(""));
}

const inspectorPorts = new WeakMap<Inspector, number>();

function inspectorPort(inspector: Inspector): number {
  const port = inspectorPorts.get(inspector);
  if (port === undefined) throw new Error("inspector of unknown port");
  return port;
}

/** The constructors that grew most in bytes, per subscriber (`HEAP_ROWS`, default 40). */
function growth(before: Map<string, HeapCount>, after: Map<string, HeapCount>, n: number) {
  const rows: [string, number, number][] = [];
  for (const [key, a] of after) {
    const b = before.get(key) ?? { count: 0, bytes: 0 };
    rows.push([key, (a.count - b.count) / n, (a.bytes - b.bytes) / n]);
  }
  const total = rows.reduce((s, r) => s + r[2], 0);
  const top = rows.sort((x, y) => y[2] - x[2]).slice(0, Number(Deno.env.get("HEAP_ROWS") ?? 40));
  return [
    `  total ${(total / 1024).toFixed(1)} KB`,
    ...top.map(([key, count, bytes]) =>
      `  ${count.toFixed(1).padStart(8)} ${(bytes / 1024).toFixed(2).padStart(8)} KB  ${key}`
    ),
  ];
}

if (Deno.args[0] === "--serve") {
  await serve(Deno.args[1] as "ffi" | "werift");
} else {
  await probe(Number(Deno.args[0] ?? 100), (Deno.args[1] ?? "ffi") as "ffi" | "werift");
}
