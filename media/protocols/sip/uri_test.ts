import assert from "node:assert/strict";
import { ParseError } from "../../../core/errors.ts";
import { prng } from "../../formats/test_fixtures.ts";
import {
  formatNameAddr,
  formatSipUri,
  parseNameAddr,
  parseSipUri,
  type SipUri,
  splitNameAddr,
} from "./uri.ts";

const uri = (parts: Partial<SipUri> & { host: string }): SipUri => ({
  scheme: "sip",
  params: new Map(),
  headers: new Map(),
  ...parts,
});

Deno.test("a SIP URI with every part", () => {
  const u = parseSipUri(
    "SIPS:alice:secret@Atlanta.Example.com:5061;Transport=TLS;lr;maddr=239.255.255.1?subject=project%20x&priority=urgent",
  );
  assert.equal(u.scheme, "sips");
  assert.equal(u.user, "alice");
  assert.equal(u.password, "secret");
  assert.equal(u.host, "Atlanta.Example.com");
  assert.equal(u.port, 5061);
  assert.deepEqual([...u.params], [["transport", "TLS"], ["lr", ""], ["maddr", "239.255.255.1"]]);
  assert.deepEqual([...u.headers], [["subject", "project x"], ["priority", "urgent"]]);
  assert.equal(
    formatSipUri(u),
    "sips:alice:secret@Atlanta.Example.com:5061;transport=TLS;lr;maddr=239.255.255.1?subject=project%20x&priority=urgent",
  );
});

Deno.test("minimal URIs, telephone users, IPv6 hosts", () => {
  assert.deepEqual(parseSipUri("sip:example.com"), uri({ host: "example.com" }));
  assert.deepEqual(
    parseSipUri("sip:+1-212-555-1212:1234@gateway.com;user=phone"),
    uri({
      user: "+1-212-555-1212",
      password: "1234",
      host: "gateway.com",
      params: new Map([["user", "phone"]]),
    }),
  );
  const v6 = parseSipUri("sip:bob@[2001:db8::1]:5070;transport=udp");
  assert.equal(v6.host, "2001:db8::1");
  assert.equal(v6.port, 5070);
  assert.equal(formatSipUri(v6), "sip:bob@[2001:db8::1]:5070;transport=udp");
  assert.equal(parseSipUri("sip:[::ffff:192.0.2.1]").host, "::ffff:192.0.2.1");
  assert.equal(parseSipUri("sip:[::1]").host, "::1");
  assert.equal(formatSipUri(uri({ host: "fe80::1", port: 5060 })), "sip:[fe80::1]:5060");
});

Deno.test("escapes decode on parse and are written where needed", () => {
  const u = parseSipUri("sip:sips%3Auser%40example.com@example.net");
  assert.equal(u.user, "sips:user@example.com");
  assert.equal(formatSipUri(u), "sip:sips%3Auser%40example.com@example.net");
  assert.equal(parseSipUri("sip:%61lice@h").user, "alice");
  assert.equal(formatSipUri(parseSipUri("sip:%61lice@h")), "sip:alice@h");
  assert.equal(parseSipUri("sip:%00@h").user, "\0");
  assert.equal(formatSipUri(uri({ user: "I have spaces", host: "h" })), "sip:I%20have%20spaces@h");
  assert.equal(formatSipUri(uri({ user: "jürgen", host: "h" })), "sip:j%C3%BCrgen@h");
  assert.equal(parseSipUri("sip:j%C3%BCrgen@h").user, "jürgen");
  // The user part keeps ; ? / & = + $ , plain (RFC 3261 user-unreserved).
  const odd = parseSipUri("sip:user;par=u%40example.net@example.com");
  assert.equal(odd.user, "user;par=u@example.net");
  assert.equal(odd.params.size, 0);
  assert.equal(formatSipUri(odd), "sip:user;par=u%40example.net@example.com");
  const p = parseSipUri("sip:h;%6C%72;n%61me=v%61lue%25%34%31");
  assert.deepEqual([...p.params], [["lr", ""], ["name", "value%41"]]);
  assert.equal(formatSipUri(p), "sip:h;lr;name=value%2541");
  const replaces = parseSipUri("sip:bob@h?Replaces=abc%40h%3Bto-tag%3D1%3Bfrom-tag%3D2");
  assert.equal(replaces.headers.get("Replaces"), "abc@h;to-tag=1;from-tag=2");
  assert.equal(formatSipUri(replaces), "sip:bob@h?Replaces=abc%40h%3Bto-tag%3D1%3Bfrom-tag%3D2");
  const weird =
    "sip:1_unusual.URI~(to-be!sure)&isn't+it$/crazy?,/;;*:&it+has=1,weird!*pas$wo~d_too.(doesn't-it)@example.com";
  const w = parseSipUri(weird);
  assert.equal(w.user, "1_unusual.URI~(to-be!sure)&isn't+it$/crazy?,/;;*");
  assert.equal(w.password, "&it+has=1,weird!*pas$wo~d_too.(doesn't-it)");
  assert.equal(formatSipUri(w), weird);
});

Deno.test("malformed URIs are ParseErrors", () => {
  for (
    const bad of [
      "",
      "sip:",
      "tel:+1555",
      "http://example.com",
      "sip:@h",
      "sip:a@b@c",
      "sip:user@",
      "sip:user@host:",
      "sip:user@host:5o60",
      "sip:user@host:65536",
      "sip:user@host:123456",
      "sip:2001:db8::10",
      "sip:[2001:db8::10",
      "sip:[2001:db8:::1]",
      "sip:[1:2:3:4:5:6:7:8:9]",
      "sip:[example.com]",
      "sip:[1.2.3.4::]",
      "sip:user@ho st",
      "sip:us er@host",
      'sip:us"er@host',
      "sip:user@host;;lr",
      "sip:user@host;=x",
      "sip:user@host;a=b c",
      "sip:user@host?",
      "sip:user@host?a",
      "sip:user@host?=b",
      "sip:%4@host",
      "sip:%zz@host",
      "sip:%ff@host",
      "sip:user@ho%41st",
      "sip:user@host\x00",
      "sip:user@-",
      "sip:<user>@host",
    ]
  ) {
    assert.throws(() => parseSipUri(bad), ParseError, JSON.stringify(bad));
  }
  assert.throws(() => formatSipUri(uri({ host: "bad host" })), ParseError);
  assert.throws(() => formatSipUri(uri({ host: "h", port: 70000 })), ParseError);
  assert.throws(() => formatSipUri(uri({ host: "h", user: "" })), ParseError);
});

Deno.test("name-addr and addr-spec forms", () => {
  const a = parseNameAddr(
    ' "Bob \\"B\\" Smith"  <sip:bob@biloxi.example.com;transport=tcp> ; tag = a6c85cf ;Expires=60',
  );
  assert.equal(a.displayName, 'Bob "B" Smith');
  assert.equal(a.uri.user, "bob");
  assert.deepEqual([...a.uri.params], [["transport", "tcp"]]);
  assert.deepEqual([...a.params], [["tag", "a6c85cf"], ["expires", "60"]]);
  assert.equal(
    formatNameAddr(a),
    '"Bob \\"B\\" Smith" <sip:bob@biloxi.example.com;transport=tcp>;tag=a6c85cf;expires=60',
  );
  // Params after an addr-spec belong to the header, not to the URI.
  const b = parseNameAddr("sip:alice@atlanta.example.com;tag=88sja8x;lr");
  assert.equal(b.displayName, undefined);
  assert.equal(b.uri.params.size, 0);
  assert.deepEqual([...b.params], [["tag", "88sja8x"], ["lr", ""]]);
  assert.equal(formatNameAddr(b), "<sip:alice@atlanta.example.com>;tag=88sja8x;lr");
  const c = parseNameAddr("Anonymous <sip:c8oqz84zk7z@privacy.org>;tag=hyh8");
  assert.equal(c.displayName, "Anonymous");
  const d = parseNameAddr("caller<sip:caller@example.com>;tag=323");
  assert.equal(d.displayName, "caller");
  const e = parseNameAddr(
    '<sip:a@[2001:db8::1]>;+sip.instance="<urn:uuid:f81d4fae-7dec-11d0-a765-00a0c91e6bf6>";reg-id=1',
  );
  assert.equal(e.params.get("+sip.instance"), '"<urn:uuid:f81d4fae-7dec-11d0-a765-00a0c91e6bf6>"');
  assert.equal(
    formatNameAddr(e),
    '<sip:a@[2001:db8::1]>;+sip.instance="<urn:uuid:f81d4fae-7dec-11d0-a765-00a0c91e6bf6>";reg-id=1',
  );
  const refer = parseNameAddr("<sip:carol@h?Replaces=x%40h%3Bto-tag%3D1>");
  assert.equal(refer.uri.headers.get("Replaces"), "x@h;to-tag=1");
  const quoted = parseNameAddr('"" <sip:x@h>');
  assert.equal(quoted.displayName, "");
  assert.equal(formatNameAddr(quoted), "<sip:x@h>");
  assert.equal(parseNameAddr("Bob   Smith <sip:b@h>").displayName, "Bob Smith");
  assert.equal(parseNameAddr("Алиса <sip:a@h>").displayName, "Алиса");
  assert.deepEqual(splitNameAddr("<tel:+15551234>;tag=1"), {
    uriText: "tel:+15551234",
    params: new Map([["tag", "1"]]),
  });
});

Deno.test("malformed name-addrs are ParseErrors", () => {
  for (
    const bad of [
      "",
      "<>",
      "<sip:a@h",
      '"Bob <sip:b@h>',
      '"Bob" sip:b@h',
      '"Bob" x <sip:b@h>',
      "Bell, Alexander <sip:a@h>",
      "Bob <sip:b@h>;",
      "<sip:b@h>;tag=",
      "<sip:b@h>;tag=a b",
      "<sip:b@h> junk",
      "<sip:b@h>;tag=1, <sip:c@h>",
      "sip:b@h, sip:c@h",
      "<tel:+1555>",
      "<sip:b@ h>",
      '<sip:b@h>;p="unterminated',
      "<sip:b@h>\r\nVia: x",
    ]
  ) {
    assert.throws(() => parseNameAddr(bad), ParseError, JSON.stringify(bad));
  }
  const u = parseSipUri("sip:b@h");
  assert.throws(
    () => formatNameAddr({ displayName: "a\r\nb", uri: u, params: new Map() }),
    ParseError,
  );
  assert.throws(
    () => formatNameAddr({ uri: u, params: new Map([["tag", "x;evil=1"]]) }),
    ParseError,
  );
  assert.throws(() => formatNameAddr({ uri: u, params: new Map([["bad name", "1"]]) }), ParseError);
});

Deno.test("formatting then parsing gives back the same URI and name-addr", () => {
  const u = uri({
    scheme: "sips",
    user: "a b;c@d:é",
    password: "p@ss word",
    host: "2001:db8::7",
    port: 0,
    params: new Map([["transport", "tcp"], ["lr", ""], ["x", "a b<>"]]),
    headers: new Map([["Subject", "hi & bye?"], ["To", "<sip:x@y>"]]),
  });
  assert.deepEqual(parseSipUri(formatSipUri(u)), u);
  const n = {
    displayName: 'Q "quote" \\ back',
    uri: u,
    params: new Map([["tag", "abc"], ["x", ""]]),
  };
  assert.deepEqual(parseNameAddr(formatNameAddr(n)), n);
});

Deno.test("random and truncated URIs and name-addrs: a ParseError or a value, fast", () => {
  const rng = prng(4475);
  const seeds = [
    '"Bob \\"B\\"" <sips:bob:pw@[2001:db8::1]:5061;transport=tls;lr?h=v%20x>;tag=1;q=0.5',
    "sip:user;par=u%40example.net@example.com;tag=x",
  ];
  const alphabet = ' "\\<>:;@?=&%[],\t.abcAB01\r\n\u00e9';
  const started = performance.now();
  for (const seed of seeds) {
    for (let n = 0; n <= seed.length; n++) {
      for (const f of [parseNameAddr, parseSipUri]) {
        try {
          f(seed.slice(0, n));
        } catch (err) {
          if (!(err instanceof ParseError)) throw err;
        }
      }
    }
  }
  for (let i = 0; i < 3000; i++) {
    const chars = [...seeds[i % 2]];
    for (let e = 0; e < 1 + Math.floor(rng() * 5); e++) {
      chars[Math.floor(rng() * chars.length)] = alphabet[Math.floor(rng() * alphabet.length)];
    }
    const text = i % 10 === 0
      ? Array.from({ length: 40 }, () => alphabet[Math.floor(rng() * alphabet.length)]).join("")
      : chars.join("");
    for (const f of [parseNameAddr, parseSipUri]) {
      try {
        const v = f(text);
        if ("uri" in v) parseNameAddr(formatNameAddr(v));
        else parseSipUri(formatSipUri(v));
      } catch (err) {
        if (!(err instanceof ParseError)) throw err;
      }
    }
  }
  const long = "sip:" + "a".repeat(50_000) + "@" + "h;".repeat(10_000) + "\u0100";
  assert.throws(() => parseNameAddr(long), ParseError);
  assert.ok(performance.now() - started < 1000);
});
