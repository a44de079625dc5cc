import assert from "node:assert/strict";
import dgram from "node:dgram";
import { closeIceMux, openIceMux } from "./ice_mux_select.ts";
import { portPoolOf } from "./port_pool.ts";

const range = { host: "127.0.0.1", portMin: 41500, portMax: 41503 };

Deno.test("media.iceMux: off opens nothing; auto takes the range's first free port and holds it in the pool", async () => {
  assert.equal(openIceMux({ ...range, setting: "off", port: 0 }).mux, undefined);
  const blocker = dgram.createSocket("udp4");
  await new Promise<void>((resolve) => blocker.bind(41500, "127.0.0.1", resolve));
  const pool = portPoolOf(range.portMin, range.portMax);
  try {
    const { mux, reason } = openIceMux({ ...range, setting: "auto", port: 0 });
    assert.equal(mux?.port, 41501, "41500 is taken");
    assert.equal(reason, "libc loads over FFI");
    // Peers on ports of their own never get the mux's port: only the pair 41502-41503 is left.
    assert.equal(pool.acquirePair(), 41502);
    assert.throws(() => pool.acquirePair());
    pool.release(41502);
    pool.release(41503);
    await closeIceMux(mux!, range.portMin, range.portMax);
    assert.equal(pool.heldCount, 0);
  } finally {
    await new Promise<void>((resolve) => blocker.close(() => resolve()));
  }
});

Deno.test("media.iceMux: a configured port that is taken stops the start with AddrInUse", async () => {
  const { mux } = openIceMux({ ...range, setting: "on", port: 41502 });
  try {
    assert.equal(mux?.port, 41502);
    assert.throws(
      () => openIceMux({ ...range, setting: "on", port: 41502 }),
      (err: Error) => err instanceof Deno.errors.AddrInUse && /41502/.test(err.message),
    );
  } finally {
    await closeIceMux(mux!, range.portMin, range.portMax);
  }
});
