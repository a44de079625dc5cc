import assert from "node:assert/strict";
import { ServiceUnavailableError } from "../../../core/errors.ts";
import { UdpPortPool } from "./port_pool.ts";

Deno.test("port pool: disjoint pairs inside the range until it is full, then a 503", () => {
  const pool = new UdpPortPool(40000, 40009);
  const ports = [...Array(5)].map(() => pool.acquirePair());
  const all = ports.flatMap((p) => [p, p + 1]).sort((a, b) => a - b);
  assert.deepEqual(all, [...Array(10)].map((_, i) => 40000 + i), `pairs ${ports}`);
  assert.throws(() => pool.acquirePair(), ServiceUnavailableError);
  // A peer gives back the port it did not bind: an odd one out makes no pair yet.
  pool.release(ports[0] + 1);
  assert.throws(() => pool.acquirePair(), ServiceUnavailableError);
  pool.release(ports[0]);
  assert.equal(pool.acquirePair(), ports[0]);
  assert.equal(pool.heldCount, 10);
});

Deno.test("port pool: the cursor goes round, so a released pair is not reused at once", () => {
  const pool = new UdpPortPool(40000, 40099);
  const first = pool.acquirePair();
  pool.release(first);
  pool.release(first + 1);
  const second = pool.acquirePair();
  assert.notEqual(second, first);
  assert.ok(second >= 40000 && second + 1 <= 40099);
});
