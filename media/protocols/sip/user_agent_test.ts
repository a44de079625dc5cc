/**
 * Two user agents in one process calling each other over 127.0.0.1: ringing, answer, BYE from
 * either side, CANCEL, rejection, hold by re-INVITE, INFO, REFER with its NOTIFYs; and the
 * answers to strangers: 481 for an unknown dialog, 200 to OPTIONS, 408 against silence.
 */
import assert from "node:assert/strict";
import dgram from "node:dgram";
import { silentLogger } from "../../../core/log.ts";
import { type SipAccount, type SipCall, type SipCallEnd, SipUserAgent } from "./user_agent.ts";

const offerSdp = [
  "v=0",
  "o=- 1 1 IN IP4 127.0.0.1",
  "s=-",
  "c=IN IP4 127.0.0.1",
  "t=0 0",
  "m=audio 40000 RTP/AVP 0",
  "a=rtpmap:0 PCMU/8000",
  "a=sendrecv",
  "",
].join("\r\n");
const answerSdp = offerSdp.replace("40000", "40002").replace("o=- 1 1", "o=- 2 1");

function startAgent(t1Ms?: number): Promise<SipUserAgent> {
  return SipUserAgent.start({
    hostname: "127.0.0.1",
    port: 0,
    log: silentLogger,
    userAgent: "test-ua",
    ...(t1Ms ? { timers: { t1Ms } } : {}),
  });
}

function accountFor(peer: { port: number }, login = "alice"): SipAccount {
  return { login, domain: "127.0.0.1", port: peer.port };
}

function endOf(call: SipCall): Promise<SipCallEnd> {
  return new Promise((resolve) => call.onEnded = resolve);
}

/** A's alice calls B's bob; B's side is returned once it arrived. */
async function dial(a: SipUserAgent, b: SipUserAgent): Promise<{ out: SipCall; inc: SipCall }> {
  const incoming = new Promise<SipCall>((resolve) => b.onIncomingCall = resolve);
  const out = a.invite({ account: accountFor(b), callee: "bob", sdp: offerSdp });
  return { out, inc: await incoming };
}

/** A call established between A and B. */
async function established(a: SipUserAgent, b: SipUserAgent) {
  const { out, inc } = await dial(a, b);
  const answered = new Promise<string>((resolve) => out.onEstablished = resolve);
  await inc.answer(answerSdp);
  assert.equal(await answered, answerSdp);
  return { out, inc };
}

async function withAgents(fn: (a: SipUserAgent, b: SipUserAgent) => Promise<void>, t1Ms?: number) {
  const [a, b] = await Promise.all([startAgent(t1Ms), startAgent(t1Ms)]);
  try {
    await fn(a, b);
  } finally {
    await Promise.all([a.close(), b.close()]);
  }
}

Deno.test("a call rings, is answered, is established on both sides and ends by the caller's BYE", async () => {
  await withAgents(async (a, b) => {
    const { out, inc } = await dial(a, b);
    assert.equal(inc.incoming, true);
    assert.equal(inc.caller, "alice");
    assert.equal(inc.callee, "bob");
    assert.equal(inc.remoteSdp, offerSdp);
    assert.match(inc.lastMessageText ?? "", /^INVITE sip:bob@127\.0\.0\.1:\d+ SIP\/2\.0\r\n/);
    assert.equal(out.incoming, false);
    assert.equal(out.callee, "bob");
    assert.equal(a.calls.get(out.callId), out);
    assert.equal(b.calls.get(inc.callId), inc);
    assert.equal(out.callId, inc.callId);

    const ringing = new Promise<number>((resolve) => out.onProgress = (status) => resolve(status));
    await inc.ring();
    assert.equal(await ringing, 180);
    assert.equal(out.state, "RINGING");
    assert.equal(inc.state, "RINGING");

    const outUp = new Promise<string>((resolve) => out.onEstablished = resolve);
    const incUp = new Promise<string>((resolve) => inc.onEstablished = resolve);
    await inc.answer(answerSdp);
    assert.equal(await outUp, answerSdp);
    assert.equal(await incUp, offerSdp);
    assert.equal(out.state, "ESTABLISHED");
    assert.equal(inc.state, "ESTABLISHED");
    assert.equal(out.remoteSdp, answerSdp);
    assert.equal(out.lastStatus, 200);
    assert.match(out.lastMessageText ?? "", /^SIP\/2\.0 200 OK\r\n/);

    const outEnd = endOf(out);
    const incEnd = endOf(inc);
    await out.hangup();
    assert.deepEqual(await incEnd, { by: "remote", status: 200, reason: "BYE" });
    assert.equal((await outEnd).by, "local");
    assert.equal(out.state, "ENDED");
    assert.equal(inc.state, "ENDED");
    assert.equal(a.calls.size, 0);
    assert.equal(b.calls.size, 0);
  });
});

Deno.test("the callee's BYE ends the call on both sides", async () => {
  await withAgents(async (a, b) => {
    const { out, inc } = await established(a, b);
    const outEnd = endOf(out);
    const incEnd = endOf(inc);
    await inc.hangup();
    assert.deepEqual(await outEnd, { by: "remote", status: 200, reason: "BYE" });
    assert.equal((await incEnd).by, "local");
    assert.equal(a.calls.size + b.calls.size, 0);
  });
});

Deno.test("a CANCEL before the answer ends both sides with 487", async () => {
  await withAgents(async (a, b) => {
    const { out, inc } = await dial(a, b);
    const ringing = new Promise<void>((resolve) => out.onProgress = () => resolve());
    await inc.ring();
    await ringing;
    const outEnd = endOf(out);
    const incEnd = endOf(inc);
    await out.hangup();
    assert.deepEqual(await outEnd, { by: "local", status: 487, reason: "Request Terminated" });
    assert.deepEqual(await incEnd, { by: "remote", status: 487, reason: "Request Terminated" });
    await assert.rejects(inc.answer(answerSdp), /answered already/);
    assert.equal(a.calls.size + b.calls.size, 0);
  });
});

Deno.test("a call rejected 486 ends the caller's call with 486 Busy Here", async () => {
  await withAgents(async (a, b) => {
    const { out, inc } = await dial(a, b);
    const outEnd = endOf(out);
    const incEnd = endOf(inc);
    await inc.reject(486, "Busy Here");
    assert.deepEqual(await outEnd, { by: "remote", status: 486, reason: "Busy Here" });
    assert.deepEqual(await incEnd, { by: "local", status: 486, reason: "Busy Here" });
    assert.equal(out.lastStatus, 486);
  });
});

Deno.test("hold and unhold by re-INVITE: the far end sees a=sendonly and answers recvonly", async () => {
  await withAgents(async (a, b) => {
    const { out, inc } = await established(a, b);
    const offers: string[] = [];
    inc.onReinvite = (sdp) => {
      offers.push(sdp);
      return sdp.includes("a=sendonly") ? answerSdp.replace("a=sendrecv", "a=recvonly") : answerSdp;
    };
    const held = await out.reinvite(offerSdp.replace("a=sendrecv", "a=sendonly"));
    assert.match(held, /a=recvonly/);
    assert.equal(out.state, "HOLD");
    assert.match(offers[0], /a=sendonly/);
    assert.match(inc.remoteSdp ?? "", /a=sendonly/);
    assert.match(out.remoteSdp ?? "", /a=recvonly/);
    assert.equal(await out.reinvite(offerSdp), answerSdp);
    assert.equal(out.state, "ESTABLISHED");
    // The callee re-INVITEs too; a throwing handler answers 488 and the call stays up.
    out.onReinvite = () => {
      throw new Error("no");
    };
    await assert.rejects(inc.reinvite(answerSdp), /488/);
    assert.equal(inc.state, "ESTABLISHED");
    assert.equal(out.state, "ESTABLISHED");
  });
});

Deno.test("INFO application/dtmf-relay is delivered and answered 200", async () => {
  await withAgents(async (a, b) => {
    const { out, inc } = await established(a, b);
    const got = new Promise<[string, string]>((resolve) =>
      inc.onInfo = (type, body) => resolve([type, body])
    );
    const body = "Signal=5\r\nDuration=160\r\n";
    assert.equal(await out.info("application/dtmf-relay", body), 200);
    assert.deepEqual(await got, ["application/dtmf-relay", body]);
  });
});

Deno.test("REFER is accepted 202 and followed by NOTIFY 100 then 200; a refused one is 603", async () => {
  await withAgents(async (a, b) => {
    const { out, inc } = await established(a, b);
    const targets: string[] = [];
    inc.onRefer = (target) => (targets.push(target), true);
    const statuses: number[] = [];
    const done = new Promise<void>((resolve) =>
      out.onReferStatus = (status) => {
        statuses.push(status);
        if (status >= 200) resolve();
      }
    );
    assert.equal(await out.refer("carol@127.0.0.1"), 202);
    await done;
    assert.deepEqual(targets, ["sip:carol@127.0.0.1"]);
    assert.deepEqual(statuses, [100, 200]);
    inc.onRefer = () => false;
    assert.equal(await out.refer("sip:dave@127.0.0.1"), 603);
    assert.equal(out.state, "ESTABLISHED");
  });
});

/** A UDP socket on 127.0.0.1 that collects what it receives. */
async function rawSocket() {
  const socket = dgram.createSocket("udp4");
  const received: string[] = [];
  const waiters: (() => void)[] = [];
  socket.on("message", (data) => {
    received.push(new TextDecoder().decode(data));
    waiters.splice(0).forEach((w) => w());
  });
  await new Promise<void>((resolve) => socket.bind(0, "127.0.0.1", resolve));
  const port = socket.address().port;
  return {
    port,
    received,
    send: (text: string, to: number) =>
      new Promise<void>((resolve, reject) =>
        socket.send(text, to, "127.0.0.1", (err) => err ? reject(err) : resolve())
      ),
    /** The next message whose first line matches. */
    async next(firstLine: RegExp): Promise<string> {
      for (;;) {
        const index = received.findIndex((m) => firstLine.test(m.split("\r\n")[0]));
        if (index >= 0) return received.splice(index, 1)[0];
        await new Promise<void>((resolve) => waiters.push(resolve));
      }
    },
    close: () => new Promise<void>((resolve) => socket.close(() => resolve())),
  };
}

function rawRequest(method: string, ua: SipUserAgent, from: number, toTag?: string) {
  return [
    `${method} sip:bob@127.0.0.1:${ua.port} SIP/2.0`,
    `Via: SIP/2.0/UDP 127.0.0.1:${from};branch=z9hG4bK${crypto.randomUUID().slice(0, 8)}`,
    "Max-Forwards: 70",
    `From: <sip:raw@127.0.0.1:${from}>;tag=rawtag`,
    `To: <sip:bob@127.0.0.1:${ua.port}>${toTag ? `;tag=${toTag}` : ""}`,
    `Call-ID: raw-${crypto.randomUUID()}@127.0.0.1`,
    `CSeq: 7 ${method}`,
    `Contact: <sip:raw@127.0.0.1:${from}>`,
    "Content-Length: 0",
    "",
    "",
  ].join("\r\n");
}

Deno.test("requests of an unknown dialog are 481, OPTIONS 200 with Allow, INVITE without handler 480, without Contact 400", async () => {
  const ua = await startAgent();
  const raw = await rawSocket();
  try {
    await raw.send(rawRequest("BYE", ua, raw.port, "nosuchtag"), ua.port);
    assert.match(await raw.next(/^SIP\/2\.0 481 /), /CSeq: 7 BYE/);
    await raw.send(rawRequest("INFO", ua, raw.port), ua.port);
    assert.match(await raw.next(/^SIP\/2\.0 481 /), /CSeq: 7 INFO/);
    await raw.send(rawRequest("OPTIONS", ua, raw.port), ua.port);
    const options = await raw.next(/^SIP\/2\.0 200 /);
    assert.match(
      options,
      /\r\nAllow: INVITE, ACK, CANCEL, BYE, OPTIONS, INFO, REFER, NOTIFY, UPDATE\r\n/,
    );
    await raw.send(rawRequest("MESSAGE", ua, raw.port), ua.port);
    assert.match(await raw.next(/^SIP\/2\.0 405 /), /\r\nAllow: /);
    await raw.send(rawRequest("INVITE", ua, raw.port), ua.port);
    assert.match(await raw.next(/^SIP\/2\.0 480 /), /CSeq: 7 INVITE/);
    // An INVITE that cannot make a dialog (no Contact) is a 400, not a crash.
    ua.onIncomingCall = () => assert.fail("no call for a malformed INVITE");
    await raw.send(rawRequest("INVITE", ua, raw.port).replace(/Contact: [^\r]*\r\n/, ""), ua.port);
    assert.match(await raw.next(/^SIP\/2\.0 400 /), /CSeq: 7 INVITE/);
    assert.equal(ua.calls.size, 0);
  } finally {
    await raw.close();
    await ua.close();
  }
});

Deno.test("an INVITE to a silent peer ends with 408 Request Timeout (timer B)", async () => {
  const ua = await startAgent(50);
  const silent = await rawSocket();
  try {
    const call = ua.invite({
      account: { login: "alice", domain: "127.0.0.1", port: silent.port },
      callee: "nobody",
      sdp: offerSdp,
    });
    const end = await endOf(call);
    assert.deepEqual(end, { by: "timeout", status: 408, reason: "Request Timeout" });
    assert.ok(silent.received.length >= 3, "the INVITE was retransmitted");
    assert.equal(ua.calls.size, 0);
  } finally {
    await silent.close();
    await ua.close();
  }
});

Deno.test("bad input: a malformed callee or account field throws, naming it; a Call-ID in use 409", async () => {
  const ua = await startAgent();
  try {
    const account = { login: "alice", domain: "127.0.0.1", port: 9 };
    assert.throws(() => ua.invite({ account, callee: "bad callee<>", sdp: offerSdp }), {
      field: "callee",
    });
    assert.throws(
      () => ua.invite({ account: { ...account, domain: "a b" }, callee: "x", sdp: "" }),
      {
        field: "sipDomain",
      },
    );
    assert.throws(() => ua.invite({ account: { ...account, port: 70000 }, callee: "x", sdp: "" }), {
      field: "sipPort",
    });
    const call = ua.invite({ account, callee: "x", sdp: offerSdp, callId: "fixed@test" });
    assert.equal(call.callId, "fixed@test");
    assert.throws(() => ua.invite({ account, callee: "x", sdp: offerSdp, callId: "fixed@test" }), {
      status: 409,
    });
    const end = endOf(call);
    await call.hangup();
    assert.equal((await end).by, "local");
  } finally {
    await ua.close();
  }
});

/** The value of a header in a message's text. */
function headerOf(message: string, name: string): string | undefined {
  const line = message.split("\r\n").find((l) =>
    l.toLowerCase().startsWith(`${name.toLowerCase()}:`)
  );
  return line?.slice(name.length + 1).trim();
}

/** A response to a request received as text: Via, From, To (tagged), Call-ID, CSeq copied. */
function responseTo(
  request: string,
  status: string,
  extra: string[] = [],
  body = "",
): string {
  const lines = request.split("\r\n");
  const vias = lines.filter((l) => /^via:/i.test(l));
  const to = headerOf(request, "To")!;
  return [
    `SIP/2.0 ${status}`,
    ...vias,
    `From: ${headerOf(request, "From")}`,
    `To: ${to.includes(";tag=") ? to : `${to};tag=rawpeer`}`,
    `Call-ID: ${headerOf(request, "Call-ID")}`,
    `CSeq: ${headerOf(request, "CSeq")}`,
    ...extra,
    ...(body ? ["Content-Type: application/sdp"] : []),
    `Content-Length: ${new TextEncoder().encode(body).length}`,
    "",
    body,
  ].join("\r\n");
}

Deno.test("a 401 to our INVITE is answered once with digest credentials; a second 401 ends the call", async () => {
  const ua = await startAgent();
  const peer = await rawSocket();
  try {
    const call = ua.invite({
      account: { login: "alice", password: "pw", domain: "127.0.0.1", port: peer.port },
      callee: "bob",
      sdp: offerSdp,
    });
    const end = endOf(call);
    const challenge = 'WWW-Authenticate: Digest realm="test", nonce="n0nce", algorithm=MD5';
    const first = await peer.next(/^INVITE /);
    await peer.send(responseTo(first, "401 Unauthorized", [challenge]), ua.port);
    assert.match(await peer.next(/^ACK /), /CSeq: 1 ACK/);
    const second = await peer.next(/^INVITE /);
    assert.equal(headerOf(second, "CSeq"), "2 INVITE");
    assert.equal(headerOf(second, "Call-ID"), headerOf(first, "Call-ID"));
    assert.equal(headerOf(second, "From"), headerOf(first, "From"));
    assert.match(
      headerOf(second, "Authorization") ?? "",
      /^Digest .*username="alice".*nonce="n0nce"/,
    );
    await peer.send(responseTo(second, "401 Unauthorized", [challenge]), ua.port);
    assert.deepEqual(await end, { by: "remote", status: 401, reason: "Unauthorized" });
    await peer.next(/^ACK /);
    assert.equal(peer.received.filter((m) => m.startsWith("INVITE ")).length, 0);
  } finally {
    await peer.close();
    await ua.close();
  }
});

Deno.test("an outbound proxy gets every request; the Record-Route of the 2xx routes the ACK and BYE", async () => {
  const ua = await startAgent();
  const proxy = await rawSocket();
  try {
    const call = ua.invite({
      account: {
        login: "alice",
        domain: "pbx.example",
        outboundProxy: `127.0.0.1:${proxy.port}`,
        visibleName: "Alice A",
        contactParams: "line=7",
      },
      callee: "bob",
      sdp: offerSdp,
    });
    const invite = await proxy.next(/^INVITE /);
    assert.match(invite, /^INVITE sip:bob@pbx\.example SIP\/2\.0\r\n/);
    assert.equal(
      headerOf(invite, "From")?.replace(/;tag=.*/, ""),
      '"Alice A" <sip:alice@pbx.example>',
    );
    assert.equal(headerOf(invite, "Contact"), `<sip:alice@127.0.0.1:${ua.port};line=7>`);
    assert.equal(headerOf(invite, "Supported"), "timer");
    const up = new Promise<string>((resolve) => call.onEstablished = resolve);
    await proxy.send(
      responseTo(invite, "200 OK", [
        `Record-Route: <sip:127.0.0.1:${proxy.port};lr>`,
        "Contact: <sip:bob@192.0.2.9:5070>",
      ], answerSdp),
      ua.port,
    );
    assert.equal(await up, answerSdp);
    const ack = await proxy.next(/^ACK /);
    assert.match(ack, /^ACK sip:bob@192\.0\.2\.9:5070 SIP\/2\.0\r\n/);
    assert.equal(headerOf(ack, "Route"), `<sip:127.0.0.1:${proxy.port};lr>`);
    const hungUp = call.hangup();
    const bye = await proxy.next(/^BYE /);
    assert.match(bye, /^BYE sip:bob@192\.0\.2\.9:5070 SIP\/2\.0\r\n/);
    assert.equal(headerOf(bye, "CSeq"), "2 BYE");
    assert.match(headerOf(bye, "To") ?? "", /;tag=rawpeer$/);
    await proxy.send(responseTo(bye, "200 OK"), ua.port);
    await hungUp;
    assert.equal(call.lastStatus, 200);
  } finally {
    await proxy.close();
    await ua.close();
  }
});

Deno.test("session timer: a far-end refresher that does not refresh gets a BYE at expiry", async () => {
  const ua = await startAgent();
  const peer = await rawSocket();
  try {
    const call = ua.invite({ account: accountFor(peer), callee: "bob", sdp: offerSdp });
    const invite = await peer.next(/^INVITE /);
    const end = endOf(call);
    await peer.send(
      responseTo(invite, "200 OK", [
        `Contact: <sip:bob@127.0.0.1:${peer.port}>`,
        "Session-Expires: 1;refresher=uas",
        "Require: timer",
      ], answerSdp),
      ua.port,
    );
    await peer.next(/^ACK /);
    const started = Date.now();
    const bye = await peer.next(/^BYE /);
    assert.ok(Date.now() - started >= 800, "the BYE waits for the session's expiry");
    await peer.send(responseTo(bye, "200 OK"), ua.port);
    assert.deepEqual(await end, { by: "timeout", reason: "Session Expired" });
  } finally {
    await peer.close();
    await ua.close();
  }
});

Deno.test("session timer: with refresher=uac the caller refreshes by re-INVITE and the call stays up", async () => {
  await withAgents(async (a, b) => {
    const incoming = new Promise<SipCall>((resolve) => b.onIncomingCall = resolve);
    const out = a.invite({
      account: accountFor(b),
      callee: "bob",
      sdp: offerSdp,
      headers: [["Session-Expires", "2;refresher=uac"]],
    });
    const inc = await incoming;
    const refreshes: string[] = [];
    inc.onReinvite = (sdp) => (refreshes.push(sdp), answerSdp);
    const up = new Promise<void>((resolve) => out.onEstablished = () => resolve());
    await inc.answer(answerSdp);
    await up;
    await new Promise((resolve) => setTimeout(resolve, 2500));
    assert.ok(refreshes.length >= 1, "a refresh came within the interval");
    assert.equal(refreshes[0], offerSdp);
    assert.equal(out.state, "ESTABLISHED");
    assert.equal(inc.state, "ESTABLISHED");
  });
});

Deno.test("a call over TCP between two agents", async () => {
  await withAgents(async (a, b) => {
    const incoming = new Promise<SipCall>((resolve) => b.onIncomingCall = resolve);
    const out = a.invite({
      account: { ...accountFor(b), transport: "TCP" },
      callee: "bob",
      sdp: offerSdp,
    });
    const inc = await incoming;
    assert.match(inc.lastMessageText ?? "", /\r\nVia: SIP\/2\.0\/TCP /);
    assert.match(
      inc.lastMessageText ?? "",
      /\r\nContact: <sip:alice@127\.0\.0\.1:\d+;transport=tcp>/,
    );
    const up = new Promise<void>((resolve) => out.onEstablished = () => resolve());
    await inc.answer(answerSdp);
    await up;
    const ended = endOf(out);
    await inc.hangup();
    assert.deepEqual(await ended, { by: "remote", status: 200, reason: "BYE" });
  });
});

Deno.test("a registration is refreshed before it expires, reported once, and removed on close", async () => {
  const ua = await startAgent();
  const registrar = await rawSocket();
  try {
    const statuses: unknown[] = [];
    const registration = ua.register(
      { login: "alice", domain: "127.0.0.1", port: registrar.port, registerExpiresSec: 60 },
      (s) => statuses.push(s),
    );
    const first = await registrar.next(/^REGISTER /);
    assert.match(first, /^REGISTER sip:127\.0\.0\.1:\d+ SIP\/2\.0\r\n/);
    assert.equal(headerOf(first, "Expires"), "60");
    await registrar.send(responseTo(first, "200 OK", ["Expires: 2"]), ua.port);
    const refresh = await registrar.next(/^REGISTER /);
    assert.equal(headerOf(refresh, "Call-ID"), headerOf(first, "Call-ID"));
    assert.equal(headerOf(refresh, "CSeq"), "2 REGISTER");
    await registrar.send(responseTo(refresh, "200 OK", ["Expires: 60"]), ua.port);
    await new Promise((resolve) => setTimeout(resolve, 100));
    assert.deepEqual(statuses, [{ registered: true, status: 200, reason: "OK" }]);
    assert.equal(registration.registered, true);
    const closing = registration.close();
    const removal = await registrar.next(/^REGISTER /);
    assert.equal(headerOf(removal, "Expires"), "0");
    await registrar.send(responseTo(removal, "200 OK"), ua.port);
    await closing;
    assert.equal(registration.registered, false);
  } finally {
    await registrar.close();
    await ua.close();
  }
});

Deno.test("CANCEL race: a 200 arriving after our CANCEL is ACKed, then ended with BYE", async () => {
  const ua = await startAgent();
  const peer = await rawSocket();
  try {
    const call = ua.invite({ account: accountFor(peer), callee: "bob", sdp: offerSdp });
    const invite = await peer.next(/^INVITE /);
    const ringing = new Promise<void>((resolve) => call.onProgress = () => resolve());
    await peer.send(responseTo(invite, "180 Ringing"), ua.port);
    await ringing;
    const end = endOf(call);
    const hungUp = call.hangup();
    const cancel = await peer.next(/^CANCEL /);
    await peer.send(responseTo(cancel, "200 OK"), ua.port);
    // The callee answered before it saw the CANCEL.
    await peer.send(
      responseTo(invite, "200 OK", [`Contact: <sip:bob@127.0.0.1:${peer.port}>`], answerSdp),
      ua.port,
    );
    assert.match(await peer.next(/^ACK /), /CSeq: 1 ACK/);
    const bye = await peer.next(/^BYE /);
    await peer.send(responseTo(bye, "200 OK"), ua.port);
    await hungUp;
    assert.deepEqual(await end, { by: "local", status: 200, reason: "Cancelled" });
  } finally {
    await peer.close();
    await ua.close();
  }
});

Deno.test("an answer never ACKed rejects, sends BYE and ends the call with 408", async () => {
  const ua = await startAgent(50);
  const peer = await rawSocket();
  try {
    const incoming = new Promise<SipCall>((resolve) => ua.onIncomingCall = resolve);
    await peer.send(
      rawRequest("INVITE", ua, peer.port).replace(
        "Content-Length: 0\r\n\r\n",
        `Content-Type: application/sdp\r\nContent-Length: ${offerSdp.length}\r\n\r\n${offerSdp}`,
      ),
      ua.port,
    );
    const call = await incoming;
    const end = endOf(call);
    await assert.rejects(call.answer(answerSdp), /ACK/);
    assert.deepEqual(await end, { by: "timeout", status: 408, reason: "ACK Timeout" });
    const bye = await peer.next(/^BYE /);
    assert.match(bye, new RegExp(`^BYE sip:raw@127\\.0\\.0\\.1:${peer.port} SIP/2\\.0\\r\\n`));
    await peer.send(responseTo(bye, "200 OK"), ua.port);
  } finally {
    await peer.close();
    await ua.close();
  }
});

Deno.test("closing an agent ends its calls with BYE at the far end", async () => {
  await withAgents(async (a, b) => {
    const { out, inc } = await established(a, b);
    const outEnd = endOf(out);
    const incEnd = endOf(inc);
    await a.close();
    assert.equal((await outEnd).by, "local");
    assert.deepEqual(await incEnd, { by: "remote", status: 200, reason: "BYE" });
    assert.throws(() => a.invite({ account: accountFor(b), callee: "bob", sdp: offerSdp }), {
      status: 409,
    });
  });
});

Deno.test("the announced address goes into Via and Contact instead of the bound one", async () => {
  const ua = await SipUserAgent.start({
    hostname: "127.0.0.1",
    port: 0,
    announcedAddress: "198.51.100.7",
    log: silentLogger,
  });
  const peer = await rawSocket();
  try {
    assert.equal(ua.address, "198.51.100.7");
    const call = ua.invite({ account: accountFor(peer), callee: "bob", sdp: offerSdp });
    const invite = await peer.next(/^INVITE /);
    assert.match(
      headerOf(invite, "Via") ?? "",
      new RegExp(`^SIP/2\\.0/UDP 198\\.51\\.100\\.7:${ua.port};`),
    );
    assert.equal(headerOf(invite, "Contact"), `<sip:alice@198.51.100.7:${ua.port}>`);
    assert.match(headerOf(invite, "Call-ID") ?? "", /@198\.51\.100\.7$/);
    const end = endOf(call);
    await peer.send(responseTo(invite, "603 Decline"), ua.port);
    assert.deepEqual(await end, { by: "remote", status: 603, reason: "Decline" });
  } finally {
    await peer.close();
    await ua.close();
  }
});
