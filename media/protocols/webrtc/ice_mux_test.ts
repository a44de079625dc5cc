import assert from "node:assert/strict";
import dgram from "node:dgram";
import { RTCPeerConnection } from "werift";
import {
  openSocketCount,
  settledSocketCount,
  until,
} from "../../../tests/helpers/udp_collector.ts";
import { IceMux, type MuxSocket } from "./ice_mux.ts";
import { Peer } from "./peer.ts";
import { bindingRequestUsername } from "./stun_username.ts";

/** A STUN Binding request with USERNAME `username` (and a fingerprint-like trailing attribute). */
function bindingRequest(username: string): Uint8Array {
  const name = new TextEncoder().encode(username);
  const padded = (name.length + 3) & ~3;
  const out = new Uint8Array(20 + 4 + padded + 8);
  const view = new DataView(out.buffer);
  view.setUint16(0, 0x0001);
  view.setUint16(2, out.length - 20);
  view.setUint32(4, 0x2112a442);
  crypto.getRandomValues(out.subarray(8, 20));
  view.setUint16(20, 0x0006);
  view.setUint16(22, name.length);
  out.set(name, 24);
  view.setUint16(24 + padded, 0x8028);
  view.setUint16(26 + padded, 4);
  return out;
}

/** A node:dgram socket on 127.0.0.1 that sends and keeps what it receives. */
async function remote() {
  const socket = dgram.createSocket("udp4");
  const got: Uint8Array[] = [];
  socket.on("message", (message: Uint8Array) => got.push(new Uint8Array(message)));
  await new Promise<void>((resolve) => socket.bind(0, "127.0.0.1", resolve));
  return {
    got,
    port: socket.address().port,
    send: (data: Uint8Array, port: number) => socket.send(data, port, "127.0.0.1"),
    close: () => new Promise<void>((resolve) => socket.close(() => resolve())),
  };
}

/** Keeps what a mux socket delivers, with the sender's port. */
function listen(socket: MuxSocket): { data: Uint8Array; port: number }[] {
  const got: { data: Uint8Array; port: number }[] = [];
  socket.on("message", (data: Uint8Array, info: { port: number }) => {
    got.push({ data: new Uint8Array(data), port: info.port });
  });
  return got;
}

Deno.test("STUN USERNAME reader: well-formed Binding requests only", () => {
  assert.equal(bindingRequestUsername(bindingRequest("abcd:wxyz")), "abcd:wxyz");
  const request = bindingRequest("abcd:wxyz");
  assert.equal(bindingRequestUsername(request.subarray(0, 28)), undefined, "truncated");
  const response = request.slice();
  response[0] = 0x01; // Binding success response (0x0101)
  assert.equal(bindingRequestUsername(response), undefined);
  const badCookie = request.slice();
  badCookie[4] = 0;
  assert.equal(bindingRequestUsername(badCookie), undefined);
  const longAttribute = request.slice();
  new DataView(longAttribute.buffer).setUint16(22, 400);
  assert.equal(bindingRequestUsername(longAttribute), undefined, "attribute past the end");
  for (let i = 0; i < 2000; i++) {
    const junk = crypto.getRandomValues(new Uint8Array(20 + (i % 60)));
    assert.equal(bindingRequestUsername(junk), undefined);
  }
});

Deno.test("ICE mux: opens on a port, refuses a taken one, closes (twice) and frees it", async () => {
  const before = IceMux.openCount;
  const mux = IceMux.open({ host: "127.0.0.1", port: 0 });
  assert.ok(mux.port > 0 && mux.fd > 0);
  assert.equal(IceMux.openCount, before + 1);
  assert.throws(() => IceMux.open({ host: "127.0.0.1", port: mux.port }), Deno.errors.AddrInUse);
  const started = Date.now();
  await Promise.all([mux.close(), mux.close()]);
  await mux.close();
  assert.ok(Date.now() - started < 1000, "the receive loop ends within a poll timeout");
  assert.equal(IceMux.openCount, before);
  const again = IceMux.open({ host: "127.0.0.1", port: mux.port });
  await again.close();
  assert.throws(() => IceMux.open({ host: "not-an-ip", port: 0 }), RangeError);
});

Deno.test("ICE mux: routes by ufrag, then by bound remote; drops unknown sources and junk", async () => {
  const sockets = openSocketCount();
  const mux = IceMux.open({ host: "127.0.0.1", port: 0 });
  const browser = await remote();
  const otherBrowser = await remote();
  const stranger = await remote();
  try {
    const a = mux.socket();
    const b = mux.socket();
    const gotA = listen(a);
    const gotB = listen(b);
    a.addUfrag("aaaa");
    b.addUfrag("bbbb");
    assert.equal(mux.socketCount, 2);

    // Media from a source no Binding request has introduced goes nowhere.
    stranger.send(new Uint8Array([0x80, 0x60, 1, 2]), mux.port);
    // A Binding request naming b's ufrag reaches b and binds the browser's address to it.
    browser.send(bindingRequest("bbbb:remote1"), mux.port);
    await until(() => gotB.length === 1);
    browser.send(new Uint8Array([0x80, 0x60, 3, 4]), mux.port);
    await until(() => gotB.length === 2);
    assert.deepEqual(gotB.map((g) => g.port), [browser.port, browser.port]);
    assert.deepEqual([...gotB[1].data], [0x80, 0x60, 3, 4]);

    // A second candidate of a browser checking a's ufrag: bound to a, b unaffected.
    otherBrowser.send(bindingRequest("aaaa:remote2"), mux.port);
    otherBrowser.send(new Uint8Array([22, 254, 253, 0]), mux.port);
    await until(() => gotA.length === 2);

    // An unknown ufrag, a truncated request, a Binding response and random bytes: dropped.
    const before = mux.counters;
    stranger.send(bindingRequest("zzzz:remote3"), mux.port);
    stranger.send(bindingRequest("aaaa:remote3").subarray(0, 24), mux.port);
    const response = bindingRequest("aaaa:remote3");
    response[0] = 0x01;
    stranger.send(response, mux.port);
    for (let i = 0; i < 200; i++) {
      stranger.send(crypto.getRandomValues(new Uint8Array(1 + (i % 300))), mux.port);
    }
    await until(() => mux.counters.droppedUnknownSource - before.droppedUnknownSource === 203);
    assert.equal(gotA.length, 2);
    assert.equal(gotB.length, 2);
    assert.equal(mux.counters.datagramsIn, 4);

    // Sends come from the mux's port; a send to a new address binds it to the sender.
    a.send(new Uint8Array([1, 2, 3]), stranger.port, "127.0.0.1");
    b.send(new Uint8Array([4, 5]), browser.port, "127.0.0.1");
    await until(() => stranger.got.length === 1 && browser.got.length === 1);
    stranger.send(new Uint8Array([0x80, 0x60, 9, 9]), mux.port);
    await until(() => gotA.length === 3);
    assert.equal(gotA[2].port, stranger.port);
    assert.equal(mux.counters.datagramsOut, 2);
    const sendCallback = Promise.withResolvers<Error | null>();
    a.send(new Uint8Array([1]), 9, "example.invalid", sendCallback.resolve);
    assert.ok((await sendCallback.promise) instanceof RangeError, "no DNS on the mux");
    assert.equal(mux.counters.sendDropped, 1);

    // A closed socket's ufrag and remotes are forgotten.
    const closed = new Promise((resolve) => b.once("close", resolve));
    b.close();
    await closed;
    b.close();
    const dropped = mux.counters.droppedUnknownSource;
    browser.send(new Uint8Array([0x80, 0x60, 5, 6]), mux.port);
    browser.send(bindingRequest("bbbb:remote1"), mux.port);
    await until(() => mux.counters.droppedUnknownSource === dropped + 2);
    assert.equal(gotB.length, 2);
    assert.equal(mux.socketCount, 1);
    a.close();
  } finally {
    await browser.close();
    await otherBrowser.close();
    await stranger.close();
    await mux.close();
  }
  assert.equal(await settledSocketCount(sockets), sockets);
});

Deno.test("ICE mux: two server peers on one mux both connect to their werift clients", async () => {
  const sockets = openSocketCount();
  const mux = IceMux.open({ host: "127.0.0.1", port: 0 });
  const address = { bind: "127.0.0.1", portMin: 40000, portMax: 40001, mux };
  const pairs = [0, 1].map(() => ({
    client: new RTCPeerConnection({ iceServers: [] }),
    server: new Peer(address, []),
  }));
  try {
    for (const { client, server } of pairs) {
      client.createDataChannel("probe");
      await client.setLocalDescription(await client.createOffer());
      await until(() => client.iceGatheringState === "complete", 5000);
      const answer = await server.answer(client.localDescription!.sdp, () => {});
      assert.match(answer, new RegExp(` 127\\.0\\.0\\.1 ${mux.port} typ host`));
      assert.doesNotMatch(answer, /typ host.*\r\na=candidate/s, "one candidate");
      await client.setRemoteDescription({ type: "answer", sdp: answer });
    }
    await until(
      () => pairs.every((p) => p.client.connectionState === "connected"),
      10_000,
    );
    await until(() => pairs.every((p) => p.server.pc.connectionState === "connected"), 5000);
    assert.equal(mux.socketCount, 2);
    assert.equal(mux.counters.droppedUnknownSource, 0);
    assert.ok(
      mux.counters.datagramsIn > 10 && mux.counters.datagramsOut > 10,
      "ICE and DTLS went through the mux",
    );
  } finally {
    for (const { client, server } of pairs) {
      await client.close();
      await server.close();
    }
    await until(() => mux.socketCount === 0);
    await mux.close();
  }
  assert.equal(await settledSocketCount(sockets), sockets);
});

Deno.test("ICE mux: after an ICE restart (new ufrags) the peer's checks still route", async () => {
  const mux = IceMux.open({ host: "127.0.0.1", port: 0 });
  const client = new RTCPeerConnection({ iceServers: [] });
  const server = new Peer({ bind: "127.0.0.1", portMin: 40000, portMax: 40001, mux }, []);
  const ufragOf = (sdp: string) => /a=ice-ufrag:(\S+)/.exec(sdp)![1];
  try {
    const received: string[] = [];
    server.pc.onDataChannel.subscribe((dc) =>
      dc.onMessage.subscribe((m) => received.push(String(m)))
    );
    const channel = client.createDataChannel("probe");
    await client.setLocalDescription(await client.createOffer());
    await until(() => client.iceGatheringState === "complete", 5000);
    const first = await server.answer(client.localDescription!.sdp, () => {});
    await client.setRemoteDescription({ type: "answer", sdp: first });
    await until(() => channel.readyState === "open", 10_000);

    client.restartIce();
    await client.setLocalDescription(await client.createOffer());
    await until(() => client.iceGatheringState === "complete", 5000);
    const second = await server.answer(client.localDescription!.sdp, () => {});
    assert.notEqual(ufragOf(second), ufragOf(first), "the restart gave the server a new ufrag");
    const inBefore = mux.counters.datagramsIn;
    await client.setRemoteDescription({ type: "answer", sdp: second });
    await until(() => mux.counters.datagramsIn > inBefore + 2, 10_000);
    channel.send("after restart");
    await until(() => received.includes("after restart"), 5000);
    // A browser candidate never seen before, checking with the new ufrag, is routed too.
    const fresh = await remote();
    try {
      const before = mux.counters.datagramsIn;
      fresh.send(
        bindingRequest(`${ufragOf(second)}:${ufragOf(client.localDescription!.sdp)}`),
        mux.port,
      );
      await until(() => mux.counters.datagramsIn > before);
    } finally {
      await fresh.close();
    }
    assert.equal(mux.counters.droppedUnknownSource, 0);
  } finally {
    await client.close();
    await server.close();
    await until(() => mux.socketCount === 0);
    await mux.close();
  }
});
