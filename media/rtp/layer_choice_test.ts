import assert from "node:assert/strict";
import { LayerChoice, orderRids } from "./layer_choice.ts";

const allAlive = [true, true, true];
const kbps = [150, 500, 1500];

Deno.test("heavy loss steps down one layer at a time, brief loss does not flap", () => {
  const c = new LayerChoice(3);
  assert.equal(c.choose(allAlive, kbps, 0), 2);
  c.onLoss(0.05, 1000); // moderate: no change
  assert.equal(c.choose(allAlive, kbps, 1000), 2);
  c.onLoss(0.2, 2000);
  assert.equal(c.choose(allAlive, kbps, 2000), 1);
  c.onLoss(0.2, 3000); // within the hold: no second step yet
  assert.equal(c.choose(allAlive, kbps, 3000), 1);
  c.onLoss(0.2, 4100);
  assert.equal(c.choose(allAlive, kbps, 4100), 0);
  c.onLoss(0.3, 7000);
  assert.equal(c.choose(allAlive, kbps, 7000), 0, "nothing under the lowest layer");
});

Deno.test("clean reports climb back one layer per hold, a loss resets the wait", () => {
  const c = new LayerChoice(3, { upHoldMs: 8000 });
  c.choose(allAlive, kbps, 0);
  c.onLoss(0.2, 0);
  assert.equal(c.choose(allAlive, kbps, 0), 1);
  for (let t = 1000; t <= 7000; t += 1000) c.onLoss(0, t);
  assert.equal(c.choose(allAlive, kbps, 7000), 1, "not clean for long enough");
  c.onLoss(0.05, 7500); // not clean: the wait starts again
  c.onLoss(0, 9000);
  assert.equal(c.choose(allAlive, kbps, 9000), 1);
  c.onLoss(0, 15600);
  assert.equal(c.choose(allAlive, kbps, 15600), 2);
});

Deno.test("a bandwidth estimate lowers at once to the layer that fits and caps the climb", () => {
  const c = new LayerChoice(3, { upHoldMs: 1000 });
  c.onEstimate(700, 0);
  assert.equal(c.choose(allAlive, kbps, 0), 1);
  c.onEstimate(100, 500);
  assert.equal(c.choose(allAlive, kbps, 500), 0, "even the lowest does not fit: the lowest");
  c.onLoss(0, 600);
  c.onEstimate(700, 2000);
  assert.equal(c.choose(allAlive, kbps, 2000), 1);
  c.onLoss(0, 3000);
  assert.equal(c.choose(allAlive, kbps, 3500), 1, "the top layer does not fit 700 kbit/s");
  c.onEstimate(2000, 4000);
  assert.equal(c.choose(allAlive, kbps, 4600), 2);
});

Deno.test("the manual cap bounds the choice and dead layers are skipped", () => {
  const c = new LayerChoice(3);
  c.setCap(1);
  assert.equal(c.choose(allAlive, kbps, 0), 1);
  c.setCap(5);
  assert.equal(c.cap, 2);
  assert.equal(c.choose([true, true, false], kbps, 0), 1, "the top layer is dead");
  c.setCap(0);
  assert.equal(c.choose([false, true, true], kbps, 0), 1, "the lowest alive above the cap");
  assert.equal(c.choose([false, false, false], kbps, 0), -1);
});

Deno.test("rids are ordered lowest quality first", () => {
  assert.deepEqual(orderRids(["h", "m", "l"]), ["l", "m", "h"]);
  assert.deepEqual(orderRids(["720p", "180p", "360p"]), ["180p", "360p", "720p"]);
  assert.deepEqual(orderRids(["f", "h", "q"]), ["q", "h", "f"]);
  assert.deepEqual(orderRids(["a", "b"]), ["a", "b"]);
});

Deno.test("a layer that comes back is moved up to only after its warm-up", () => {
  const c = new LayerChoice(3, { layerWarmupMs: 2000 });
  assert.equal(c.choose([true, true, true], kbps, 0), 2, "at the start every layer is as new");
  assert.equal(c.choose([true, true, false], kbps, 100), 1, "the top layer paused");
  assert.equal(c.choose([true, true, true], kbps, 5000), 1, "back, but only just");
  assert.equal(c.choose([true, true, true], kbps, 6900), 1);
  assert.equal(c.choose([true, true, true], kbps, 7000), 2);
  assert.equal(c.choose([true, true, false], kbps, 7100), 1, "down at once");
});
