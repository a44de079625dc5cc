import assert from "node:assert/strict";
import { readBufferMinBytes, RtmpClosedError, RtmpConn, writeCheckIntervalMs } from "./conn.ts";
import { outChunkBytes, writeChunks } from "./chunk_writer.ts";
import { defaultChunkBytes } from "./chunk_reader.ts";
import { buildHandshakeEcho, buildHandshakeHello, handshakePacketBytes } from "./handshake.ts";
import { MessageType, type RtmpMessage } from "./message.ts";

/** A connected TCP pair on 127.0.0.1: `server` accepted, `client` connected. */
async function tcpPair(): Promise<{ server: Deno.TcpConn; client: Deno.TcpConn }> {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const { port } = listener.addr as Deno.NetAddr;
  const [server, client] = await Promise.all([
    listener.accept(),
    Deno.connect({ hostname: "127.0.0.1", port }),
  ]);
  listener.close();
  return { server, client };
}

async function readFull(conn: Deno.Conn, bytes: number): Promise<Uint8Array> {
  const out = new Uint8Array(bytes);
  for (let filled = 0; filled < bytes;) {
    const n = await conn.read(out.subarray(filled));
    if (n === null) throw new Error("closed early");
    filled += n;
  }
  return out;
}

async function writeAll(conn: Deno.Conn, bytes: Uint8Array): Promise<void> {
  for (let written = 0; written < bytes.length;) {
    written += await conn.write(bytes.subarray(written));
  }
}

Deno.test("RTMP conn: messages sent in the same segment as the handshake's C2 are read, and a message larger than the read buffer arrives whole", async () => {
  const { server, client } = await tcpPair();
  const conn = new RtmpConn(server);
  try {
    const accepted = conn.acceptHandshake();
    await writeAll(client, buildHandshakeHello(0));
    const reply = await readFull(client, 1 + 2 * handshakePacketBytes);
    // C2 and two messages in one write: the handshake must not take what follows C2.
    const small: RtmpMessage = {
      type: MessageType.commandAmf0,
      streamId: 0,
      timestamp: 0,
      payload: new Uint8Array([2, 0, 7, ...new TextEncoder().encode("connect")]),
    };
    const large: RtmpMessage = {
      type: MessageType.dataAmf0,
      streamId: 1,
      timestamp: 40,
      payload: Uint8Array.from({ length: 8 * readBufferMinBytes + 77 }, (_, i) => i & 0xff),
    };
    const c2 = buildHandshakeEcho(reply.subarray(1, 1 + handshakePacketBytes));
    const first = writeChunks(3, small, defaultChunkBytes, [c2]);
    await writeAll(client, first);
    await accepted;
    await writeAll(client, writeChunks(4, large, defaultChunkBytes));
    const messages = conn.messages();
    const a = (await messages.next()).value as RtmpMessage;
    assert.equal(a.type, MessageType.commandAmf0);
    assert.deepEqual(a.payload, small.payload);
    const b = (await messages.next()).value as RtmpMessage;
    assert.equal(b.type, MessageType.dataAmf0);
    assert.equal(b.timestamp, 40);
    assert.deepEqual(b.payload, large.payload);
    conn.close();
    assert.equal((await messages.next()).done, true);
  } finally {
    conn.close();
    client.close();
  }
});

Deno.test("RTMP conn: a peer that stops reading is closed by the write timeout; one that reads stays open", async () => {
  const timeoutMs = 300;
  const stalled = await tcpPair();
  const reading = await tcpPair();
  const stalledConn = new RtmpConn(stalled.server, { writeTimeoutMs: timeoutMs });
  const readingConn = new RtmpConn(reading.server, { writeTimeoutMs: timeoutMs });
  // The reading peer drains whatever comes until its connection ends.
  const drained = (async () => {
    const buf = new Uint8Array(64 * 1024);
    let total = 0;
    try {
      for (;;) {
        const n = await reading.client.read(buf);
        if (n === null) return total;
        total += n;
      }
    } catch {
      return total;
    }
  })();
  try {
    // More than the loopback socket buffers take: the write waits on the stalled peer.
    const big = new Uint8Array(32 * 1024 * 1024);
    const started = performance.now();
    const stalledDone = Promise.withResolvers<unknown>();
    stalledConn.writeThen(big, (err) => stalledDone.resolve(err));
    // The reading peer's connection writes all along, each write waited on.
    const written = (async () => {
      let n = 0;
      while (performance.now() - started < timeoutMs + 2 * writeCheckIntervalMs + 300) {
        await readingConn.writeRaw(new Uint8Array(outChunkBytes));
        n++;
        await new Promise((r) => setTimeout(r, 20));
      }
      return n;
    })();
    const deadline = setTimeout(() => stalledDone.resolve("not cut within 5 s"), 5000);
    const err = await stalledDone.promise;
    clearTimeout(deadline);
    const elapsedMs = performance.now() - started;
    assert.ok(err instanceof RtmpClosedError, `the stalled write failed: ${err}`);
    assert.equal(stalledConn.closed, true);
    assert.ok(elapsedMs >= timeoutMs, `cut after ${elapsedMs} ms, before its timeout`);
    assert.ok(
      elapsedMs < timeoutMs + writeCheckIntervalMs + 1000,
      `cut after ${elapsedMs} ms`,
    );
    const writes = await written;
    assert.ok(writes > 10, `${writes} writes`);
    assert.equal(readingConn.closed, false, "the reading peer's connection stays open");
  } finally {
    stalledConn.close();
    readingConn.close();
    stalled.client.close();
    await drained;
    reading.client.close();
  }
});
