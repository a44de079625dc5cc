import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { ParseError } from "../../../core/errors.ts";
import { Authenticator, parseChallenge, pickChallenge } from "./auth.ts";

const md5 = (s: string) => createHash("md5").update(s).digest("hex");

function fields(value: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const m of value.matchAll(/(\w+)=(?:"([^"]*)"|([^,\s]+))/g)) out.set(m[1], m[2] ?? m[3]);
  return out;
}

Deno.test("digest without qop: the RFC 2617 response formula", () => {
  const challenge = pickChallenge([
    'Basic realm="cam"',
    'Digest realm="testrealm@host.com", nonce="dcd98b7102dd2f0e8b11d0f600bfb0c093", opaque="5ccc"',
  ])!;
  assert.equal(challenge.scheme, "digest");
  const value = new Authenticator("Mufasa", "Circle Of Life", challenge)
    .authorization("DESCRIBE", "rtsp://h/s");
  const f = fields(value);
  const ha1 = md5("Mufasa:testrealm@host.com:Circle Of Life");
  const ha2 = md5("DESCRIBE:rtsp://h/s");
  assert.equal(f.get("response"), md5(`${ha1}:dcd98b7102dd2f0e8b11d0f600bfb0c093:${ha2}`));
  assert.equal(f.get("opaque"), "5ccc");
  assert.equal(f.get("uri"), "rtsp://h/s");
});

Deno.test("digest with qop=auth: nc counts up and the response covers cnonce", () => {
  const challenge = parseChallenge('Digest realm="r", nonce="n", qop="auth,auth-int"')!;
  const auth = new Authenticator("u", "p", challenge);
  const first = fields(auth.authorization("PLAY", "rtsp://h/s"));
  const second = fields(auth.authorization("PLAY", "rtsp://h/s"));
  assert.equal(first.get("nc"), "00000001");
  assert.equal(second.get("nc"), "00000002");
  const expected = md5(
    `${md5("u:r:p")}:n:00000001:${first.get("cnonce")}:auth:${md5("PLAY:rtsp://h/s")}`,
  );
  assert.equal(first.get("response"), expected);
});

Deno.test("basic: base64 of user:password", () => {
  const auth = new Authenticator("admin", "pä", parseChallenge('Basic realm="x"')!);
  assert.equal(auth.authorization("DESCRIBE", "rtsp://h"), "Basic YWRtaW46cMOk");
});

Deno.test("a digest challenge without nonce, or with another algorithm, is refused", () => {
  assert.throws(() => parseChallenge('Digest realm="r"'), ParseError);
  assert.throws(
    () =>
      new Authenticator(
        "u",
        "p",
        parseChallenge('Digest realm="r", nonce="n", algorithm=SHA-256')!,
      ),
    ParseError,
  );
  assert.equal(parseChallenge("Bearer x=1"), undefined);
});
