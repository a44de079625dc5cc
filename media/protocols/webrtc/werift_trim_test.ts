import assert from "node:assert/strict";
import {
  Event,
  type RTCDtlsTransport,
  RTCPeerConnection,
  RtcpPacket,
  RtcpTransportLayerFeedback,
  SrtpAuthenticationError,
} from "werift";
import { GenericNack } from "werift";
import {
  compactHandshake,
  dropHandshakeKeys,
  dropRtpProtection,
  lazyDescriptions,
  leanEvent,
  leanEvents,
  shareLocalCertificate,
} from "./werift_trim.ts";
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

/** Two werift peers on loopback, offerer and answerer, connected (DTLS done). */
async function connectedPair(): Promise<[RTCPeerConnection, RTCPeerConnection]> {
  installNoDefaultStun();
  const offerer = new RTCPeerConnection({ iceServers: [] });
  const answerer = new RTCPeerConnection({ iceServers: [] });
  offerer.addTransceiver("video", { direction: "sendonly" });
  offerer.addTransceiver("audio", { direction: "sendonly" });
  await negotiate(offerer, answerer);
  const deadline = Date.now() + 10_000;
  const connected = () =>
    [offerer, answerer].every((pc) =>
      pc.dtlsTransports.length > 0 && pc.dtlsTransports.every((t) => t.state === "connected")
    );
  while (!connected()) {
    if (Date.now() > deadline) throw new Error("the two werift peers did not connect");
    await new Promise((r) => setTimeout(r, 20));
  }
  return [offerer, answerer];
}

/** One offer/answer exchange, with every candidate in the descriptions. */
async function negotiate(offerer: RTCPeerConnection, answerer: RTCPeerConnection) {
  await offerer.setLocalDescription(await offerer.createOffer());
  await gathered(offerer);
  await answerer.setRemoteDescription(offerer.localDescription!);
  await answerer.setLocalDescription(await answerer.createAnswer());
  await gathered(answerer);
  await offerer.setRemoteDescription(answerer.localDescription!);
}

/** Waits for `pc`'s candidates (host ones only: no STUN), at most 5 s. */
async function gathered(pc: RTCPeerConnection): Promise<void> {
  if (pc.iceGatheringState === "complete") return;
  await pc.iceGatheringStateChange.watch((s) => s === "complete", 5_000);
}

/** The DTLS transport of the pair that is the DTLS server, and the other side's. */
function serverSide(pair: RTCPeerConnection[]): [RTCDtlsTransport, RTCDtlsTransport] {
  const transports = pair.flatMap((pc) => pc.dtlsTransports);
  const server = transports.find((t) => t.role === "server");
  const client = transports.find((t) => t.role === "client");
  assert.ok(server && client, "one DTLS server and one client");
  return [server, client];
}

Deno.test("compactHandshake: a connected werift DTLS server keeps answering with message types only", async () => {
  const pair = await connectedPair();
  try {
    const [server, client] = serverSide(pair);
    /** werift's DtlsServer and its context: what compactHandshake relies on. */
    const socket = (server as unknown as {
      dtls: {
        extensions: unknown[];
        flight6?: { exec(): Promise<void> };
        transport: { send(data: Uint8Array): unknown };
        dtls: {
          flight: number;
          lastMessage: Uint8Array[];
          lastFlight: unknown[];
          handshakeCache: Record<string, { data: object[] }>;
          checkHandshakesExist(types: number[]): boolean;
        };
      };
    }).dtls;
    const context = socket.dtls;
    assert.equal(context.flight, 6, "werift's server ends its handshake at flight 6");
    assert.ok(context.checkHandshakesExist([16]), "the ClientKeyExchange is in the cache");
    const bytesBefore = JSON.stringify(context.handshakeCache).length;
    assert.equal(compactHandshake(server), true);
    assert.equal(compactHandshake(server), false, "once");
    assert.equal(compactHandshake(client), false, "a DTLS client keeps its handshake");
    assert.ok(JSON.stringify(context.handshakeCache).length < bytesBefore / 4);
    assert.deepEqual(context.lastFlight, []);
    assert.deepEqual(socket.extensions, []);
    assert.ok(context.checkHandshakesExist([16]), "werift still finds the ClientKeyExchange");
    // What werift does on a retransmitted Finished: its last flight again, as sent.
    const sent: Uint8Array[] = [];
    const send = socket.transport.send;
    socket.transport.send = (data) => {
      sent.push(data);
      return send.call(socket.transport, data);
    };
    await socket.flight6!.exec();
    socket.transport.send = send;
    assert.deepEqual(sent.map((b) => [...b]), context.lastMessage.map((b) => [...b]));
    // SRTCP still goes both ways.
    const got = new Promise<RtcpPacket[]>((resolve) => client.onRtcp.once((p) => resolve([p])));
    const nack = new RtcpTransportLayerFeedback({
      feedback: new GenericNack({ senderSsrc: 1, mediaSourceSsrc: 2, lost: [5] }),
    });
    await server.sendRtcp([nack]);
    const [packet] = await got;
    assert.equal(packet.type, RtcpTransportLayerFeedback.type);
  } finally {
    for (const pc of pair) await pc.close();
  }
});

Deno.test("lazyDescriptions: werift's descriptions read the same and renegotiate", async () => {
  const [offerer, answerer] = await connectedPair();
  try {
    const before = [offerer, answerer].map((pc) => [
      pc.localDescription?.sdp,
      pc.remoteDescription?.sdp,
    ]);
    assert.equal(lazyDescriptions(offerer), 2);
    assert.equal(lazyDescriptions(answerer), 2);
    const manager = (answerer as unknown as { sdpManager: object }).sdpManager;
    const field = Object.getOwnPropertyDescriptor(manager, "currentRemoteDescription");
    assert.ok(field?.get, "no parsed description held until read");
    assert.deepEqual(
      [offerer, answerer].map((pc) => [pc.localDescription?.sdp, pc.remoteDescription?.sdp]),
      before,
    );
    // A renegotiation (a third track) reads and replaces them.
    offerer.addTransceiver("video", { direction: "sendonly" });
    await negotiate(offerer, answerer);
    assert.equal(answerer.getTransceivers().length, 3);
    assert.equal(offerer.remoteDescription?.sdp.split("m=").length, 4);
    const replaced = Object.getOwnPropertyDescriptor(manager, "currentRemoteDescription");
    assert.ok(replaced && "value" in replaced, "werift's new description is a plain field");
    assert.equal(offerer.connectionState, "connected");
  } finally {
    await offerer.close();
    await answerer.close();
  }
});

Deno.test("shareLocalCertificate: every transport points at one copy of the certificate", async () => {
  const first = await connectedPair();
  const second = await connectedPair();
  try {
    const transports = [...first, ...second].flatMap((pc) => pc.dtlsTransports);
    /** werift's decoded local certificate of a transport (CipherContext.localCert). */
    const cert = (t: RTCDtlsTransport) =>
      (t as unknown as { dtls: { cipher: { localCert: Buffer } } }).dtls.cipher.localCert;
    const before = transports.map((t) => Buffer.from(cert(t)));
    assert.ok(before.every((b) => b.length > 100), "werift decodes the certificate per transport");
    assert.notEqual(cert(transports[0]), cert(transports[2]));
    for (const t of transports) assert.equal(shareLocalCertificate(t), true);
    assert.equal(shareLocalCertificate(transports[0]), false, "once");
    assert.ok(transports.every((t) => cert(t) === cert(transports[0])), "one copy");
    assert.ok(transports.every((t, i) => cert(t).equals(before[i])), "the same bytes");
    assert.equal(cert(transports[0]).buffer.byteLength, cert(transports[0]).length);
  } finally {
    for (const pc of [...first, ...second]) await pc.close();
  }
});
