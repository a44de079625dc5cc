import assert from "node:assert/strict";
import { Connection } from "werift";
import { installNoDefaultStun } from "./no_default_stun.ts";

Deno.test("an ICE connection given no STUN server has none (werift would use Google's)", () => {
  const stunOf = (options: object) =>
    (new Connection(true, options) as unknown as { stunServer: unknown }).stunServer;
  assert.deepEqual(stunOf({}), ["stun.l.google.com", 19302]);
  installNoDefaultStun();
  assert.equal(stunOf({}), undefined);
  assert.deepEqual(stunOf({ stunServer: ["127.0.0.1", 3478] }), ["127.0.0.1", 3478]);
});
