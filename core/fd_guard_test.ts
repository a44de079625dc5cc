import assert from "node:assert/strict";
import { DescriptorGuard } from "./fd_guard.ts";
import { openFiles } from "./fd_limit.ts";

Deno.test("the descriptor guard counts a REST connection once, not each of its requests", () => {
  const files = openFiles();
  assert.ok(files, "descriptors can be counted (FFI)");
  // A floor leaving room for 3 more descriptors: reserve = 4 × floor, floor = limit - open - 3.
  const floor = files.limit - files.open - 3;
  const guard = new DescriptorGuard(floor * 4);
  assert.equal(guard.requestFloor, floor);
  const a = { hostname: "127.0.0.1", port: 40_001 };
  // The first call counts the open descriptors; the next ones come well within 100 ms.
  for (let i = 0; i < 5; i++) assert.equal(guard.admitRequest({ ...a }), true, `a #${i}`);
  assert.equal(guard.admitRequest({ hostname: "127.0.0.1", port: 40_002 }), true, "b");
  // Another address on a's port is another connection: counted too, the last room taken.
  assert.equal(guard.admitRequest({ hostname: "127.0.0.2", port: 40_001 }), true, "c");
  assert.equal(guard.admitRequest({ hostname: "127.0.0.1", port: 40_003 }), false, "d");
  assert.equal(guard.admitRequest(a), false, "past the floor, known peers are refused too");
});
