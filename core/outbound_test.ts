import assert from "node:assert/strict";
import { ForbiddenError } from "./errors.ts";
import { isHostPattern, OutboundPolicy } from "./outbound.ts";

Deno.test("no pattern allows every host", () => {
  assert.ok(new OutboundPolicy([]).allows("169.254.169.254"));
});

Deno.test("globs match label by label, case-insensitively", () => {
  const policy = new OutboundPolicy(["cam*.example.com", "10.0.0.*", "Media.Local"]);
  assert.ok(policy.allows("cam1.example.com"));
  assert.ok(policy.allows("CAM-front.Example.COM."));
  assert.ok(!policy.allows("cam1.example.com.evil.net"));
  assert.ok(!policy.allows("x.cam1.example.com"));
  assert.ok(!policy.allows("camexample.com"));
  assert.ok(policy.allows("10.0.0.7"));
  assert.ok(!policy.allows("10.0.1.7"));
  assert.ok(policy.allows("media.local"));
  assert.ok(!policy.allows("127.0.0.1"));
});

Deno.test("CIDR patterns match IPv4 literals; inet_aton forms never pass", () => {
  const policy = new OutboundPolicy(["192.168.0.0/16", "127.0.0.1/32", "*"]);
  assert.ok(policy.allows("192.168.44.2"));
  assert.ok(!policy.allows("192.169.0.1"));
  assert.ok(policy.allows("127.0.0.1"));
  assert.ok(!policy.allows("127.0.0.2"));
  assert.ok(policy.allows("localhost"), "`*` is one label");
  assert.ok(!policy.allows("2130706433"), "decimal form of 127.0.0.1");
  assert.ok(!policy.allows("0x7f.1"));
  assert.ok(!policy.allows("0177.0.0.1"));
  assert.ok(new OutboundPolicy(["0.0.0.0/0"]).allows("8.8.8.8"));
});

Deno.test("IPv6 literals match exactly, with or without brackets", () => {
  const policy = new OutboundPolicy(["::1"]);
  assert.ok(policy.allows("[::1]"));
  assert.ok(policy.allows("::1"));
  assert.ok(!policy.allows("::2"));
});

Deno.test("check throws a 403 naming the field", () => {
  const policy = new OutboundPolicy(["10.0.0.*"]);
  assert.throws(() => policy.check("127.0.0.1", "uri"), (err) => {
    assert.ok(err instanceof ForbiddenError);
    assert.deepEqual(err.toJSON(), {
      error: "forbidden",
      field: "uri",
      message: "host 127.0.0.1 is not in outbound.allowedHosts",
    });
    return true;
  });
  policy.check("10.0.0.1", "uri");
});

Deno.test("isHostPattern refuses malformed CIDRs", () => {
  assert.ok(isHostPattern("10.0.0.0/8"));
  assert.ok(isHostPattern("*.example.com"));
  assert.ok(!isHostPattern("10.0.0/8"));
  assert.ok(!isHostPattern("10.0.0.0/33"));
  assert.ok(!isHostPattern("example.com/8"));
  assert.ok(!isHostPattern(" "));
});
