import assert from "node:assert/strict";
import { ConflictError, NotFoundError } from "./errors.ts";
import { type RegisteredStream, StreamRegistry } from "./stream_registry.ts";

function fake(mediaSessionId: string, name: string, published: boolean): RegisteredStream {
  return {
    mediaSessionId,
    name,
    published,
    record: () => ({ mediaSessionId, name }) as never,
    terminate: () => Promise.resolve(),
  };
}

Deno.test("one publisher per name, many players; duplicates are conflicts", () => {
  const reg = new StreamRegistry();
  const pub = fake("m1", "cam", true);
  reg.add(pub);
  reg.add(fake("m2", "cam", false));
  assert.throws(() => reg.add(fake("m3", "cam", true)), ConflictError);
  assert.throws(() => reg.add(fake("m1", "other", false)), ConflictError);
  assert.equal(reg.published("cam"), pub);
  assert.equal(reg.size, 2);
  reg.remove(pub);
  reg.remove(pub);
  assert.equal(reg.published("cam"), undefined);
  assert.throws(() => reg.get("m1"), NotFoundError);
  reg.add(fake("m3", "cam", true));
  assert.equal(reg.list().map((s) => s.mediaSessionId).join(), "m2,m3");
});
