import assert from "node:assert/strict";
import { Event, type RTCDtlsTransport, RTCPeerConnection, SrtpAuthenticationError } from "werift";
import { dropHandshakeKeys, dropRtpProtection, leanEvent, leanEvents } from "./werift_trim.ts";
import { installNoDefaultStun } from "./no_default_stun.ts";

/** Runs the same script on an event and records what its subscribers saw. */
async function script(event: Event<[number]>): Promise<string[]> {
  const seen: string[] = [];
  const first = event.subscribe((n) => seen.push(`a${n}`));
  event.subscribe((n) => seen.push(`b${n}`), () => seen.push("b-complete"));
  event.once((n) => seen.push(`once${n}`));
  event.queuingSubscribe(async (n) => {
    await new Promise((r) => setTimeout(r, 1));
    seen.push(`q${n}`);
  });
  const promised = event.asPromise();
  event.execute(1);
  first.unSubscribe();
  event.execute(2);
  await new Promise((r) => setTimeout(r, 20));
  seen.push(`promise ${(await promised).join()}`);
  const watched = event.watch((n) => n === 4);
  event.execute(3);
  event.execute(4);
  seen.push(`watch ${(await watched).join()}`);
  event.onended = () => seen.push("ended");
  event.complete();
  event.execute(5);
  seen.push(`ended ${event.ended}`);
  // The queuing subscriber of 3 and 4 finishes later.
  await new Promise((r) => setTimeout(r, 20));
  return seen;
}

Deno.test("a lean werift Event does what werift's does", async () => {
  const lean = new Event<[number]>();
  assert.equal(leanEvent(lean), 10);
  const expected = await script(new Event<[number]>());
  assert.deepEqual(await script(lean), expected);
  assert.deepEqual(expected.slice(0, 4), ["a1", "b1", "once1", "b2"]);
  assert.ok(expected.includes("q1") && expected.includes("q2"));
  assert.ok(expected.includes("b-complete") && expected.includes("ended"));
  assert.ok(!expected.includes("b5"));
  assert.deepEqual(expected.slice(-2), ["q3", "q4"]);
});

Deno.test("a lean werift Event's error reaches the subscribers and unsubscribes them", () => {
  const errors: unknown[] = [];
  const event = new Event<[number]>();
  leanEvent(event);
  event.subscribe(() => errors.push("executed"), undefined, (e) => errors.push(e));
  event.error("boom");
  event.execute(1);
  assert.deepEqual(errors, ["boom"]);
});

Deno.test("leanEvents reaches a peer's events and leaves a replaced method alone", async () => {
  installNoDefaultStun();
  const pc = new RTCPeerConnection({ iceServers: [] });
  try {
    pc.addTransceiver("video", { direction: "sendonly" });
    pc.addTransceiver("audio", { direction: "sendonly" });
    const sender = pc.getTransceivers()[0].sender;
    // As the DTLS retransmit filter does: wrap execute, calling the original detached.
    const event = sender.onRtcp;
    const original = event.execute;
    let wrapped = 0;
    event.execute = (...args) => {
      wrapped++;
      original(...args);
    };
    const changed = leanEvents(pc);
    assert.ok(changed >= 20, `${changed} events made lean`);
    // Methods of the lean events are the shared ones, the same on every event.
    const other = pc.getTransceivers()[1].sender.onGenericNack;
    assert.equal(other.subscribe, pc.getTransceivers()[0].sender.onGenericNack.subscribe);
    let received = 0;
    event.subscribe(() => received++);
    event.execute(undefined as never);
    assert.equal(wrapped, 1);
    assert.equal(received, 1);
    assert.equal(leanEvents(pc), 0, "a second walk finds nothing left to change");
  } finally {
    await pc.close();
  }
});

Deno.test("a lean werift Event with no subscribers shares one list until someone subscribes", () => {
  const a = new Event<[number]>();
  const b = new Event<[number]>();
  leanEvent(a);
  leanEvent(b);
  /** werift's subscriber list of an event (a private field of its typings). */
  const list = (e: Event<[number]>) => (e as unknown as { event: object }).event;
  assert.equal(list(a), list(b), "one shared empty list");
  const seen: number[] = [];
  const sub = a.subscribe((n) => seen.push(n));
  assert.notEqual(list(a), list(b));
  a.execute(1);
  b.execute(2);
  a.allUnsubscribe();
  sub.unSubscribe();
  a.execute(3);
  assert.deepEqual(seen, [1]);
  assert.equal(a.length, 0);
});

Deno.test("dropRtpProtection keeps the keys, refuses to protect and drops received RTP", () => {
  const config = { keys: { localMasterKey: new Uint8Array(16) }, profile: 7 };
  const dtls = { srtp: { config, encrypt: () => new Uint8Array() } };
  const transport = dtls as unknown as RTCDtlsTransport;
  assert.equal(dropRtpProtection(transport), true);
  const srtp = dtls.srtp as unknown as {
    config: unknown;
    encrypt(): unknown;
    decrypt(): unknown;
  };
  assert.equal(srtp.config, config);
  assert.throws(() => srtp.encrypt(), /send engine/);
  // werift drops a packet whose decryption throws this (and rethrows anything else).
  assert.throws(() => srtp.decrypt(), SrtpAuthenticationError);
  assert.equal(dropRtpProtection(transport), false, "once");
});

Deno.test("dropHandshakeKeys lets a connected DTLS server's keys go, and only a server's", () => {
  const transport = (role: string, state: string, connected: boolean) => ({
    role,
    state,
    dtls: { connected, cipher: { localPrivateKey: {}, localKeyPair: {}, masterSecret: 1 } },
  });
  const server = transport("server", "connected", true);
  assert.equal(dropHandshakeKeys(server as unknown as RTCDtlsTransport), true);
  assert.equal(server.dtls.cipher.localPrivateKey, undefined);
  assert.equal(server.dtls.cipher.localKeyPair, undefined);
  assert.equal(server.dtls.cipher.masterSecret, 1, "the session's keys stay");
  for (
    const other of [
      transport("client", "connected", true),
      transport("server", "connecting", false),
    ]
  ) {
    assert.equal(dropHandshakeKeys(other as unknown as RTCDtlsTransport), false);
    assert.ok(other.dtls.cipher.localPrivateKey);
  }
});
