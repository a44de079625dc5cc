import assert from "node:assert/strict";
import {
  openSocketCount,
  settledSocketCount,
  udpCollector,
  until,
} from "../../tests/helpers/udp_collector.ts";
import { UdpBatchSender } from "./udp_batch_sender.ts";

Deno.test("datagrams reach their destinations; runs of equal size go out as GSO and still arrive one by one", async () => {
  const socketsBefore = openSocketCount();
  const a = await udpCollector();
  const b = await udpCollector();
  const data = new Uint8Array(64 * 1024);
  const sender = UdpBatchSender.open({ data, bindHost: "127.0.0.1" });
  try {
    const toA = sender.addDestination("127.0.0.1", a.port);
    const toB = sender.addDestination("127.0.0.1", b.port);
    // Five back-to-back datagrams for A (the last one shorter), then two for B.
    const sizes = [300, 300, 300, 300, 120];
    let offset = 0;
    for (const [i, size] of sizes.entries()) {
      data.fill(i + 1, offset, offset + size);
      sender.queue(toA, offset, size);
      offset += size;
    }
    for (const i of [0, 1]) {
      data.fill(0xb0 + i, offset, offset + 50);
      sender.queue(toB, offset, 50);
      offset += 50;
    }
    sender.flush();
    await until(() => a.got.length === 5 && b.got.length === 2);
    assert.deepEqual(a.got.map((d) => [d.length, d[0]]), sizes.map((s, i) => [s, i + 1]));
    assert.deepEqual(b.got.map((d) => [d.length, d[0]]), [[50, 0xb0], [50, 0xb1]]);
    assert.deepEqual(sender.stats(toA), { sent: 5, dropped: 0 });
    assert.deepEqual(sender.stats(toB), { sent: 2, dropped: 0 });
    assert.equal(sender.gso, true, "this kernel has UDP_SEGMENT");
  } finally {
    sender.close();
    await a.close();
    await b.close();
  }
  assert.equal(UdpBatchSender.openSockets, 0);
  assert.equal(await settledSocketCount(socketsBefore), socketsBefore);
});

Deno.test("a destination the kernel refuses loses only its own datagrams, counted", async () => {
  const a = await udpCollector();
  const data = new Uint8Array(4096);
  const sender = UdpBatchSender.open({ data, bindHost: "127.0.0.1", gso: false });
  try {
    const bad = sender.addDestination("127.0.0.1", 0); // port 0: EINVAL on send
    const good = sender.addDestination("127.0.0.1", a.port);
    for (let i = 0; i < 10; i++) {
      sender.queue(i % 2 ? good : bad, i * 100, 100);
    }
    sender.flush();
    await until(() => a.got.length === 5);
    assert.deepEqual(sender.stats(bad), { sent: 0, dropped: 5 });
    assert.deepEqual(sender.stats(good), { sent: 5, dropped: 0 });
    assert.throws(() => sender.addDestination("example.com", 1), RangeError);
  } finally {
    sender.close();
    await a.close();
  }
});

Deno.test("an IPv6 dual-stack socket sends to IPv4-mapped destinations", async () => {
  const a = await udpCollector();
  const data = new Uint8Array(4096);
  const sender = UdpBatchSender.open({ data, bindHost: "::" });
  try {
    const to = sender.addDestination("127.0.0.1", a.port);
    data.fill(7, 0, 10);
    sender.queue(to, 0, 10);
    sender.flush();
    await until(() => a.got.length === 1);
    assert.deepEqual(a.got[0], new Uint8Array(10).fill(7));
  } finally {
    sender.close();
    await a.close();
  }
});
