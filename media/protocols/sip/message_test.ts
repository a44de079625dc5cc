import assert from "node:assert/strict";
import { ParseError } from "../../../core/errors.ts";
import { prng } from "../../formats/test_fixtures.ts";
import { parseCSeq, parseVia } from "./headers.ts";
import {
  isSipKeepAlive,
  maxSipMessageBytes,
  parseSipMessage,
  serializeSipMessage,
  SipHeaders,
  type SipMessage,
  sipMessageText,
  SipStreamParser,
} from "./message.ts";
import { parseNameAddr } from "./uri.ts";

const enc = new TextEncoder();
const dec = new TextDecoder();
/** A message written with LF line ends in the source, sent with CRLF as on the wire. */
const crlf = (text: string) => text.replace(/\r?\n/g, "\r\n");
const bytes = (text: string) => enc.encode(crlf(text));

const sdp = crlf(`v=0
o=- 1732431234 1732431234 IN IP4 192.0.2.10
s=-
c=IN IP4 192.0.2.10
t=0 0
m=audio 10004 RTP/AVP 0 8 9 101
a=rtpmap:0 PCMU/8000
a=rtpmap:8 PCMA/8000
a=rtpmap:9 G722/8000
a=rtpmap:101 telephone-event/8000
a=fmtp:101 0-15
a=sendrecv
`);

/** An INVITE as baresip writes it, with its SDP offer. */
const baresipInvite = crlf(`INVITE sip:1001@192.0.2.20:5060 SIP/2.0
Via: SIP/2.0/UDP 192.0.2.10:5060;branch=z9hG4bK4c2a1b7e9f7d31a0;rport
Contact: <sip:alice-0x55d1@192.0.2.10:5060>
Max-Forwards: 70
To: <sip:1001@192.0.2.20:5060>
From: "Alice" <sip:alice@192.0.2.10>;tag=6a8c3f1d2e4b5a79
Call-ID: 0b4e1f2a3c5d6e7f
CSeq: 33019 INVITE
User-Agent: baresip v3.10.1 (x86_64/linux)
Allow: INVITE,ACK,BYE,CANCEL,OPTIONS,NOTIFY,SUBSCRIBE,INFO,MESSAGE,UPDATE,REFER
Supported: replaces,norefersub,100rel
Content-Type: application/sdp
Content-Length: ${sdp.length}

`) + sdp;

/** sipp's built-in uac scenario INVITE (127.0.0.1, its [call_number] style ids). */
const sippSdp = crlf(`v=0
o=user1 53655765 2353687637 IN IP4 127.0.0.1
s=-
c=IN IP4 127.0.0.1
t=0 0
m=audio 6000 RTP/AVP 0
a=rtpmap:0 PCMU/8000
`);
const sippInvite = crlf(`INVITE sip:service@127.0.0.1:5060 SIP/2.0
Via: SIP/2.0/UDP 127.0.0.1:5061;branch=z9hG4bK-2812-1-0
From: sipp <sip:sipp@127.0.0.1:5061>;tag=2812SIPpTag001
To: service <sip:service@127.0.0.1:5060>
Call-ID: 1-2812@127.0.0.1
CSeq: 1 INVITE
Contact: sip:sipp@127.0.0.1:5061
Max-Forwards: 70
Subject: Performance Test
Content-Type: application/sdp
Content-Length:   ${sippSdp.length}

`) + sippSdp;

/** A registrar's digest challenge (Asterisk style), two challenges, commas inside each. */
const challenge401 = crlf(`SIP/2.0 401 Unauthorized
Via: SIP/2.0/UDP 192.0.2.10:5060;branch=z9hG4bK5f0d1c;received=198.51.100.7;rport=40123
From: <sip:alice@pbx.example.com>;tag=a73kszlfl
To: <sip:alice@pbx.example.com>;tag=as1f2e3d4c
Call-ID: 1j9FpLxk3uxtm8tn@192.0.2.10
CSeq: 1 REGISTER
Server: Asterisk PBX 20.5.0
Allow: INVITE, ACK, CANCEL, OPTIONS, BYE, REFER, SUBSCRIBE, NOTIFY, INFO, PUBLISH, MESSAGE
Supported: replaces, timer
WWW-Authenticate: Digest algorithm=MD5, realm="asterisk", nonce="1f2e3d4c", qop="auth,auth-int", opaque="5ccc069c403ebaf9f0171e9517f40e41"
WWW-Authenticate: Digest realm="asterisk", nonce="1f2e3d4c", algorithm=SHA-256
Content-Length: 0

`);

/** A REGISTER as a softphone writes it (RFC 5626 instance id, comma-joined lists). */
const register = crlf(`REGISTER sip:pbx.example.com SIP/2.0
Via: SIP/2.0/TCP 192.0.2.10:51432;branch=z9hG4bKPj8d2e;alias
Max-Forwards: 70
From: <sip:alice@pbx.example.com>;tag=PmgL2nqWq
To: <sip:alice@pbx.example.com>
Call-ID: 1j9FpLxk3uxtm8tn@192.0.2.10
CSeq: 2 REGISTER
Contact: <sip:alice@192.0.2.10:51432;transport=tcp;ob>;reg-id=1;+sip.instance="<urn:uuid:00000000-0000-1000-8000-AABBCCDDEEFF>";expires=600
Expires: 600
Allow: PRACK, INVITE, ACK, BYE, CANCEL, UPDATE, INFO, SUBSCRIBE, NOTIFY, REFER, MESSAGE, OPTIONS
Authorization: Digest username="alice", realm="asterisk", nonce="1f2e3d4c", uri="sip:pbx.example.com", response="0a4f113b", algorithm=MD5
Content-Length:  0

`);

/** A 200 through two proxies: three Via lines, two joined on one line, Record-Route too. */
const proxied200 = crlf(`SIP/2.0 200 OK
Via: SIP/2.0/UDP proxy2.example.com:5060;branch=z9hG4bK2d4790.1;received=192.0.2.3, SIP/2.0/UDP proxy1.example.com;branch=z9hG4bK7d0a.1
Via: SIP/2.0/UDP 192.0.2.10:5060;branch=z9hG4bK776asdhds;rport=5060;received=192.0.2.10
Record-Route: <sip:proxy2.example.com;lr>, <sip:proxy1.example.com;lr>
To: Bob <sip:bob@example.com>;tag=a6c85cf
From: Alice <sip:alice@example.com>;tag=1928301774
Call-ID: a84b4c76e66710@pc33.example.com
CSeq: 314159 INVITE
Contact: <sip:bob@192.0.2.4>
Content-Length: 0

`);

/** Compact forms and folded lines. */
const compact = crlf(`BYE sip:alice@192.0.2.10:5060 SIP/2.0
v: SIP/2.0/UDP 192.0.2.20:5060;branch=z9hG4bKnashds7
f: <sip:bob@192.0.2.20>;tag=8321234356
t: "Alice"
   <sip:alice@192.0.2.10>;tag=6a8c3f1d2e4b5a79
i: 0b4e1f2a3c5d6e7f
CSeq: 231
\tBYE
k: timer
s: a subject
  over two lines
l: 0

`);

const all = { baresipInvite, sippInvite, challenge401, register, proxied200, compact };

function assertSameMessage(a: SipMessage, b: SipMessage): void {
  assert.equal(a.kind, b.kind);
  // The serialiser writes Content-Length last, from the body.
  const lines = (m: SipMessage) => [...m.headers].filter(([name]) => name !== "Content-Length");
  assert.deepEqual(lines(a), lines(b));
  assert.deepEqual(a.body, b.body);
  if (a.kind === "request" && b.kind === "request") {
    assert.equal(a.method, b.method);
    assert.equal(a.uri, b.uri);
  } else if (a.kind === "response" && b.kind === "response") {
    assert.equal(a.status, b.status);
    assert.equal(a.reason, b.reason);
  }
}

Deno.test("real-world messages survive a parse, serialise, parse round trip", () => {
  for (const [name, text] of Object.entries(all)) {
    const first = parseSipMessage(enc.encode(text));
    const written = serializeSipMessage(first);
    const second = parseSipMessage(written);
    assertSameMessage(second, first);
    assert.equal(serializeSipMessage(second).length, written.length, name);
  }
});

Deno.test("a baresip INVITE: start line, headers, SDP body", () => {
  const m = parseSipMessage(enc.encode(baresipInvite));
  assert.ok(m.kind === "request");
  assert.equal(m.method, "INVITE");
  assert.equal(m.uri, "sip:1001@192.0.2.20:5060");
  assert.equal(dec.decode(m.body), sdp);
  assert.equal(m.headers.get("call-id"), "0b4e1f2a3c5d6e7f");
  assert.deepEqual(parseCSeq(m.headers.get("CSEQ")!), { seq: 33019, method: "INVITE" });
  assert.deepEqual(m.headers.getAll("Allow").slice(0, 3), ["INVITE", "ACK", "BYE"]);
  assert.deepEqual(m.headers.getAll("supported"), ["replaces", "norefersub", "100rel"]);
  const from = parseNameAddr(m.headers.get("From")!);
  assert.equal(from.displayName, "Alice");
  assert.equal(from.params.get("tag"), "6a8c3f1d2e4b5a79");
  const via = parseVia(m.headers.get("via")!);
  assert.equal(via.params.get("rport"), "");
  assert.equal(via.params.get("branch"), "z9hG4bK4c2a1b7e9f7d31a0");
});

Deno.test("a sipp INVITE: addr-spec Contact, padded Content-Length", () => {
  const m = parseSipMessage(enc.encode(sippInvite));
  assert.ok(m.kind === "request");
  assert.equal(parseNameAddr(m.headers.get("contact")!).uri.port, 5061);
  assert.equal(m.body.length, sippSdp.length);
  assert.equal(m.headers.get("subject"), "Performance Test");
});

Deno.test("a 401: WWW-Authenticate values are not split at their commas", () => {
  const m = parseSipMessage(enc.encode(challenge401));
  assert.ok(m.kind === "response");
  assert.equal(m.status, 401);
  assert.equal(m.reason, "Unauthorized");
  const challenges = m.headers.getAll("www-authenticate");
  assert.equal(challenges.length, 2);
  assert.match(challenges[0], /^Digest algorithm=MD5, realm="asterisk", .*opaque=/);
  assert.equal(m.headers.getAll("Allow").length, 11);
  const via = parseVia(m.headers.get("v")!);
  assert.equal(via.params.get("rport"), "40123");
  assert.equal(via.params.get("received"), "198.51.100.7");
  assert.equal(m.body.length, 0);
});

Deno.test("a REGISTER: Contact with a quoted <urn> parameter, Authorization kept whole", () => {
  const m = parseSipMessage(enc.encode(register));
  const contacts = m.headers.getAll("m");
  assert.equal(contacts.length, 1);
  const contact = parseNameAddr(contacts[0]);
  assert.equal(contact.uri.params.get("transport"), "tcp");
  assert.equal(contact.uri.params.get("ob"), "");
  assert.equal(
    contact.params.get("+sip.instance"),
    '"<urn:uuid:00000000-0000-1000-8000-AABBCCDDEEFF>"',
  );
  assert.equal(contact.params.get("expires"), "600");
  assert.equal(m.headers.getAll("authorization").length, 1);
  assert.equal(parseVia(m.headers.get("via")!).transport, "TCP");
});

Deno.test("several Via lines and a comma-joined one come out as elements, top first", () => {
  const m = parseSipMessage(enc.encode(proxied200));
  const vias = m.headers.getAll("Via").map(parseVia);
  assert.deepEqual(vias.map((v) => v.host), [
    "proxy2.example.com",
    "proxy1.example.com",
    "192.0.2.10",
  ]);
  assert.equal(vias[0].port, 5060);
  assert.equal(vias[1].port, undefined);
  assert.equal(m.headers.get("via"), m.headers.getAll("via")[0]);
  assert.deepEqual(m.headers.getAll("record-route"), [
    "<sip:proxy2.example.com;lr>",
    "<sip:proxy1.example.com;lr>",
  ]);
});

Deno.test("compact forms map to the full names; folded lines join with one space", () => {
  const m = parseSipMessage(enc.encode(compact));
  assert.deepEqual([...m.headers].map(([name]) => name), [
    "Via",
    "From",
    "To",
    "Call-ID",
    "CSeq",
    "Supported",
    "Subject",
    "Content-Length",
  ]);
  assert.equal(m.headers.get("to"), '"Alice" <sip:alice@192.0.2.10>;tag=6a8c3f1d2e4b5a79');
  assert.equal(m.headers.get("CSeq"), "231 BYE");
  assert.equal(m.headers.get("subject"), "a subject over two lines");
  assert.equal(m.headers.get("i"), m.headers.get("Call-Id"));
});

Deno.test("serialising writes CRLF lines and a Content-Length from the body", () => {
  const headers = new SipHeaders();
  headers.add("via", "SIP/2.0/UDP 127.0.0.1:5070;branch=z9hG4bKabc");
  headers.add("f", "<sip:a@127.0.0.1>;tag=1");
  headers.add("To", "<sip:b@127.0.0.1>");
  headers.add("call-id", "x@127.0.0.1");
  headers.add("cseq", "2 MESSAGE");
  headers.add("content-length", "999");
  headers.add("X-Custom-Header", "kept as written");
  const message: SipMessage = {
    kind: "request",
    method: "MESSAGE",
    uri: "sip:b@127.0.0.1",
    headers,
    body: enc.encode("hi"),
  };
  const text = sipMessageText(message);
  assert.equal(
    text,
    "MESSAGE sip:b@127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:5070;branch=z9hG4bKabc\r\n" +
      "From: <sip:a@127.0.0.1>;tag=1\r\nTo: <sip:b@127.0.0.1>\r\nCall-ID: x@127.0.0.1\r\n" +
      "CSeq: 2 MESSAGE\r\nX-Custom-Header: kept as written\r\nContent-Length: 2\r\n\r\nhi",
  );
  assert.equal(dec.decode(serializeSipMessage(message)), text);
  const response: SipMessage = {
    kind: "response",
    status: 180,
    reason: "Ringing",
    headers,
    body: new Uint8Array(0),
  };
  assert.match(
    sipMessageText(response),
    /^SIP\/2\.0 180 Ringing\r\n[^]*Content-Length: 0\r\n\r\n$/,
  );
  assert.throws(() => serializeSipMessage({ ...response, reason: "a\r\nVia: x" }), ParseError);
  assert.throws(() => serializeSipMessage({ ...message, uri: "sip:b@h SIP/2.0" }), ParseError);
  assert.throws(() => serializeSipMessage({ ...response, status: 99 }), ParseError);
});

Deno.test("SipHeaders: case-insensitive, set in place, delete, independent clone", () => {
  const h = new SipHeaders();
  h.add("Via", "SIP/2.0/UDP a;branch=z9hG4bK1");
  h.add("cseq", "1 INVITE");
  h.add("VIA", "SIP/2.0/UDP b;branch=z9hG4bK2");
  h.add("www-authenticate", 'Digest realm="r", nonce="n"');
  assert.deepEqual([...h].map(([n]) => n), ["Via", "CSeq", "Via", "WWW-Authenticate"]);
  assert.equal(h.getAll("v").length, 2);
  const copy = h.clone();
  h.set("v", "SIP/2.0/TCP c;branch=z9hG4bK3");
  assert.deepEqual([...h].map(([n, v]) => `${n}: ${v}`), [
    "Via: SIP/2.0/TCP c;branch=z9hG4bK3",
    "CSeq: 1 INVITE",
    'WWW-Authenticate: Digest realm="r", nonce="n"',
  ]);
  assert.equal(copy.getAll("via").length, 2);
  h.delete("Cseq");
  assert.equal(h.has("cseq"), false);
  assert.equal(h.get("cseq"), undefined);
  assert.deepEqual(h.getAll("cseq"), []);
  h.set("Content-Type", "application/sdp");
  assert.equal(h.get("c"), "application/sdp");
  h.add("Supported", "");
  assert.equal(h.get("supported"), "");
  assert.deepEqual(h.getAll("supported"), []);
  h.add("Contact", '"A, B" <sip:a@h;x=1,2>;q=0.5, <sip:b@h>');
  assert.deepEqual(h.getAll("contact"), ['"A, B" <sip:a@h;x=1,2>;q=0.5', "<sip:b@h>"]);
  h.add("Date", "Sat, 13 Nov 2010 23:29:00 GMT");
  assert.deepEqual(h.getAll("date"), ["Sat, 13 Nov 2010 23:29:00 GMT"]);
  assert.throws(() => h.add("X-Evil", "a\r\nVia: injected"), ParseError);
  assert.throws(() => h.add("Bad Name", "x"), ParseError);
  assert.throws(() => h.set("X:y", "x"), ParseError);
});

/** RFC 4475 §3.1.1.1 style: LWS everywhere, folding, odd case, leading zeros. */
const tortuous = crlf(`INVITE sip:vivekg@chair-dnrc.example.com;unknownparam SIP/2.0
TO :
 sip:vivekg@chair-dnrc.example.com ;   tag    = 1918181833n
from   : "J Rosenberg \\\\\\""       <sip:jdrosen@example.com>
  ;
  tag = 98asjd8
MaX-fOrWaRdS: 0068
Call-ID: wsinv.ndaksdj@192.0.2.1
Content-Length   : 0
cseq: 0009
  INVITE
Via  : SIP  /   2.0
 /UDP
    192.0.2.2;branch=390skdjuw
s :
NewFangledHeader:   newfangled value
 continued newfangled value
UnknownHeaderWithUnusualValue: ;;,,;;,;
Content-Type: application/sdp
Route:
 <sip:services.example.com;lr;unknownwith=value;unknown-no-value>
v:  SIP  / 2.0  / TCP     spindle.example.com   ;
  branch  =   z9hG4bK9ikj8  ,
 SIP  /    2.0   / UDP  192.168.255.111   ; branch=
 z9hG4bK30239
m:"Quoted string \\"\\"" <sip:jdrosen@example.com> ; newparam =
      newvalue ;
  secondparam ; q = 0.33

`);

/** RFC 4475 §3.1.1.2 style: every legal character in method, URI, tokens, quoted strings. */
const intmeth = crlf(
  `!interesting-Method0123456789_*+\`.%indeed'~ sip:1_unusual.URI~(to-be!sure)&isn't+it$/crazy?,/;;*:&it+has=1,weird!*pas$wo~d_too.(doesn't-it)@example.com SIP/2.0
Via: SIP/2.0/TCP host1.example.com;branch=z9hG4bK-.!%66*_+\`'~
To: "BEL:\\\x07 NUL:\\\x00 DEL:\\\x7f" <sip:1_unusual.URI~(to-be!sure)&isn't+it$/crazy?,/;;*@example.com>
From: token1~\` token2'+_ token3*%!.- <sip:mundane@example.com>;fromParam''~+*_!.-%="работающий";tag=_token~1'+\`*%!-.
Call-ID: intmeth.word%ZK-!.*_+'@word\`~)(><:\\/"][?}{
CSeq: 139122385 !interesting-Method0123456789_*+\`.%indeed'~
Max-Forwards: 255
extensionHeader-!.%*+_\`'~:\ufeff大停電
Content-Length: 0

`,
);

/** RFC 4475 §3.1.1.3 style: escapes in URIs. */
const escaped = crlf(`INVITE sip:sips%3Auser%40example.com@example.net SIP/2.0
To: sip:%75se%72@example.com
From: <sip:I%20have%20spaces@example.net>;tag=938
Max-Forwards: 87
i: esc01.239409asdfakjkn23onasd0-3234
CSeq: 234234 INVITE
Via: SIP/2.0/UDP host5.example.net;branch=z9hG4bKkdjuw
C: application/sdp
Contact:
  <sip:cal%6Cer@host5.example.net;%6C%72;n%61me=v%61lue%25%34%31>
Content-Length: 0

`);

/** RFC 5118 style: IPv6 everywhere. */
const ipv6 = crlf(`REGISTER sip:[2001:db8::10] SIP/2.0
To: sip:user@example.com
From: sip:user@example.com;tag=81x2
Via: SIP/2.0/UDP [2001:db8::9:1]:5070;branch=z9hG4bKas3-111;received=[2001:db8::9:255];rport
Call-ID: SSG9559905523997077@hlau_4100
Max-Forwards: 70
Contact: "Caller" <sip:caller@[2001:db8::1]:5060;transport=udp>
CSeq: 98176 REGISTER
Content-Length: 0

`);

/** RFC 4475 §3.1.1.11 style: a second message after Content-Length in one datagram. */
const trailing = crlf(`REGISTER sip:example.com SIP/2.0
To: sip:j.user@example.com
From: sip:j.user@example.com;tag=43251j3j324
Max-Forwards: 8
I: dblreg.0ha0isndaksdj99sdfafnl3lk233412
Contact: sip:j.user@host.example.com
CSeq: 8 REGISTER
Via: SIP/2.0/UDP 192.0.2.125;branch=z9hG4bKkdjuw23492
Content-Length: 0

INVITE sip:joe@example.com SIP/2.0
t: sip:joe@example.com
`);

Deno.test("RFC 4475 style valid messages parse", () => {
  const w = parseSipMessage(enc.encode(tortuous));
  assert.equal(w.headers.get("max-forwards"), "0068");
  assert.deepEqual(parseCSeq(w.headers.get("cseq")!), { seq: 9, method: "INVITE" });
  const to = parseNameAddr(w.headers.get("to")!);
  assert.equal(to.params.get("tag"), "1918181833n");
  const from = parseNameAddr(w.headers.get("from")!);
  assert.equal(from.displayName, 'J Rosenberg \\"');
  assert.equal(from.params.get("tag"), "98asjd8");
  assert.equal(w.headers.get("subject"), "");
  assert.equal(w.headers.get("newfangledheader"), "newfangled value continued newfangled value");
  const vias = w.headers.getAll("via").map(parseVia);
  assert.deepEqual(vias.map((v) => [v.transport, v.host, v.params.get("branch")]), [
    ["UDP", "192.0.2.2", "390skdjuw"],
    ["TCP", "spindle.example.com", "z9hG4bK9ikj8"],
    ["UDP", "192.168.255.111", "z9hG4bK30239"],
  ]);
  const contact = parseNameAddr(w.headers.get("contact")!);
  assert.equal(contact.displayName, 'Quoted string ""');
  assert.deepEqual([...contact.params], [["newparam", "newvalue"], ["secondparam", ""], [
    "q",
    "0.33",
  ]]);

  const i = parseSipMessage(enc.encode(intmeth));
  assert.ok(i.kind === "request");
  assert.equal(i.method, "!interesting-Method0123456789_*+`.%indeed'~");
  assert.equal(parseNameAddr(i.headers.get("to")!).displayName, "BEL:\x07 NUL:\x00 DEL:\x7f");
  assert.equal(parseNameAddr(i.headers.get("from")!).displayName, "token1~` token2'+_ token3*%!.-");
  assert.equal(i.headers.get("call-id"), "intmeth.word%ZK-!.*_+'@word`~)(><:\\/\"][?}{");
  assert.equal(i.headers.get("EXTENSIONHEADER-!.%*+_`'~"), "\ufeff大停電");

  const e = parseSipMessage(enc.encode(escaped));
  assert.ok(e.kind === "request");
  assert.equal(parseNameAddr(e.headers.get("to")!).uri.user, "user");
  assert.equal(parseNameAddr(e.headers.get("from")!).uri.user, "I have spaces");
  const c = parseNameAddr(e.headers.get("contact")!).uri;
  assert.deepEqual([...c.params], [["lr", ""], ["name", "value%41"]]);

  const v6 = parseSipMessage(enc.encode(ipv6));
  const via = parseVia(v6.headers.get("via")!);
  assert.equal(via.host, "2001:db8::9:1");
  assert.equal(via.port, 5070);
  assert.equal(via.params.get("received"), "[2001:db8::9:255]");
  assert.equal(parseNameAddr(v6.headers.get("contact")!).uri.host, "2001:db8::1");

  const t = parseSipMessage(enc.encode(trailing));
  assert.ok(t.kind === "request");
  assert.equal(t.method, "REGISTER");
  assert.equal(t.body.length, 0);

  const unusual = parseSipMessage(bytes(`SIP/2.0 200 = 2**3 * 5**2 но сто девяносто девять - простое
Via: SIP/2.0/UDP 192.0.2.198;branch=z9hG4bK1324923
Call-ID: unreason.1234ksdfak3j2erwedfsASdf
CSeq: 35 INVITE
From: sip:user@example.com;tag=11141343
To: sip:user@example.edu;tag=2229
Content-Length: 0

`));
  assert.ok(unusual.kind === "response");
  assert.equal(unusual.reason, "= 2**3 * 5**2 но сто девяносто девять - простое");
  const noReason = parseSipMessage(bytes(`SIP/2.0 100 
Via: SIP/2.0/UDP 192.0.2.105;branch=z9hG4bK2398ndaoe
Call-ID: noreason.asndj203insdf99223ndf
CSeq: 35 INVITE
From: <sip:user@example.com>;tag=39ansfi3
To: <sip:user@example.edu>;tag=902jndnke3
Content-Length: 0

`));
  assert.ok(noReason.kind === "response");
  assert.equal(noReason.reason, "");
});

Deno.test("RFC 4475 style messages round trip; a binary multipart body is kept byte for byte", () => {
  for (const text of [tortuous, intmeth, escaped, ipv6]) {
    const m = parseSipMessage(enc.encode(text));
    assertSameMessage(parseSipMessage(serializeSipMessage(m)), m);
  }
  const body = new Uint8Array([
    ...enc.encode("--boundary42\r\nContent-Type: application/octet-stream\r\n\r\n"),
    0,
    1,
    13,
    10,
    13,
    10,
    255,
    254,
    0x80,
    ...enc.encode("\r\n--boundary42--\r\n"),
  ]);
  const head = crlf(base).replace("Content-Length: 0", `Content-Length: ${body.length}`)
    .replace(
      "CSeq: 1 OPTIONS",
      "CSeq: 1 OPTIONS\nContent-Type: multipart/mixed;boundary=boundary42",
    );
  const m = parseSipMessage(new Uint8Array([...enc.encode(crlf(head)), ...body]));
  assert.deepEqual(m.body, body);
  const again = parseSipMessage(serializeSipMessage(m));
  assert.deepEqual(again.body, body);
  assert.equal(again.headers.get("content-type"), "multipart/mixed;boundary=boundary42");
});

Deno.test("unknown URI schemes are fine in the Request-URI and To", () => {
  const m = parseSipMessage(bytes(`OPTIONS nobodyknows:This-is-some-unknown-scheme SIP/2.0
To: isbn:2983792873
From: <http://www.example.com>;tag=3234233
Call-ID: unksm2.daksdj@hyphenated-host.example.com
CSeq: 234902 OPTIONS
Max-Forwards: 70
Via: SIP/2.0/UDP 192.0.2.1:5060;branch=z9hG4bKkdjuw
Content-Length: 0

`));
  assert.ok(m.kind === "request");
  assert.equal(m.uri, "nobodyknows:This-is-some-unknown-scheme");
});

/** A valid OPTIONS the invalid cases below change one thing of. */
const base = `OPTIONS sip:user@example.com SIP/2.0
To: <sip:user@example.com>
From: "Caller" <sip:caller@example.com>;tag=323
Max-Forwards: 70
Call-ID: base.0ha0isndaksdj
CSeq: 1 OPTIONS
Via: SIP/2.0/UDP 192.0.2.1;branch=z9hG4bKkdjuw
Content-Length: 0

`;

Deno.test("RFC 4475 style invalid messages are ParseErrors", () => {
  assert.ok(parseSipMessage(bytes(base)));
  const cases: [string, string, string][] = [
    ["SIP version 7.0", "SIP/2.0\n", "SIP/7.0\n"],
    ["<> around the Request-URI", "OPTIONS sip:user@example.com", "OPTIONS <sip:user@example.com>"],
    ["two SP in the request line", "OPTIONS sip", "OPTIONS  sip"],
    ["SP at the end of the request line", "SIP/2.0\n", "SIP/2.0 \n"],
    ["LWS inside the Request-URI", "sip:user@example.com SIP", "sip:user@example.com; lr SIP"],
    ["CSeq method mismatch", "CSeq: 1 OPTIONS", "CSeq: 1 INVITE"],
    ["overlarge CSeq", "CSeq: 1 OPTIONS", "CSeq: 36893488147419103232 OPTIONS"],
    ["CSeq of 2**31", "CSeq: 1 OPTIONS", "CSeq: 2147483648 OPTIONS"],
    ["overlarge Max-Forwards", "Max-Forwards: 70", "Max-Forwards: 300"],
    ["negative Content-Length", "Content-Length: 0", "Content-Length: -999"],
    ["Content-Length beyond the bytes", "Content-Length: 0", "Content-Length: 9999"],
    ["two Content-Lengths", "Content-Length: 0", "Content-Length: 0\nl: 0"],
    ["two Call-IDs", "Call-ID: base.0ha0isndaksdj", "Call-ID: a\ni: b"],
    ["two To headers", "To: <sip:user@example.com>", "To: <sip:a@h>\nTo: <sip:b@h>"],
    ["From with two values", ";tag=323", ";tag=323, <sip:other@example.com>"],
    ["missing Call-ID", "Call-ID: base.0ha0isndaksdj\n", ""],
    ["missing From", 'From: "Caller" <sip:caller@example.com>;tag=323\n', ""],
    ["missing To", "To: <sip:user@example.com>\n", ""],
    ["missing CSeq", "CSeq: 1 OPTIONS\n", ""],
    ["missing Via", "Via: SIP/2.0/UDP 192.0.2.1;branch=z9hG4bKkdjuw\n", ""],
    ["extraneous Via separators", "branch=z9hG4bKkdjuw", "branch=z9hG4bKkdjuw;;,;,,"],
    ["Via of another protocol", "Via: SIP/2.0/UDP", "Via: HTTP/1.1/UDP"],
    ["unterminated quote", '"Caller" <sip:', '"Caller <sip:'],
    ["non-token display name", '"Caller" <sip:', "Bell, Alexander <sip:"],
    [
      "quoted display name before an addr-spec",
      '"Caller" <sip:caller@example.com>',
      '"Caller" sip:caller@example.com',
    ],
    ["space inside the URI", "<sip:caller@example.com>", "<sip:caller@ example.com>"],
    ["IPv6 without brackets", "sip:user@example.com SIP", "sip:2001:db8::10 SIP"],
    ["IPv6 with three colons", "sip:user@example.com SIP", "sip:[2001:db8:::192.0.2.1] SIP"],
    ["a port out of range", "sip:user@example.com SIP", "sip:user@example.com:65536 SIP"],
    ["status 700", "OPTIONS sip:user@example.com SIP/2.0", "SIP/2.0 700 Too big"],
    [
      "a 10-digit status",
      "OPTIONS sip:user@example.com SIP/2.0",
      "SIP/2.0 4294967301 better not break",
    ],
    ["HTTP start line", "OPTIONS sip:user@example.com SIP/2.0", "HTTP/1.1 200 OK"],
    ["a header line without a colon", "Max-Forwards: 70", "Max-Forwards 70"],
    ["a header line with an empty name", "Max-Forwards: 70", ": 70"],
    ["a continuation first", "To: <sip:user", " folded\nTo: <sip:user"],
    ["a bare CR in a header", "Max-Forwards: 70", "Max-Forwards: 70\rX: 1"],
    ["no empty line after the headers", "Content-Length: 0\n\n", "Content-Length: 0\n"],
  ];
  for (const [what, from, to] of cases) {
    const text = base.replace(from, to);
    assert.notEqual(text, base, what);
    assert.throws(() => parseSipMessage(bytes(text)), ParseError, what);
  }
  assert.throws(() => parseSipMessage(new Uint8Array(0)), ParseError);
  assert.throws(() => parseSipMessage(enc.encode("\r\n\r\n")), ParseError);
  assert.ok(isSipKeepAlive(enc.encode("\r\n\r\n")));
  assert.ok(!isSipKeepAlive(enc.encode(crlf(base))));
  assert.ok(!isSipKeepAlive(new Uint8Array(0)));
});

Deno.test("a datagram over maxSipMessageBytes is refused", () => {
  const body = "x".repeat(maxSipMessageBytes);
  const text = crlf(base).replace("Content-Length: 0", `Content-Length: ${body.length}`) + body;
  assert.throws(() => parseSipMessage(enc.encode(text)), /exceeds/);
  const justFits = crlf(base).replace("Content-Length: 0", "Content-Length: 1000") +
    "y".repeat(1000);
  assert.equal(parseSipMessage(enc.encode(justFits)).body.length, 1000);
});

Deno.test("every truncation of a message with a body is a ParseError", () => {
  for (const text of [baresipInvite, sippInvite]) {
    const data = enc.encode(text);
    for (let n = 0; n < data.length; n++) {
      assert.throws(() => parseSipMessage(data.subarray(0, n)), ParseError, `${n} bytes`);
    }
  }
});

Deno.test("random bytes and mutated messages give a ParseError or a message, nothing else", () => {
  const rng = prng(17);
  const seeds = Object.values(all).map((t) => enc.encode(t));
  const specials = ' \t\r\n:;,<>"@%[]=/\\';
  for (let i = 0; i < 3000; i++) {
    let input: Uint8Array;
    if (i % 3 === 0) {
      input = new Uint8Array(Math.floor(rng() * 600)).map(() => Math.floor(rng() * 256));
    } else {
      input = seeds[i % seeds.length].slice();
      const edits = 1 + Math.floor(rng() * 6);
      for (let e = 0; e < edits; e++) {
        const at = Math.floor(rng() * input.length);
        input[at] = rng() < 0.5
          ? Math.floor(rng() * 256)
          : specials.charCodeAt(Math.floor(rng() * specials.length));
      }
    }
    try {
      const m = parseSipMessage(input);
      serializeSipMessage(m);
      const parser = new SipStreamParser();
      parser.push(input);
    } catch (err) {
      if (!(err instanceof ParseError)) throw err;
    }
  }
});

Deno.test("stream: messages split at every byte, keep-alives skipped, order kept", () => {
  const messages = [baresipInvite, challenge401, register, proxied200].map((t) => enc.encode(t));
  const stream = new Uint8Array(
    messages.flatMap((m) => [...enc.encode("\r\n\r\n"), ...m, ...enc.encode("\r\n")]),
  );
  for (const step of [1, 2, 7, 1500, stream.length]) {
    const parser = new SipStreamParser();
    const out: SipMessage[] = [];
    for (let i = 0; i < stream.length; i += step) {
      out.push(...parser.push(stream.subarray(i, i + step)));
    }
    assert.equal(out.length, 4, `step ${step}`);
    assert.equal(parser.buffered, 0);
    out.forEach((m, k) => assertSameMessage(m, parseSipMessage(messages[k])));
    assert.equal(dec.decode(out[0].body), sdp);
  }
});

Deno.test("stream: a message waits for its body; a body is its own copy", () => {
  const parser = new SipStreamParser();
  assert.deepEqual(parser.push(enc.encode("\r\n\r\n")), []);
  assert.deepEqual(parser.push(enc.encode("\r\n")), []);
  assert.equal(parser.buffered, 0);
  const data = enc.encode(baresipInvite);
  const cut = data.length - 10;
  assert.deepEqual(parser.push(data.subarray(0, cut)), []);
  assert.equal(parser.buffered, cut);
  const chunk = data.slice(cut);
  const [m] = parser.push(chunk);
  chunk.fill(0);
  assert.equal(dec.decode(m.body), sdp);
});

Deno.test("stream: no Content-Length, oversized headers or body are ParseErrors, then every push", () => {
  const noLength = new SipStreamParser();
  const text = crlf(base).replace("Content-Length: 0\r\n", "");
  assert.throws(() => noLength.push(enc.encode(text)), /Content-Length/);
  assert.throws(() => noLength.push(enc.encode(crlf(base))), ParseError);

  const endless = new SipStreamParser();
  const line = enc.encode("X-Filler: " + "a".repeat(1000) + "\r\n");
  let error: unknown;
  endless.push(enc.encode("OPTIONS sip:a@b SIP/2.0\r\n"));
  for (let i = 0; i < 200 && !error; i++) {
    try {
      endless.push(line);
      assert.ok(endless.buffered <= maxSipMessageBytes + line.length);
    } catch (err) {
      error = err;
    }
  }
  assert.ok(error instanceof ParseError);
  assert.equal(endless.buffered, 0);

  const bigBody = new SipStreamParser();
  const head = crlf(base).replace("Content-Length: 0", `Content-Length: ${maxSipMessageBytes}`);
  assert.throws(() => bigBody.push(enc.encode(head)), /exceeds/);

  const bad = new SipStreamParser();
  assert.throws(() => bad.push(enc.encode("GARBAGE\r\n\r\n")), ParseError);
});

Deno.test("messages captured from sipp and baresip (fuzz/corpus/sip) parse and round trip", () => {
  const dir = new URL("../../../fuzz/corpus/sip/", import.meta.url);
  const names = [...Deno.readDirSync(dir)].map((e) => e.name).filter((n) =>
    /^(sipp|baresip)_/.test(n)
  );
  assert.ok(names.length >= 12);
  for (const name of names) {
    const m = parseSipMessage(Deno.readFileSync(new URL(name, dir)));
    assertSameMessage(parseSipMessage(serializeSipMessage(m)), m);
    for (const via of m.headers.getAll("via")) parseVia(via);
    parseNameAddr(m.headers.get("from")!);
    parseNameAddr(m.headers.get("to")!);
    const contact = m.headers.get("contact");
    if (contact !== undefined) parseNameAddr(contact);
  }
});
