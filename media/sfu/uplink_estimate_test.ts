import assert from "node:assert/strict";
import { UplinkEstimate, uplinkMinKbps } from "./uplink_estimate.ts";

Deno.test("the uplink estimate is the cap without loss, cut by loss, grown back when clean", () => {
  const e = new UplinkEstimate(2500);
  assert.equal(e.update(100, 100, 900, 0), 2500);
  assert.equal(e.update(200, 199, 900, 500), 2500, "1% loss: clean, at the cap");
  assert.equal(e.update(300, 294, 900, 1000), 2500, "5% loss: held");
  // 20% loss while 900 kbit/s arrive: what arrives, less half the loss.
  assert.equal(e.update(400, 374, 900, 1500), 810);
  assert.equal(e.update(500, 474, 800, 2500), 810 * 1.08, "clean for 1 s: 8% more");
  assert.equal(e.update(500, 474, 800, 3000), 810 * 1.08, "no packets: unchanged");
  let t = 3000;
  let n = 500;
  while (e.kbps < 2500) e.update(n += 100, n - 26, 800, t += 1000);
  assert.equal(e.kbps, 2500, "never above the cap");
  assert.ok(t <= 3000 + 16_000, `${t}`);
  assert.equal(e.update(n + 100, n - 16, 50, t + 1000), uplinkMinKbps, "never under the floor");
  // A layer restarted under a new SSRC: the counts go back, nothing is read into it.
  assert.equal(e.update(10, 10, 800, t + 2000), uplinkMinKbps);
});
