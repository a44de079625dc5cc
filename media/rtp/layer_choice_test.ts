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

Deno.test("an estimate under the forwarded rate lowers at once to the layer that fits", () => {
  const c = new LayerChoice(3, { upHoldMs: 1000, layerWarmupMs: 0, overuseHoldMs: 0 });
  c.onEstimate(600, 0);
  assert.equal(c.choose(allAlive, kbps, 0), 1, "1500 > 600: the highest within 0.85 x 600");
  c.onEstimate(100, 500);
  assert.equal(c.choose(allAlive, kbps, 500), 0, "even the lowest does not fit: the lowest");
  c.onLoss(0, 600);
  c.onEstimate(600, 1000);
  assert.equal(c.choose(allAlive, kbps, 1000), 0, "up only after the stable time");
  assert.equal(c.choose(allAlive, kbps, 1500), 1, "500 fits 0.85 x 600");
  c.onLoss(0, 2000);
  assert.equal(c.choose(allAlive, kbps, 3000), 1, "1500 does not fit, 600 < 1.3 x 500");
  c.onEstimate(2000, 3500);
  assert.equal(c.choose(allAlive, kbps, 3500), 2);
  c.onEstimate(1400, 3600);
  assert.equal(c.choose(allAlive, kbps, 3600), 1, "down at once, with no hold");
});

Deno.test("an estimate that only follows the incoming rate lets the next layer be tried", () => {
  const c = new LayerChoice(3, { upHoldMs: 1000, layerWarmupMs: 0, overuseHoldMs: 0 });
  c.onLoss(0, 0);
  c.onEstimate(100, 0);
  assert.equal(c.choose(allAlive, kbps, 0), 0);
  // A browser's estimate stays near 1.5 x what it receives: 220 for 150 kbit/s.
  c.onEstimate(220, 500);
  assert.equal(c.choose(allAlive, kbps, 900), 0, "the stable time has not passed");
  assert.equal(c.choose(allAlive, kbps, 1000), 1, "tried: 220 >= 1.3 x 150");
  // The try congests: the estimate falls under 500, back down at once.
  c.onEstimate(400, 1200);
  assert.equal(c.choose(allAlive, kbps, 1200), 0);
  c.onEstimate(220, 1300);
  assert.equal(c.choose(allAlive, kbps, 2200), 0, "a refused try doubles the wait");
  assert.equal(c.choose(allAlive, kbps, 3200), 1, "tried again after 2 s");
  c.onEstimate(760, 3300);
  assert.equal(c.choose(allAlive, kbps, 4199), 1, "the try has not held for 1 s yet");
  assert.equal(c.choose(allAlive, kbps, 4300), 2, "it held: 1 s wait, 760 >= 1.3 x 500");
});

Deno.test("an estimate under the rate for one rate window (a keyframe's burst) lowers nothing", () => {
  const c = new LayerChoice(3, { overuseHoldMs: 1500 });
  c.onEstimate(2000, 0);
  assert.equal(c.choose(allAlive, kbps, 0), 2);
  // A keyframe makes the top layer measure 2400 kbit/s for one window.
  assert.equal(c.choose(allAlive, [150, 500, 2400], 100), 2);
  assert.equal(c.choose(allAlive, [150, 500, 2400], 1100), 2);
  assert.equal(c.choose(allAlive, kbps, 1200), 2, "back under the estimate: forgotten");
  assert.equal(c.choose(allAlive, [150, 500, 2400], 1300), 2);
  assert.equal(c.choose(allAlive, [150, 500, 2400], 2799), 2);
  assert.equal(c.choose(allAlive, [150, 500, 2400], 2800), 1, "over for 1.5 s: lowered");
});

Deno.test("the manual cap bounds what the estimate allows", () => {
  const c = new LayerChoice(3, { upHoldMs: 1000, layerWarmupMs: 0, overuseHoldMs: 0 });
  c.onLoss(0, 0);
  c.setCap(1);
  c.onEstimate(10_000, 0);
  assert.equal(c.choose(allAlive, kbps, 0), 1, "the estimate allows the top, the cap does not");
  assert.equal(c.choose(allAlive, kbps, 5000), 1);
  c.onEstimate(600, 5010);
  assert.equal(c.choose(allAlive, kbps, 5010), 1, "600 tells nothing of the top layer, not sent");
  c.setCap(2);
  c.onEstimate(2000, 5020);
  assert.equal(c.choose(allAlive, kbps, 5020), 2, "raising the cap restores the top at once");
  c.onEstimate(1000, 5030);
  assert.equal(c.choose(allAlive, kbps, 5030), 1, "the estimate refuses it");
  c.setCap(1);
  c.onEstimate(100, 5100);
  assert.equal(c.choose(allAlive, kbps, 5100), 0, "the estimate lowers under the cap");
  c.setCap(2);
  assert.equal(c.choose(allAlive, kbps, 5200), 0, "a raised cap does not override the estimate");
  c.onEstimate(10_000, 5300);
  assert.equal(c.choose(allAlive, kbps, 6100), 0, "stable since the last low estimate (5200)");
  assert.equal(c.choose(allAlive, kbps, 6200), 1);
  assert.equal(c.choose(allAlive, kbps, 7200), 2);
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
