import assert from "node:assert/strict";
import { ParseError } from "../../../core/errors.ts";
import { prng } from "../../formats/test_fixtures.ts";
import {
  branchMagicCookie,
  formatVia,
  newBranch,
  newCallId,
  newTag,
  parseCSeq,
  parseVia,
} from "./headers.ts";

Deno.test("Via: transport upper-cased, sent-by, flag and valued params", () => {
  const v = parseVia(
    "SIP/2.0/udp 192.0.2.10:5060;branch=z9hG4bK776asdhds;rport;Received=192.0.2.99",
  );
  assert.equal(v.transport, "UDP");
  assert.equal(v.host, "192.0.2.10");
  assert.equal(v.port, 5060);
  assert.deepEqual([...v.params], [
    ["branch", "z9hG4bK776asdhds"],
    ["rport", ""],
    ["received", "192.0.2.99"],
  ]);
  assert.equal(
    formatVia(v),
    "SIP/2.0/UDP 192.0.2.10:5060;branch=z9hG4bK776asdhds;rport;received=192.0.2.99",
  );
  const answered = parseVia(
    "SIP/2.0/TCP client.example.com;branch=z9hG4bK1;rport=40123;received=198.51.100.7",
  );
  assert.equal(answered.port, undefined);
  assert.equal(answered.params.get("rport"), "40123");
  assert.equal(
    formatVia(answered),
    "SIP/2.0/TCP client.example.com;branch=z9hG4bK1;rport=40123;received=198.51.100.7",
  );
});

Deno.test("Via: spaces around the separators, IPv6, WS and unknown transports", () => {
  const v = parseVia(
    "SIP  /  2.0 / tls   [2001:db8::9:1] : 5061 ;  branch = z9hG4bKx ; received=[2001:db8::9:255]  ",
  );
  assert.equal(v.transport, "TLS");
  assert.equal(v.host, "2001:db8::9:1");
  assert.equal(v.port, 5061);
  assert.equal(v.params.get("branch"), "z9hG4bKx");
  assert.equal(v.params.get("received"), "[2001:db8::9:255]");
  assert.equal(
    formatVia(v),
    "SIP/2.0/TLS [2001:db8::9:1]:5061;branch=z9hG4bKx;received=[2001:db8::9:255]",
  );
  assert.equal(parseVia("sip/2.0/ws df7jal23ls0d.invalid;branch=z9hG4bKasudf").transport, "WS");
  assert.equal(parseVia("SIP/2.0/UNKNOWN t1.example.com;branch=z9hG4bKkdjuw").transport, "UNKNOWN");
  assert.equal(
    formatVia({
      transport: "udp",
      host: "::1",
      port: 5070,
      params: new Map([["branch", "z9hG4bK1"], ["rport", ""]]),
    }),
    "SIP/2.0/UDP [::1]:5070;branch=z9hG4bK1;rport",
  );
});

Deno.test("malformed Vias are ParseErrors", () => {
  for (
    const bad of [
      "",
      "SIP/2.0/UDP",
      "SIP/2.0/UDP ",
      "SIP/3.0/UDP h",
      "SIP/2.0 h",
      "HTTP/2.0/UDP h",
      "SIP/2.0/UDP h:",
      "SIP/2.0/UDP h:99999",
      "SIP/2.0/UDP h:50a",
      "SIP/2.0/UDP 2001:db8::1",
      "SIP/2.0/UDP [2001:db8::1",
      "SIP/2.0/UDP h;;branch=1",
      "SIP/2.0/UDP h;branch=1, SIP/2.0/UDP g",
      "SIP/2.0/UDP h junk",
      "SIP/2.0/UDP h;branch=",
      "SIP/2.0/UDP h;=1",
      "SIP/2.0/UDP bad_host!",
    ]
  ) {
    assert.throws(() => parseVia(bad), ParseError, JSON.stringify(bad));
  }
  assert.throws(() => formatVia({ transport: "U DP", host: "h", params: new Map() }), ParseError);
  assert.throws(() => formatVia({ transport: "UDP", host: "h h", params: new Map() }), ParseError);
  assert.throws(
    () => formatVia({ transport: "UDP", host: "h", params: new Map([["branch", "a;b"]]) }),
    ParseError,
  );
});

Deno.test("CSeq: number and method, range checked", () => {
  assert.deepEqual(parseCSeq("4711 INVITE"), { seq: 4711, method: "INVITE" });
  assert.deepEqual(parseCSeq(" 0009\t  ACK "), { seq: 9, method: "ACK" });
  assert.deepEqual(parseCSeq("2147483647 BYE"), { seq: 2147483647, method: "BYE" });
  for (
    const bad of [
      "",
      "INVITE",
      "1",
      "-1 INVITE",
      "2147483648 BYE",
      "1 IN VITE",
      "x INVITE",
      "1.5 ACK",
    ]
  ) {
    assert.throws(() => parseCSeq(bad), ParseError, bad);
  }
});

Deno.test("branches, tags and Call-IDs are random tokens", () => {
  const branches = new Set(Array.from({ length: 100 }, newBranch));
  assert.equal(branches.size, 100);
  for (const b of branches) {
    assert.ok(b.startsWith(branchMagicCookie));
    assert.match(b, /^z9hG4bK[0-9a-f]{16}$/);
    assert.equal(parseVia(`SIP/2.0/UDP h;branch=${b}`).params.get("branch"), b);
  }
  assert.match(newTag(), /^[0-9a-f]{16}$/);
  assert.notEqual(newTag(), newTag());
  assert.match(newCallId("192.0.2.10"), /^[0-9a-f]{32}@192\.0\.2\.10$/);
});

Deno.test("random Via and CSeq text: a ParseError or a value", () => {
  const rng = prng(3261);
  const seed = 'SIP / 2.0 / UDP [2001:db8::1]:5060 ; branch=z9hG4bK1 ; rport ; received="x"';
  const alphabet = ' \t/;:=,"[]\\.aZ09';
  for (let i = 0; i < 3000; i++) {
    const chars = [...seed];
    for (let e = 0; e < 1 + Math.floor(rng() * 4); e++) {
      chars[Math.floor(rng() * chars.length)] = alphabet[Math.floor(rng() * alphabet.length)];
    }
    const text = chars.join("").slice(0, Math.floor(rng() * (seed.length + 1)));
    for (const parse of [(t: string) => formatVia(parseVia(t)), parseCSeq]) {
      try {
        parse(text);
      } catch (err) {
        if (!(err instanceof ParseError)) throw err;
      }
    }
  }
});
