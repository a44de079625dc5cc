import assert from "node:assert/strict";
import { PortPool } from "./port_pool.ts";

Deno.test("PortPool skips busy and held ports, goes round the range, and refuses when full", async () => {
  const pool = new PortPool(100, 103);
  const busy = new Set([101]);
  const bind = (port: number) => Promise.resolve(busy.has(port) ? undefined : `socket${port}`);
  assert.deepEqual(await pool.take(bind), { port: 100, value: "socket100" });
  assert.deepEqual(await pool.take(bind), { port: 102, value: "socket102" });
  assert.deepEqual(await pool.take(bind), { port: 103, value: "socket103" });
  assert.equal(await pool.take(bind), undefined, "101 is busy, the others held");
  pool.release(100);
  busy.clear();
  // The refused search went once round the range: it goes on at 100, then 101 (free now).
  assert.equal((await pool.take(bind))?.port, 100);
  assert.equal((await pool.take(bind))?.port, 101);
  pool.release(102);
  pool.release(100);
  // After 101 comes 102: a port just freed (100) is taken last.
  assert.equal((await pool.take(bind))?.port, 102);
  assert.equal((await pool.take(bind))?.port, 100);
});

Deno.test("PortPool: concurrent takes never try the same port", async () => {
  const pool = new PortPool(200, 201);
  const tried: number[] = [];
  const slowBind = async (port: number) => {
    tried.push(port);
    await new Promise((r) => setTimeout(r, 10));
    return port;
  };
  const [a, b, c] = await Promise.all([
    pool.take(slowBind),
    pool.take(slowBind),
    pool.take(slowBind),
  ]);
  assert.deepEqual([a?.port, b?.port, c], [200, 201, undefined]);
  assert.deepEqual(tried, [200, 201]);
});
