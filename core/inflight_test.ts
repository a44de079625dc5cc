import assert from "node:assert/strict";
import { InflightTracker } from "./inflight.ts";

Deno.test("drain waits for in-flight requests and refuses new ones with 503", async () => {
  const tracker = new InflightTracker();
  const { promise: release, resolve } = Promise.withResolvers<void>();
  const handler = tracker.wrap(async () => {
    await release;
    return new Response("done");
  });
  const first = handler(new Request("http://x/"));
  assert.equal(tracker.inflight, 1);
  let drained = false;
  const drain = tracker.drain().then(() => drained = true);
  const refused = await handler(new Request("http://x/"));
  assert.equal(refused.status, 503);
  await refused.body?.cancel();
  await new Promise((r) => setTimeout(r, 20));
  assert.equal(drained, false);
  resolve();
  assert.equal(await (await first).text(), "done");
  await drain;
  assert.equal(drained, true);
});

Deno.test("drain gives up after its timeout", async () => {
  const tracker = new InflightTracker();
  const never = tracker.wrap(() => new Promise<Response>(() => {}));
  never(new Request("http://x/"));
  const started = performance.now();
  await tracker.drain(50);
  assert.ok(performance.now() - started >= 45);
});
