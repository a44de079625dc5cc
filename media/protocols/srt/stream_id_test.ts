import assert from "node:assert/strict";
import { ParseError } from "../../../core/errors.ts";
import { parseStreamId } from "./stream_id.ts";

Deno.test("stream id: access control list, plain names, MediaMTX prefixes", () => {
  assert.deepEqual(parseStreamId("#!::r=live/cam1,m=publish,u=alice"), {
    resource: "live/cam1",
    mode: "publish",
    user: "alice",
    session: undefined,
    host: undefined,
    type: undefined,
    params: { r: "live/cam1", m: "publish", u: "alice" },
  });
  assert.equal(parseStreamId("#!::m=request,r=vod1").mode, "request");
  assert.equal(parseStreamId("#!::h=example.com,r=a=b").resource, "a=b");
  assert.deepEqual(parseStreamId("cam1"), { resource: "cam1", params: {} });
  assert.deepEqual(parseStreamId(""), { resource: "", params: {} });
  assert.deepEqual(parseStreamId("read:cam1"), { resource: "cam1", mode: "request", params: {} });
  assert.equal(parseStreamId("publish:a/b").mode, "publish");
  assert.throws(() => parseStreamId("#!::r=x,m=play"), ParseError);
  assert.throws(() => parseStreamId("#!::r=x,junk"), ParseError);
});
