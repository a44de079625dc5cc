import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { ParseError } from "../../../core/errors.ts";
import { parseChallenge } from "../rtsp/auth.ts";
import { authorizationFor } from "./digest.ts";

const md5 = (text: string) => createHash("md5").update(text).digest("hex");
const alice = { user: "alice", password: "s3cret" };

/** The parameters of an Authorization value (it has the challenge's syntax). */
function fields(value: string): Map<string, string> {
  const parsed = parseChallenge(value);
  assert.ok(parsed?.scheme === "digest");
  return parsed.params;
}

Deno.test("digest without qop: response = MD5(HA1:nonce:HA2), opaque echoed", () => {
  const value = authorizationFor(
    'Digest realm="asterisk", nonce="1f2e3d4c", opaque="5ccc069c", algorithm=MD5',
    alice,
    "REGISTER",
    "sip:pbx.example.com",
    1,
  );
  const ha1 = md5("alice:asterisk:s3cret");
  const ha2 = md5("REGISTER:sip:pbx.example.com");
  const f = fields(value);
  assert.equal(f.get("response"), md5(`${ha1}:1f2e3d4c:${ha2}`));
  assert.equal(f.get("username"), "alice");
  assert.equal(f.get("realm"), "asterisk");
  assert.equal(f.get("nonce"), "1f2e3d4c");
  assert.equal(f.get("uri"), "sip:pbx.example.com");
  assert.equal(f.get("algorithm"), "MD5");
  assert.equal(f.get("opaque"), "5ccc069c");
  assert.equal(f.has("qop"), false);
  assert.equal(f.has("nc"), false);
  assert.match(
    value,
    /^Digest username="alice", realm="asterisk", nonce="1f2e3d4c", uri="sip:pbx\.example\.com", response="[0-9a-f]{32}", algorithm=MD5, opaque="5ccc069c"$/,
  );
});

Deno.test("digest with qop=auth: nc as 8 hex digits, cnonce, the RFC 2617 qop response", () => {
  const value = authorizationFor(
    'Digest realm="sip.example.com", qop="auth,auth-int", nonce="dcd98b7102dd2f0e8b11d0f600bfb0c093"',
    { user: "bob", password: "zanzibar" },
    "INVITE",
    "sip:carol@example.com",
    26,
  );
  const f = fields(value);
  assert.equal(f.get("qop"), "auth");
  assert.equal(f.get("nc"), "0000001a");
  const cnonce = f.get("cnonce")!;
  assert.match(cnonce, /^[0-9a-f]{16}$/);
  const ha1 = md5("bob:sip.example.com:zanzibar");
  const ha2 = md5("INVITE:sip:carol@example.com");
  assert.equal(
    f.get("response"),
    md5(`${ha1}:dcd98b7102dd2f0e8b11d0f600bfb0c093:0000001a:${cnonce}:auth:${ha2}`),
  );
  assert.equal(f.has("opaque"), false);
  const other = fields(
    authorizationFor('Digest realm="r", nonce="n", qop=auth', alice, "BYE", "sip:x@y", 1),
  );
  assert.notEqual(other.get("cnonce"), cnonce);
  assert.equal(other.get("nc"), "00000001");
});

Deno.test("the RFC 2617 §3.5 example answer (without qop's cnonce part)", () => {
  // Same hashes as RFC 2617's example, computed by hand: HA1 of Mufasa, HA2 of GET.
  const value = authorizationFor(
    'Digest realm="testrealm@host.com", nonce="dcd98b7102dd2f0e8b11d0f600bfb0c093", opaque="5ccc069c403ebaf9f0171e9517f40e41"',
    { user: "Mufasa", password: "Circle Of Life" },
    "GET",
    "/dir/index.html",
    1,
  );
  const ha1 = "939e7578ed9e3c518a452acee763bce9";
  const ha2 = "39aff3a2bab6126f332b942af96d3366";
  assert.equal(md5("Mufasa:testrealm@host.com:Circle Of Life"), ha1);
  assert.equal(md5("GET:/dir/index.html"), ha2);
  assert.equal(
    fields(value).get("response"),
    md5(`${ha1}:dcd98b7102dd2f0e8b11d0f600bfb0c093:${ha2}`),
  );
});

Deno.test("quotes and backslashes in user and realm are escaped", () => {
  const value = authorizationFor(
    'Digest realm="a \\"quoted\\" realm", nonce="n"',
    { user: 'we"ird\\', password: "p" },
    "REGISTER",
    "sip:h",
    1,
  );
  const f = fields(value);
  assert.equal(f.get("username"), 'we"ird\\');
  assert.equal(f.get("realm"), 'a "quoted" realm');
  assert.equal(
    f.get("response"),
    md5(`${md5('we"ird\\:a "quoted" realm:p')}:n:${md5("REGISTER:sip:h")}`),
  );
});

Deno.test("unusable challenges are ParseErrors", () => {
  for (
    const bad of [
      "",
      'Basic realm="r"',
      'Bearer realm="r"',
      'Digest nonce="n"',
      'Digest realm="r"',
      'Digest realm="r", nonce="n", algorithm=SHA-256',
      'Digest realm="r", nonce="n", algorithm=MD5-sess',
      'Digest realm="r", nonce="n", qop="auth-int"',
      'Digest realm="r" nonce',
      'Digest realm="unterminated, nonce="n',
    ]
  ) {
    assert.throws(() => authorizationFor(bad, alice, "REGISTER", "sip:h", 1), ParseError, bad);
  }
  assert.throws(
    () => authorizationFor('Digest realm="r", nonce="n", qop=auth', alice, "REGISTER", "sip:h", 0),
    RangeError,
  );
});
