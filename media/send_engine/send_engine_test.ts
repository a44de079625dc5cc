import assert from "node:assert/strict";
import {
  openSocketCount,
  settledSocketCount,
  udpCollector,
  until,
} from "../../tests/helpers/udp_collector.ts";
import { randomBytes } from "node:crypto";
import { Buffer } from "node:buffer";
import { SrtpSession } from "werift";
import { ConflictError } from "../../core/errors.ts";
import dgram from "node:dgram";
import { IceMux } from "../protocols/webrtc/ice_mux.ts";
import { SendEngine } from "./send_engine.ts";

const delay = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

function rtpPacket(sequence: number, ssrc: number, payloadBytes: number): Uint8Array {
  const packet = new Uint8Array(12 + payloadBytes);
  const view = new DataView(packet.buffer);
  packet[0] = 0x80;
  packet[1] = 96;
  view.setUint16(2, sequence & 0xffff);
  view.setUint32(4, sequence * 3000);
  view.setUint32(8, ssrc);
  packet.set(randomBytes(payloadBytes), 12);
  return packet;
}

/** werift's receiving side for keys the engine sends with. */
function weriftReceiver(profile: number, masterKey: Uint8Array, masterSalt: Uint8Array) {
  return new SrtpSession({
    profile,
    keys: {
      localMasterKey: Buffer.from(masterKey),
      localMasterSalt: Buffer.from(masterSalt),
      remoteMasterKey: Buffer.from(masterKey),
      remoteMasterSalt: Buffer.from(masterSalt),
    },
  });
}

function withSsrcAndPt(packet: Uint8Array, ssrc: number, payloadType: number): Uint8Array {
  const out = packet.slice();
  new DataView(out.buffer).setUint32(8, ssrc);
  out[1] = (out[1] & 0x80) | payloadType;
  return out;
}

Deno.test("send engine: subscribers get their SRTP copies, decryptable by werift; a removed one gets nothing more; Workers and sockets end", async () => {
  const workersBefore = SendEngine.liveWorkers;
  const socketsBefore = openSocketCount();
  const [a, b, c] = await Promise.all([udpCollector(), udpCollector(), udpCollector()]);
  const engine = await SendEngine.start({ workers: 2, bindHost: "127.0.0.1" });
  try {
    assert.equal(SendEngine.liveWorkers, workersBefore + 2);
    assert.ok(engine.workers.every((w) => w.srtpBackend === "ffi" && w.port > 0));
    const keyA = { masterKey: randomBytes(16), masterSalt: randomBytes(14) };
    const keyB = { masterKey: randomBytes(16), masterSalt: randomBytes(12) };
    const keyC = { masterKey: randomBytes(16), masterSalt: randomBytes(14) };
    engine.addSubscriber({
      id: "a",
      host: "127.0.0.1",
      port: a.port,
      profile: "AES_CM_128_HMAC_SHA1_80",
      keys: keyA,
      groups: [{ group: "video", ssrc: 0xaaaa0001, payloadType: 102 }],
    });
    engine.addSubscriber({
      id: "b",
      host: "127.0.0.1",
      port: b.port,
      profile: "AEAD_AES_128_GCM",
      keys: keyB,
      groups: [{ group: "video" }],
    });
    engine.addSubscriber({
      id: "c",
      host: "127.0.0.1",
      port: c.port,
      profile: "AES_CM_128_HMAC_SHA1_80",
      keys: keyC,
      groups: [{ group: "audio" }],
    });
    assert.throws(
      () =>
        engine.addSubscriber({
          id: "a",
          host: "127.0.0.1",
          port: 1,
          profile: "AEAD_AES_128_GCM",
          keys: keyB,
          groups: [],
        }),
      ConflictError,
    );
    assert.throws(
      () =>
        engine.addSubscriber({
          id: "d",
          host: "127.0.0.1",
          port: 1,
          profile: "AEAD_AES_128_GCM",
          keys: keyA,
          groups: [],
        }),
      (err: Error & { field?: string }) => err.field === "keys.masterSalt",
    );

    // 20 video packets across the sequence wrap, published in two turns; 5 audio packets.
    const video = Array.from({ length: 20 }, (_, i) => rtpPacket(65526 + i, 0x1111, 1000));
    const audio = Array.from({ length: 5 }, (_, i) => rtpPacket(10 + i, 0x2222, 160));
    for (const packet of video.slice(0, 10)) engine.publish("video", packet);
    await delay(0);
    for (const packet of video.slice(10)) engine.publish("video", packet);
    for (const packet of audio) engine.publish("audio", packet);
    await until(() => a.got.length === 20 && b.got.length === 20 && c.got.length === 5);

    const srtpA = weriftReceiver(1, keyA.masterKey, keyA.masterSalt);
    const srtpB = weriftReceiver(7, keyB.masterKey, keyB.masterSalt);
    const srtpC = weriftReceiver(1, keyC.masterKey, keyC.masterSalt);
    const decrypt = (s: SrtpSession, d: Uint8Array) => new Uint8Array(s.decrypt(Buffer.from(d)));
    assert.deepEqual(
      a.got.map((d) => decrypt(srtpA, d)),
      video.map((p) => withSsrcAndPt(p, 0xaaaa0001, 102)),
    );
    assert.deepEqual(b.got.map((d) => decrypt(srtpB, d)), video);
    assert.deepEqual(c.got.map((d) => decrypt(srtpC, d)), audio);

    const before = await engine.stats();
    assert.notEqual(before.get("a")!.worker, before.get("b")!.worker, "spread by load");
    assert.deepEqual(before.get("b"), { sent: 20, dropped: 0, worker: before.get("b")!.worker });

    // A retransmission for "a" only; then "b" leaves and the stream goes on.
    engine.publish("video", video[19], ["a"]);
    assert.equal(engine.removeSubscriber("b"), true);
    const more = Array.from({ length: 5 }, (_, i) => rtpPacket(20 + i, 0x1111, 900));
    for (const packet of more) engine.publish("video", packet);
    await until(() => a.got.length === 26);
    await delay(100);
    assert.equal(b.got.length, 20, "a removed subscriber gets nothing more");
    assert.deepEqual(
      a.got.slice(21).map((d) => decrypt(srtpA, d)),
      more.map((p) => withSsrcAndPt(p, 0xaaaa0001, 102)),
    );

    const stats = await engine.stats();
    assert.deepEqual(stats.get("a"), { sent: 26, dropped: 0, worker: stats.get("a")!.worker });
    assert.equal(stats.get("c")?.sent, 5);
    assert.equal(stats.has("b"), false);

    // A group is let go with its last subscriber (each publish makes new group names).
    assert.equal(engine.groupCount, 2);
    engine.removeSubscriber("c");
    assert.equal(engine.groupCount, 1, "audio let go");
    engine.publish("audio", audio[0]);
    await delay(100);
    assert.equal(c.got.length, 5, "a let-go group reaches nobody");
    engine.removeSubscriber("a");
    assert.equal(engine.groupCount, 0);
  } finally {
    await engine.close();
    await Promise.all([a.close(), b.close(), c.close()]);
  }
  assert.equal(SendEngine.liveWorkers, workersBefore);
  assert.equal(
    await settledSocketCount(socketsBefore),
    socketsBefore,
    "the Workers' sockets are closed",
  );
});

Deno.test("send engine: the node:crypto SRTP backend gives the same packets", async () => {
  const a = await udpCollector();
  const engine = await SendEngine.start({
    workers: 1,
    bindHost: "127.0.0.1",
    srtpBackend: "portable",
  });
  try {
    assert.equal(engine.workers[0].srtpBackend, "portable");
    const keys = { masterKey: randomBytes(16), masterSalt: randomBytes(12) };
    engine.addSubscriber({
      id: "x",
      host: "127.0.0.1",
      port: a.port,
      profile: "AEAD_AES_128_GCM",
      keys,
      groups: [{ group: "g" }],
    });
    const packets = Array.from({ length: 4 }, (_, i) => rtpPacket(65534 + i, 5, 500));
    for (const packet of packets) engine.publish("g", packet);
    await until(() => a.got.length === 4);
    const srtp = weriftReceiver(7, keys.masterKey, keys.masterSalt);
    assert.deepEqual(a.got.map((d) => new Uint8Array(srtp.decrypt(Buffer.from(d)))), packets);
  } finally {
    await engine.close();
    await a.close();
  }
});

Deno.test("send engine: with socketFd every Worker sends from that socket's port and leaves it open", async () => {
  const workersBefore = SendEngine.liveWorkers;
  const socketsBefore = openSocketCount();
  const mux = IceMux.open({ host: "127.0.0.1", port: 0 });
  const receiver = dgram.createSocket("udp4");
  const sources: number[] = [];
  receiver.on("message", (_m: Uint8Array, info: { port: number }) => sources.push(info.port));
  await new Promise<void>((resolve) => receiver.bind(0, "127.0.0.1", resolve));
  const engine = await SendEngine.start({ workers: 2, socketFd: mux.fd });
  try {
    assert.ok(engine.workers.every((w) => w.port === mux.port));
    const keys = { masterKey: randomBytes(16), masterSalt: randomBytes(14) };
    for (const id of ["x", "y"]) {
      engine.addSubscriber({
        id,
        host: "127.0.0.1",
        port: receiver.address().port,
        profile: "AES_CM_128_HMAC_SHA1_80",
        keys,
        groups: [{ group: "g", ssrc: id === "x" ? 1 : 2 }],
      });
    }
    for (let i = 0; i < 3; i++) engine.publish("g", rtpPacket(i, 5, 300));
    await until(() => sources.length === 6);
    assert.deepEqual(new Set(sources), new Set([mux.port]));
  } finally {
    await engine.close();
  }
  // The mux's socket outlives the engine: it still sends.
  const before = sources.length;
  const socket = mux.socket();
  socket.send(new Uint8Array(20), receiver.address().port, "127.0.0.1");
  await until(() => sources.length === before + 1);
  socket.close();
  await mux.close();
  await new Promise<void>((resolve) => receiver.close(() => resolve()));
  assert.equal(SendEngine.liveWorkers, workersBefore);
  assert.equal(await settledSocketCount(socketsBefore), socketsBefore);
});

Deno.test("send engine: members of one group get their own sequence and timestamp offsets; a move to another group at its keyframe keeps each one's numbering continuous", async () => {
  const [a, b] = await Promise.all([udpCollector(), udpCollector()]);
  const engine = await SendEngine.start({ workers: 2, bindHost: "127.0.0.1" });
  try {
    const keyA = { masterKey: randomBytes(16), masterSalt: randomBytes(14) };
    const keyB = { masterKey: randomBytes(16), masterSalt: randomBytes(14) };
    // Each subscriber has a group of its own (what it alone gets), and shares layer "l0".
    for (
      const [id, port, keys, ssrc] of [["a", a.port, keyA, 0xa0], [
        "b",
        b.port,
        keyB,
        0xb0,
      ]] as const
    ) {
      engine.addSubscriber({
        id,
        host: "127.0.0.1",
        port,
        profile: "AES_CM_128_HMAC_SHA1_80",
        keys,
        groups: [{ group: `own-${id}`, ssrc, payloadType: 102 }],
      });
    }
    assert.equal(
      engine.join("a", {
        group: "l0",
        ssrc: 0xa0,
        payloadType: 102,
        sequenceOffset: 100,
        timestampOffset: 1000,
      }),
      true,
    );
    assert.equal(
      engine.join("b", {
        group: "l0",
        ssrc: 0xb0,
        payloadType: 102,
        sequenceOffset: 65000,
        timestampOffset: 0xffffff00,
      }),
      true,
    );
    assert.equal(engine.join("nobody", { group: "l0" }), false);
    assert.equal(engine.groupCount, 3, "one shared group, two of one");
    const l0 = Array.from({ length: 4 }, (_, i) => rtpPacket(500 + i, 0x1111, 400));
    for (const packet of l0) engine.publish("l0", packet);
    // "a" moves to layer "l1" just before its keyframe (sequence 7000): continuing from
    // 603 and timestamp 1000 + 503 * 3000 + 3000.
    const l1 = Array.from({ length: 3 }, (_, i) => rtpPacket(7000 + i, 0x2222, 300));
    const seqOffset = (604 - 7000) & 0xffff;
    const tsOffset = (1000 + 504 * 3000 - 7000 * 3000) >>> 0;
    engine.leave("a", "l0");
    engine.join("a", {
      group: "l1",
      ssrc: 0xa0,
      payloadType: 102,
      sequenceOffset: seqOffset,
      timestampOffset: tsOffset,
      startSequence: 7000,
    });
    // A late l1 packet from before the keyframe: not for "a", whose numbering it would break.
    engine.publish("l1", rtpPacket(6999, 0x2222, 300));
    for (const packet of l1) engine.publish("l1", packet);
    engine.publish("l0", rtpPacket(504, 0x1111, 400));
    await until(() => a.got.length === 7 && b.got.length === 5);
    await delay(100);
    assert.equal(a.got.length, 7, "nothing of l0 after the move, nothing late of l1");
    const srtpA = weriftReceiver(1, keyA.masterKey, keyA.masterSalt);
    const srtpB = weriftReceiver(1, keyB.masterKey, keyB.masterSalt);
    const header = (s: SrtpSession, d: Uint8Array) => {
      const clear = new DataView(new Uint8Array(s.decrypt(Buffer.from(d))).buffer);
      return [clear.getUint16(2), clear.getUint32(4), clear.getUint32(8), clear.getUint8(1) & 0x7f];
    };
    assert.deepEqual(a.got.map((d) => header(srtpA, d)), [
      ...[0, 1, 2, 3].map((i) => [600 + i, 1000 + (500 + i) * 3000, 0xa0, 102]),
      ...[0, 1, 2].map((i) => [604 + i, 1000 + (504 + i) * 3000, 0xa0, 102]),
    ]);
    assert.deepEqual(
      b.got.map((d) => header(srtpB, d)),
      [0, 1, 2, 3, 4].map((i) => [
        (65500 + i) & 0xffff,
        ((500 + i) * 3000 - 256) >>> 0,
        0xb0,
        102,
      ]),
    );
    // Payloads untouched.
    const clearA = new Uint8Array(srtpA.decrypt(Buffer.from(a.got[4])));
    assert.deepEqual(clearA.subarray(12), l1[0].subarray(12));
    assert.equal(engine.leave("a", "l1"), true);
    assert.equal(engine.leave("a", "l1"), false);
    assert.equal(engine.groupCount, 3, "l1 let go with its last member");
    const stats = await engine.stats();
    assert.equal(stats.get("a")?.sent, 7);
    assert.equal(stats.get("b")?.sent, 5);
  } finally {
    await engine.close();
    await Promise.all([a.close(), b.close()]);
  }
});

Deno.test("send engine: a member's VP8 picture ID and TL0PICIDX offsets are applied to its copies only, behind a header extension", async () => {
  const [a, b] = await Promise.all([udpCollector(), udpCollector()]);
  const engine = await SendEngine.start({ workers: 1, bindHost: "127.0.0.1" });
  try {
    const keys = { masterKey: randomBytes(16), masterSalt: randomBytes(14) };
    for (const [id, port] of [["a", a.port], ["b", b.port]] as const) {
      engine.addSubscriber({
        id,
        host: "127.0.0.1",
        port,
        profile: "AES_CM_128_HMAC_SHA1_80",
        keys,
        groups: [],
      });
    }
    engine.join("a", { group: "vp8", vp8PictureIdOffset: 0x7ffe, vp8Tl0PicIdxOffset: 250 });
    engine.join("b", { group: "vp8" });
    // RTP with a one-byte extension block (abs-send-time), then a VP8 descriptor: X, S,
    // partition 0; I, L, T; 15-bit picture ID 0x0105; TL0PICIDX 10; TID 1, Y; then a P frame.
    const packet = new Uint8Array([
      0x90,
      96,
      0,
      1,
      0,
      0,
      0,
      9,
      0,
      0,
      0,
      7,
      0xbe,
      0xde,
      0,
      1,
      0x32,
      1,
      2,
      3,
      0x90,
      0xe0,
      0x81,
      0x05,
      10,
      0x60,
      0x01,
      0xaa,
      0xbb,
    ]);
    // A packet without a picture ID (X clear): left as it is.
    const plain = new Uint8Array([0x80, 96, 0, 2, 0, 0, 0, 9, 0, 0, 0, 7, 0x10, 0x01, 0xcc]);
    engine.publish("vp8", packet);
    engine.publish("vp8", plain);
    await until(() => a.got.length === 2 && b.got.length === 2);
    const srtp = weriftReceiver(1, keys.masterKey, keys.masterSalt);
    const clear = (d: Uint8Array) => [...new Uint8Array(srtp.decrypt(Buffer.from(d)))];
    const [a1, a2] = a.got.map(clear);
    const srtpB = weriftReceiver(1, keys.masterKey, keys.masterSalt);
    const [b1, b2] = b.got.map((d) => [...new Uint8Array(srtpB.decrypt(Buffer.from(d)))]);
    assert.deepEqual(b1, [...packet], "b's copy untouched");
    assert.deepEqual(b2, [...plain]);
    // 0x0105 + 0x7ffe = 0x8103 → mod 2^15 0x0103, with the M bit; 10 + 250 = 260 → 4.
    assert.deepEqual(a1.slice(20), [0x90, 0xe0, 0x81, 0x03, 4, 0x60, 0x01, 0xaa, 0xbb]);
    assert.deepEqual(a1.slice(0, 20), [...packet.subarray(0, 20)]);
    assert.deepEqual(a2, [...plain]);
  } finally {
    await engine.close();
    await Promise.all([a.close(), b.close()]);
  }
});

Deno.test("send engine: subscribers with the same affinity key share a Worker, the others spread by load", async () => {
  const engine = await SendEngine.start({ workers: 2, bindHost: "127.0.0.1" });
  try {
    const keys = { masterKey: randomBytes(16), masterSalt: randomBytes(14) };
    const add = (id: string, affinity?: string) =>
      engine.addSubscriber({
        id,
        host: "127.0.0.1",
        port: 9,
        profile: "AES_CM_128_HMAC_SHA1_80",
        keys,
        groups: [],
        affinity,
      });
    add("t1", "track");
    add("t2", "track");
    add("other");
    add("t3", "track");
    let workers = await engine.stats();
    const worker = (id: string) => workers.get(id)!.worker;
    assert.equal(worker("t2"), worker("t1"));
    assert.equal(worker("t3"), worker("t1"));
    assert.notEqual(worker("other"), worker("t1"), "by load: the Worker without t1");
    // The key is let go with its last subscriber: the next one goes by load again, here to
    // the Worker that had none of them, once the old one has more.
    for (const id of ["t1", "t2", "t3"]) engine.removeSubscriber(id);
    add("m1");
    add("m2");
    add("t4", "track");
    workers = await engine.stats();
    assert.equal(worker("m1"), worker("m2"), "both to the emptied Worker");
    assert.notEqual(worker("t4"), worker("m1"), "t4 by load, not to its key's old Worker");
    assert.equal(worker("t4"), worker("other"));
  } finally {
    await engine.close();
  }
});
