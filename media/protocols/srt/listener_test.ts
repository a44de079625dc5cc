import assert from "node:assert/strict";
import dgram from "node:dgram";
import { SrtListener } from "./listener.ts";
import { connectSrt } from "./caller.ts";
import type { SrtConnection } from "./connection.ts";
import { waitUntil } from "./interop_fixtures.ts";
import { LossRelay } from "./loss_relay.ts";

async function listen(options: Partial<Parameters<typeof SrtListener.listen>[0]> = {}) {
  const accepted: SrtConnection[] = [];
  const received = new Map<string, number[]>();
  const listener = await SrtListener.listen({
    hostname: "127.0.0.1",
    port: 0,
    latencyMs: 20,
    ...options,
    onConnection: (c) => {
      accepted.push(c);
      received.set(c.streamId, []);
      c.onPayload = (p) => received.get(c.streamId)!.push(p[0]);
    },
  });
  return { listener, accepted, received };
}

Deno.test("listener: several callers at once, each stream delivered to its connection", async () => {
  const { listener, accepted, received } = await listen();
  const callers = await Promise.all(
    ["a", "b", "c"].map((streamId) =>
      connectSrt({ hostname: "127.0.0.1", port: listener.port, streamId, latencyMs: 20 })
    ),
  );
  try {
    callers.forEach((c, i) => {
      for (let n = 0; n < 20; n++) c.send(new Uint8Array([i * 100 + n]));
    });
    await waitUntil(() => [...received.values()].every((r) => r.length === 20), 3000, "data");
    assert.deepEqual(received.get("b"), Array.from({ length: 20 }, (_, n) => 100 + n));
    assert.deepEqual(accepted.map((c) => c.streamId).sort(), ["a", "b", "c"]);
    assert.equal(listener.stats.accepted, 3);
  } finally {
    await Promise.all(callers.map((c) => c.close()));
    await listener.close();
  }
  assert.deepEqual(accepted.map((c) => c.stats().received.packets), [20, 20, 20]);
});

Deno.test("listener: garbage datagrams are counted and dropped, connections go on", async () => {
  const { listener, received } = await listen();
  const caller = await connectSrt({ hostname: "127.0.0.1", port: listener.port, streamId: "s" });
  const noise = dgram.createSocket("udp4");
  try {
    let seed = 1;
    const random = () => (seed = (Math.imul(seed, 1103515245) + 12345) >>> 0) / 2 ** 32;
    for (let i = 0; i < 300; i++) {
      const bytes = new Uint8Array(Math.floor(random() * 80));
      for (let j = 0; j < bytes.length; j++) bytes[j] = random() * 256;
      if (i % 3 === 0 && bytes.length > 16) bytes.fill(0, 12, 16); // socket 0: handshake path
      if (i % 3 === 0 && bytes.length > 0) bytes[0] = 0x80;
      noise.send(bytes, listener.port, "127.0.0.1");
    }
    caller.send(new Uint8Array([42]));
    await waitUntil(() => received.get("s")?.length === 1, 3000, "the caller's data");
    await waitUntil(() => listener.stats.malformed >= 200, 3000, "garbage counted");
    assert.equal(listener.stats.accepted, 1);
  } finally {
    await new Promise<void>((resolve) => noise.close(() => resolve()));
    await caller.close();
    await listener.close();
  }
});

Deno.test("keepalives hold an idle connection; a cut path ends it with a timeout", async () => {
  const { listener, accepted } = await listen({ peerIdleTimeoutMs: 1200 });
  const relay = await LossRelay.open({ targetPort: listener.port });
  const caller = await connectSrt({
    hostname: "127.0.0.1",
    port: relay.port,
    peerIdleTimeoutMs: 1200,
  });
  try {
    await new Promise((resolve) => setTimeout(resolve, 1600));
    assert.equal(listener.connections().length, 1, "alive on keepalives alone");
    relay.blackout = true;
    assert.equal(await accepted[0].closed, "timeout");
    assert.equal(await caller.closed, "timeout");
    assert.equal(listener.connections().length, 0);
  } finally {
    await caller.close();
    await relay.close();
    await listener.close();
  }
});

Deno.test("a caller's close reaches the listener as a shutdown", async () => {
  const { listener, accepted } = await listen();
  const caller = await connectSrt({ hostname: "127.0.0.1", port: listener.port });
  try {
    await waitUntil(() => accepted.length === 1, 2000, "accepted");
    await caller.close();
    assert.equal(await accepted[0].closed, "shutdown");
    assert.equal(await caller.closed, "closed");
  } finally {
    await listener.close();
  }
});

Deno.test("sequence numbers wrapping past 2^31 under 10% loss: every payload, in order", async () => {
  // A latency far above a loaded machine's event-loop stalls: this checks recovery, not timing.
  const { listener, received, accepted } = await listen({ latencyMs: 1000 });
  const relay = await LossRelay.open({ targetPort: listener.port, dropRatio: 0.1, seed: 3 });
  const caller = await connectSrt({
    hostname: "127.0.0.1",
    port: relay.port,
    streamId: "wrap",
    initialSeq: 0x7fffffff - 100,
    latencyMs: 1000,
  });
  const count = 200;
  try {
    for (let n = 0; n < count; n++) caller.send(new Uint8Array([n]));
    await waitUntil(() => received.get("wrap")?.length === count, 8000, `${count} payloads`);
    assert.deepEqual(received.get("wrap"), Array.from({ length: count }, (_, n) => n));
    assert.ok(relay.dropped > 5);
    const retransmitted = accepted[0].stats().received.retransmitted;
    assert.ok(retransmitted > 0 && retransmitted <= caller.stats().sent.retransmitted);
  } finally {
    await caller.close();
    await relay.close();
    await listener.close();
  }
});
