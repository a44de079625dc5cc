/**
 * The write paths of RTMP connections (`rtmp.transport`): `ffi` (send(2) on the socket's
 * descriptor, the rest through Deno's write) and `deno` (Deno's writes only) deliver the same
 * bytes in order, a player that stops reading is dropped by its write timeout while the others
 * get every frame, and a configured server plays on either.
 */
import assert from "node:assert/strict";
import { configSchema } from "../config.ts";
import { createLogger } from "../core/log.ts";
import type { MediaFrame } from "../media/frame.ts";
import { RtmpClosedError, RtmpConn } from "../media/protocols/rtmp/conn.ts";
import { fdSendSupport } from "../media/protocols/rtmp/fd_send.ts";
import { MessageType } from "../media/protocols/rtmp/message.ts";
import { openRtmpClient } from "../media/protocols/rtmp/client.ts";
import { parseRtmpUrl } from "../media/protocols/rtmp/url.ts";
import { RtmpFanout } from "../media/publishers/rtmp_fanout.ts";
import { Stream } from "../media/stream.ts";
import { aacFrame, aacTrack, h264Track } from "./helpers/media_tracks.ts";
import { makeClip, waitFor } from "./helpers/media_fixtures.ts";
import { playerChunkReader } from "./helpers/rtmp_player_reader.ts";
import { startTestServer, testConfig } from "./helpers/test_server.ts";

const transports = ["ffi", "deno"] as const;

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

/** An RtmpConn on `tcp` taking `transport`'s path; with ffi, once its descriptor is found. */
async function connOf(
  tcp: Deno.TcpConn,
  transport: (typeof transports)[number],
  writeTimeoutMs?: number,
): Promise<RtmpConn> {
  const conn = new RtmpConn(tcp, { fdSend: transport === "ffi", writeTimeoutMs });
  if (transport === "ffi") {
    await waitFor("the socket's descriptor", () => conn.sendsOnDescriptor || undefined, 3000);
  } else {
    await new Promise((r) => setTimeout(r, 10));
    assert.equal(conn.sendsOnDescriptor, false);
  }
  return conn;
}

/** Reads `conn` to its end. */
async function readAll(conn: Deno.Conn): Promise<Uint8Array> {
  const parts: Uint8Array[] = [];
  const buf = new Uint8Array(256 * 1024);
  for (;;) {
    const n = await conn.read(buf);
    if (n === null) break;
    parts.push(buf.slice(0, n));
  }
  const out = new Uint8Array(parts.reduce((s, p) => s + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

Deno.test("ffi transport: available on this machine (Linux, glibc, --allow-ffi)", () => {
  assert.deepEqual(fdSendSupport(), { ok: true });
});

for (const transport of transports) {
  Deno.test(`RTMP conn (${transport}): writes of every size, many more than the socket takes at once, arrive whole and in order`, async () => {
    const { server, client } = await tcpPair();
    const conn = await connOf(server, transport);
    const received = readAll(client);
    // 400 writes of 1 B to 256 KiB (about 25 MiB), given without waiting: most are taken
    // at once, some in part (the rest through Deno's write), others queue behind those.
    const writes: Uint8Array[] = [];
    let seed = 7;
    for (let i = 0; i < 400; i++) {
      seed = (seed * 1103515245 + 12345) >>> 0;
      const size = 1 + (seed % (i % 10 === 0 ? 256 * 1024 : 4096));
      writes.push(Uint8Array.from({ length: size }, (_, j) => (i * 31 + j) & 0xff));
    }
    const order: number[] = [];
    const done = writes.map((bytes, i) =>
      new Promise<void>((resolve, reject) =>
        conn.writeThen(bytes, (err) => {
          order.push(i);
          err ? reject(err) : resolve();
        })
      )
    );
    // A write path that loses a write's callback would otherwise hang the suite.
    let deadline: ReturnType<typeof setTimeout> | undefined;
    await Promise.race([
      Promise.all(done),
      new Promise((_, reject) => {
        deadline = setTimeout(
          () => reject(new Error(`${order.length} of ${writes.length} writes called back in 20 s`)),
          20_000,
        );
      }),
    ]).finally(() => clearTimeout(deadline));
    assert.deepEqual(order, writes.map((_, i) => i), "callbacks in the order of the writes");
    conn.close();
    const got = await received;
    client.close();
    const expected = new Uint8Array(writes.reduce((s, w) => s + w.length, 0));
    let at = 0;
    for (const w of writes) {
      expected.set(w, at);
      at += w.length;
    }
    assert.equal(got.length, expected.length);
    assert.ok(got.every((b, i) => b === expected[i]), "the same bytes in the same order");
  });

  Deno.test(`RTMP conn (${transport}): a write to a closed peer fails, and so do writes after close`, async () => {
    const { server, client } = await tcpPair();
    const conn = await connOf(server, transport);
    client.close();
    // The first writes may still be taken by the socket; one soon fails on the reset.
    const failed = await new Promise<unknown>((resolve) => {
      const again = () =>
        conn.writeThen(new Uint8Array(64 * 1024), (err) => err ? resolve(err) : again());
      again();
    });
    assert.ok(failed instanceof RtmpClosedError, `${failed}`);
    assert.equal(conn.closed, true);
    assert.equal(conn.sendsOnDescriptor, false, "the descriptor is let go with the connection");
    const after = await new Promise((resolve) => conn.writeThen(new Uint8Array(1), resolve));
    assert.ok(after instanceof RtmpClosedError);
  });

  Deno.test(`RTMP fan-out (${transport}): a player that stops reading is dropped by its write timeout; the others get every frame on time`, async () => {
    const writeTimeoutMs = 400;
    const stream = new Stream({
      name: "s",
      mediaSessionId: "m",
      tracks: [h264Track({ width: 320, height: 240 }), aacTrack(1)],
      mediaProvider: "test",
      stopProvider: () => Promise.resolve(),
    });
    const fanout = RtmpFanout.of(stream);
    const pairs = await Promise.all(Array.from({ length: 4 }, () => tcpPair()));
    const conns = await Promise.all(
      pairs.map((p) => connOf(p.server, transport, writeTimeoutMs)),
    );
    const [slowConn, ...fastConns] = conns;
    // Handled at once: the slow player fails while the frames are still pushed.
    const slowEnd = fanout.add(slowConn).done.then(() => "ended without an error", (err) => err);
    const fastDone = fastConns.map((c) => fanout.add(c).done);
    // Fast players read everything and note when each picture came; the slow one reads none.
    const arrivals = pairs.slice(1).map(() => new Map<number, number>());
    const reading = pairs.slice(1).map(async ({ client }, i) => {
      const reader = playerChunkReader();
      const buf = new Uint8Array(256 * 1024);
      for (;;) {
        const n = await client.read(buf).catch(() => null);
        if (n === null) return;
        for (const m of reader.push(buf.subarray(0, n))) {
          if (m.type === MessageType.video) arrivals[i].set(m.timestamp, performance.now());
        }
      }
    });
    // 300 pictures of 48 KiB at 200 a second (about 14 MiB, far more than the slow player's
    // socket takes), with audio; a keyframe every 25.
    const frames = 300;
    const pushedAt = new Map<number, number>();
    const payload = new Uint8Array(48 * 1024).fill(0x55);
    try {
      for (let i = 0; i < frames; i++) {
        const ms = i * 40;
        stream.push(aacFrame(ms));
        const data = payload.slice();
        data.set([0, 0, 0, 1, i % 25 === 0 ? 0x65 : 0x41]);
        const frame: MediaFrame = {
          trackId: 0,
          codec: "H264",
          pts: ms * 90,
          dts: ms * 90,
          keyframe: i % 25 === 0,
          data,
        };
        stream.push(frame);
        pushedAt.set(ms, performance.now());
        await new Promise((r) => setTimeout(r, 5));
      }
      const slowErr = await slowEnd;
      assert.ok(slowErr instanceof RtmpClosedError, `the slow player was dropped: ${slowErr}`);
      assert.equal(slowConn.closed, true);
      await waitFor(
        "every fast player to get the last picture",
        () => arrivals.every((a) => a.has((frames - 1) * 40)) || undefined,
        5000,
      );
      for (const [i, got] of arrivals.entries()) {
        assert.equal(got.size, frames, `fast player ${i} got every picture`);
        let worstMs = 0;
        for (const [ms, at] of got) worstMs = Math.max(worstMs, at - pushedAt.get(ms)!);
        // A player held by the slow one would wait up to its write timeout.
        assert.ok(worstMs < writeTimeoutMs, `fast player ${i}: a picture took ${worstMs} ms`);
      }
      for (const c of fastConns) assert.equal(c.closed, false);
    } finally {
      stream.end();
      await Promise.allSettled(fastDone);
      for (const c of conns) c.close();
      for (const p of pairs) p.client.close();
      await Promise.all(reading);
    }
  });

  Deno.test(`server with rtmp.transport ${transport}: ffmpeg publishes, a player gets the pictures`, async () => {
    const clip = await Deno.makeTempFile({ suffix: ".mp4" });
    const lines: string[] = [];
    const log = createLogger({ level: "info", write: (line) => lines.push(line) });
    const server = await startTestServer(testConfig({ rtmp: { transport } }), log);
    let publisher: Deno.ChildProcess | undefined;
    try {
      await makeClip(clip, { seconds: 4, audio: "aac" });
      const url = `rtmp://127.0.0.1:${server.rtmpPort}/live/t_${transport}`;
      publisher = new Deno.Command("ffmpeg", {
        args: ["-v", "error", "-nostdin", "-re", "-i", clip, "-c", "copy", "-f", "flv", url],
        stdin: "null",
        stdout: "null",
        stderr: "null",
      }).spawn();
      const session = await waitFor("the stream to play", async () => {
        try {
          return await openRtmpClient(parseRtmpUrl(url, "url"), "play");
        } catch {
          await new Promise((r) => setTimeout(r, 200));
          return undefined;
        }
      }, 10_000);
      let pictures = 0;
      try {
        for await (const m of session.messages) {
          if (m.type === MessageType.video && ++pictures >= 25) break;
        }
      } finally {
        session.conn.close();
      }
      assert.ok(pictures >= 25, `${pictures} pictures`);
      const listening = lines.map((l) => JSON.parse(l)).find((l) =>
        l.msg === "listening" && l.service === "rtmp"
      );
      assert.equal(listening?.transport, transport, "the server writes the way it was told");
    } finally {
      publisher?.kill("SIGKILL");
      await publisher?.status;
      await server.stop();
      await Deno.remove(clip);
    }
  });
}

Deno.test("rtmp.transport: auto, ffi or deno; anything else is refused naming the field", () => {
  assert.equal(configSchema.parse({}).rtmp.transport, "auto");
  const bad = configSchema.safeParse({ rtmp: { transport: "uring" } });
  assert.equal(bad.success, false);
  assert.deepEqual(bad.error!.issues[0].path, ["rtmp", "transport"]);
});
