/**
 * The accept loop under a burst: a full backlog is not drained in one go, so timers and other
 * I/O (the REST listener's /health) get their turn between batches of `acceptsPerTurn`.
 */
import assert from "node:assert/strict";
import { acceptLoop, acceptsPerTurn } from "../core/accept_loop.ts";
import { silentLogger } from "../core/log.ts";

Deno.test("a backlog of 200 connections is accepted in batches, a timer runs between them", async () => {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const { port } = listener.addr as Deno.NetAddr;
  const clients = await Promise.all(
    Array.from({ length: 200 }, () => Deno.connect({ hostname: "127.0.0.1", port })),
  );
  let accepted = 0;
  let acceptedBeforeTimer = -1;
  let closing = false;
  const timerRan = new Promise<void>((resolve) =>
    setTimeout(() => {
      acceptedBeforeTimer = accepted;
      resolve();
    }, 0)
  );
  const loop = acceptLoop(
    listener,
    (conn) => {
      accepted++;
      conn.close();
    },
    silentLogger,
    () => closing,
  );
  try {
    await timerRan;
    // One batch, not the backlog (drained in one go, over a hundred were accepted first).
    assert.ok(acceptsPerTurn <= 16);
    assert.ok(
      acceptedBeforeTimer <= acceptsPerTurn,
      `${acceptedBeforeTimer} accepted before a timer due at once ran`,
    );
    while (accepted < clients.length) await new Promise((r) => setTimeout(r, 10));
  } finally {
    closing = true;
    listener.close();
    await loop;
    clients.forEach((c) => c.close());
  }
});
