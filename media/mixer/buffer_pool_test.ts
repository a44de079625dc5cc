import assert from "node:assert/strict";
import { BufferPool } from "./buffer_pool.ts";

Deno.test("buffer pool: reuses by size, keeps at most its count per size and its bytes, never one twice", () => {
  const pool = new BufferPool(2, 300);
  const [a, b, c] = [pool.take(100), pool.take(100), pool.take(100)];
  const big = pool.take(200);
  // a and b kept; c is one more than two of a size, a again is not kept twice.
  for (const buffer of [a, b, c, a]) pool.give(buffer);
  // 200 bytes kept: 200 more would pass the 300.
  pool.give(big);
  assert.notEqual(pool.take(200), big);
  assert.deepEqual([pool.take(100), pool.take(100)], [b, a]);
  const fresh = pool.take(100);
  assert.ok(![a, b, c].includes(fresh));
  // Taken back out, the bytes are free again.
  pool.give(big);
  assert.equal(pool.take(200), big);
});
