import assert from "node:assert/strict";
import { PortPool } from "../providers/port_pool.ts";
import { RtpPortPair } from "./rtp_port_pair.ts";

const base = 44500 + Math.floor(Math.random() * 100) * 4;

Deno.test("RTP port pair: even RTP + odd RTCP from the pool, sources given, a first burst in order", async () => {
  // An odd first port: the pair starts at the next even one.
  const pool = new PortPool(base + 1, base + 6);
  const a = await RtpPortPair.open("127.0.0.1", pool);
  const b = await RtpPortPair.open("127.0.0.1", pool);
  assert.ok(a && b);
  try {
    assert.deepEqual([a.rtpPort, b.rtpPort], [base + 2, base + 4]);
    assert.equal(await RtpPortPair.open("127.0.0.1", pool), undefined, "range exhausted");
    const got: number[] = [];
    const sources: string[] = [];
    b.onRtp = (data, source) => {
      got.push(data[0]);
      sources.push(`${source.host}:${source.port}`);
    };
    const rtcp = Promise.withResolvers<string>();
    b.onRtcp = (_, source) => rtcp.resolve(`${source.host}:${source.port}`);
    // A burst right after the socket's first send, as the first H.264 picture is.
    for (let i = 0; i < 20; i++) {
      a.send(Uint8Array.of(i), false, { host: "127.0.0.1", port: b.rtpPort });
    }
    a.send(Uint8Array.of(1), true, { host: "127.0.0.1", port: b.rtpPort + 1 });
    // Bad endpoints are lost datagrams, not exceptions.
    a.send(Uint8Array.of(1), false, { host: "127.0.0.1", port: 70000 });
    assert.equal(await rtcp.promise, `127.0.0.1:${a.rtpPort + 1}`);
    const end = performance.now() + 2000;
    while (got.length < 20 && performance.now() < end) await new Promise((r) => setTimeout(r, 10));
    assert.deepEqual(got, Array.from({ length: 20 }, (_, i) => i));
    assert.ok(sources.every((s) => s === `127.0.0.1:${a.rtpPort}`));
  } finally {
    await a.close();
    await b.close();
  }
  // Closed pairs are back in the pool.
  const again = await RtpPortPair.open("127.0.0.1", pool);
  assert.ok(again);
  await again.close();
});
