import assert from "node:assert/strict";
import { ConflictError, NotFoundError, ServiceUnavailableError } from "./errors.ts";
import { Cap } from "./limits.ts";
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

Deno.test("published streams take a slot of the streams cap, players none; remove gives it back once", () => {
  const cap = new Cap("streams", 1);
  const reg = new StreamRegistry(cap);
  const pub = fake("m1", "cam", true);
  reg.add(pub);
  reg.add(fake("m2", "cam", false));
  assert.throws(() => reg.add(fake("m3", "other", true)), (err) => {
    assert.ok(err instanceof ServiceUnavailableError);
    assert.equal(err.message, "streams limit of 1 reached");
    return true;
  });
  assert.equal(reg.published("other"), undefined);
  // A duplicate name is still a conflict, not a refusal.
  assert.throws(() => reg.add(fake("m4", "cam", true)), ConflictError);
  reg.remove(pub);
  reg.remove(pub);
  assert.deepEqual(cap.toJSON(), { current: 0, max: 1, refused: 1 });
  reg.add(fake("m3", "other", true));
  assert.equal(cap.current, 1);
});
