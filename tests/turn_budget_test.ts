/**
 * The turn budget slices a burst of work that can wait: a timer due at once (what the control
 * plane's I/O waits behind) runs after one slice, not after the whole burst; the work runs in
 * arrival order, and a quiet event loop admits work at once. The server passes Web SDK
 * messages and REST operations through it.
 */
import assert from "node:assert/strict";
import { TurnBudget, turns } from "../core/turn_budget.ts";
import { startTestServer } from "./helpers/test_server.ts";
import { RawWsClient, upgradeRequest } from "./helpers/raw_ws_client.ts";
import { sdkConnectionObject } from "./helpers/wcs_client.ts";

/** Keeps the thread busy for `ms`, as a handshake's parsing and writing do. */
function busy(ms: number): void {
  const until = performance.now() + ms;
  while (performance.now() < until) {
    // Spinning on purpose.
  }
}

/** Starts `count` pieces of gated work of `workMs` each in one turn; gives their ends in order. */
function burst(budget: TurnBudget, count: number, workMs: number, ended: number[]): Promise<void> {
  return Promise.all(Array.from({ length: count }, async (_, i) => {
    const wait = budget.admit();
    if (wait) await wait;
    busy(workMs);
    ended.push(i);
  })).then(() => {});
}

Deno.test("a burst of 100 pieces of 1 ms work lets a timer due at once run after one slice", async () => {
  const budget = new TurnBudget(4);
  const ended: number[] = [];
  const all = burst(budget, 100, 1, ended);
  const endedBeforeTimer = await new Promise<number>((resolve) =>
    setTimeout(() => resolve(ended.length), 0)
  );
  await all;
  // Unsliced, all 100 ms of work ran before the timer; sliced, about 4 ms of it (twice that
  // at most: the slice the timer's own turn released).
  assert.ok(endedBeforeTimer <= 12, `${endedBeforeTimer} of 100 ran before a timer due at once`);
  assert.ok(budget.deferred >= 80, `${budget.deferred} deferred`);
  assert.deepEqual(ended, Array.from({ length: 100 }, (_, i) => i), "in arrival order");
  assert.equal(budget.waiting, 0);
});

Deno.test("work admitted after the loop went quiet runs at once", async () => {
  const budget = new TurnBudget(4);
  const ended: number[] = [];
  await burst(budget, 20, 1, ended);
  // A later turn, nothing waiting: a new slice starts with this work.
  await new Promise((r) => setTimeout(r, 10));
  assert.equal(budget.admit(), undefined);
  await new Promise((r) => setTimeout(r, 10));
  assert.equal(budget.waiting, 0);
});

Deno.test("the server slices the connection messages of 200 Web SDK clients and 200 REST operations at once", async () => {
  const server = await startTestServer();
  const clients = await Promise.all(
    Array.from({ length: 200 }, () => RawWsClient.connect(server.wsPort)),
  );
  try {
    await Promise.all(clients.map((c) => c.write(upgradeRequest())));
    const heads = await Promise.all(clients.map((c) => c.readHead()));
    assert.deepEqual(heads.filter((h) => !h.startsWith("HTTP/1.1 101")), []);
    const afterHandshakes = turns.deferred;
    await Promise.all(clients.map((c) => c.sendMessage("connection", sdkConnectionObject())));
    await Promise.all(clients.map((c) => c.next("getUserData")));
    const afterMessages = turns.deferred;
    const answers = await Promise.all(
      Array.from({ length: 200 }, () => server.post("/stream/find_all", {})),
    );
    assert.ok(answers.every((r) => r.status === 200));
    await Promise.all(answers.map((r) => r.body?.cancel()));
    assert.ok(afterMessages > afterHandshakes, "messages waited for a later turn");
    assert.ok(turns.deferred > afterMessages, "operations waited for a later turn");
  } finally {
    clients.forEach((c) => c.close());
    await server.stop();
  }
});
