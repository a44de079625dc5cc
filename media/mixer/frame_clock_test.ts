import assert from "node:assert/strict";
import { FrameClock } from "./frame_clock.ts";

Deno.test("ticks count up and skip what a blocked event loop missed", async () => {
  const ticks: number[] = [];
  await new Promise<void>((resolve) => {
    const clock = new FrameClock(10, (index) => {
      ticks.push(index);
      if (ticks.length === 1) {
        const until = performance.now() + 55;
        while (performance.now() < until) { /* hold the event loop */ }
      }
      if (ticks.length === 3) {
        clock.close();
        resolve();
      }
    });
    clock.start();
  });
  // On a loaded machine even the first timer may come a tick late; what matters is the skip.
  assert.ok(ticks[0] <= 1, `first tick ${ticks[0]}`);
  assert.ok(ticks[1] >= ticks[0] + 5, `after a 55 ms stall the next tick is ${ticks[1]}`);
  assert.equal(ticks[2], ticks[1] + 1);
});

Deno.test("an interval that is not positive is refused", () => {
  assert.throws(() => new FrameClock(0, () => {}), RangeError);
});
