import assert from "node:assert/strict";
import { createLogger } from "../../../core/log.ts";
import { bodyReleased } from "./hls_body_release.ts";
import { bodyFileCount, ffiTransportAvailable } from "./hls_ffi_transport.ts";
import { HlsListener, type HlsListenerOptions, maxHeadBytes } from "./hls_listener.ts";

const encoder = new TextEncoder();
/** Without FFI (`--deny-ffi`, not glibc) there is no ffi transport to test. */
const ignore = !ffiTransportAvailable("127.0.0.1").ok;

/** Bodies served at `/big` (over the socket buffers) and `/seg/<n>`. */
const big = new Uint8Array(32 * 1024 * 1024).map((_, i) => (i * 7 + (i >> 13)) & 0xff);
const segments = [0, 1, 2].map((n) => new Uint8Array(100_000).map((_, i) => (i + n * 31) & 0xff));

function start(options: Partial<HlsListenerOptions> = {}): Promise<HlsListener> {
  return HlsListener.start({
    transport: "ffi",
    hostname: "127.0.0.1",
    port: 0,
    log: createLogger({ level: "error" }),
    handler: (req) => {
      const body = req.path === "/big"
        ? big
        : req.path.startsWith("/seg/")
        ? segments[Number(req.path.slice(5))]
        : `playlist ${req.path}`;
      return Promise.resolve({ status: 200, headers: [["Content-Type", "video/mp2t"]], body });
    },
    ...options,
  });
}

/** Descriptors this process has open. */
function openFds(): number {
  return [...Deno.readDirSync("/proc/self/fd")].length;
}

/** Reads from `conn` until `total` bytes came or it ends; the bytes and whether it ended. */
async function readBytes(
  conn: Deno.Conn,
  total: number,
): Promise<{ bytes: Uint8Array; ended: boolean }> {
  const out = new Uint8Array(total);
  let have = 0;
  while (have < total) {
    let n: number | null;
    try {
      n = await conn.read(out.subarray(have));
    } catch {
      n = null; // reset
    }
    if (n === null) return { bytes: out.subarray(0, have), ended: true };
    have += n;
  }
  return { bytes: out, ended: false };
}

/** The header block length of the response at the start of `bytes`. */
function headLength(bytes: Uint8Array): number {
  const text = new TextDecoder("latin1").decode(bytes.subarray(0, 4096));
  return text.indexOf("\r\n\r\n") + 4;
}

/** One GET on `conn`: the body (Content-Length bytes). */
async function get(conn: Deno.Conn, path: string): Promise<Uint8Array> {
  await conn.write(encoder.encode(`GET ${path} HTTP/1.1\r\nHost: x\r\n\r\n`));
  let buffered = new Uint8Array(0);
  for (;;) {
    const chunk = new Uint8Array(65536);
    const n = await conn.read(chunk);
    if (n === null) throw new Error("closed before the head");
    const next = new Uint8Array(buffered.length + n);
    next.set(buffered);
    next.set(chunk.subarray(0, n), buffered.length);
    buffered = next;
    const text = new TextDecoder("latin1").decode(buffered);
    const end = text.indexOf("\r\n\r\n");
    if (end < 0) continue;
    const length = Number(/Content-Length: (\d+)/.exec(text)![1]);
    const body = new Uint8Array(length);
    const have = Math.min(length, buffered.length - end - 4);
    body.set(buffered.subarray(end + 4, end + 4 + have));
    const rest = await readBytes(conn, length - have);
    assert.ok(!rest.ended, "the body came whole");
    body.set(rest.bytes, have);
    return body;
  }
}

/** Where this process's descriptors lead (`/proc/self/fd` links). */
function fdLinks(): string[] {
  return [...Deno.readDirSync("/proc/self/fd")].map((e) => {
    try {
      return Deno.readLinkSync(`/proc/self/fd/${e.name}`);
    } catch {
      return "";
    }
  });
}

for (const store of ["memory", "tmpfile"] as const) {
  Deno.test({
    name: `HLS ffi transport: pipelined requests get their bodies in order, segments sent from ${
      store === "memory"
        ? "memfds (the default: no disk)"
        : "unnamed temp files (hls.segmentStore tmpfile)"
    }`,
    ignore,
  }, async () => {
    const listener = await start(store === "memory" ? {} : { segmentStore: store });
    assert.equal(listener.transport, "ffi");
    const filesBefore = bodyFileCount();
    const conn = await Deno.connect({ hostname: "127.0.0.1", port: listener.port });
    try {
      await conn.write(encoder.encode(
        "GET /seg/0 HTTP/1.1\r\n\r\nGET /p.m3u8 HTTP/1.1\r\n\r\nGET /seg/1 HTTP/1.1\r\n\r\n" +
          "GET /seg/0 HTTP/1.1\r\nConnection: close\r\n\r\n",
      ));
      const { bytes, ended } = await readBytes(conn, 1 << 20);
      assert.ok(ended, "closed after the last request (Connection: close)");
      let at = 0;
      const expected = [segments[0], encoder.encode("playlist /p.m3u8"), segments[1], segments[0]];
      for (const body of expected) {
        const head = headLength(bytes.subarray(at));
        assert.match(new TextDecoder().decode(bytes.subarray(at, at + 12)), /^HTTP\/1.1 200/);
        assert.deepEqual(bytes.subarray(at + head, at + head + body.length), body);
        at += head + body.length;
      }
      assert.equal(at, bytes.length, "nothing after the fourth answer");
      // Two segments, one file each (the second /seg/0 reused its file).
      assert.equal(bodyFileCount() - filesBefore, 2);
      // Memfds ("/memfd:hls-body"), or unnamed files of the temp folder's filesystem
      // (O_TMPFILE: "<dir>/#<inode> (deleted)").
      const tmp = Deno.env.get("TMPDIR") || "/tmp";
      const links = fdLinks();
      const memfds = links.filter((l) => l.startsWith("/memfd:hls-body"));
      const unnamed = links.filter((l) => l.startsWith(`${tmp}/#`) && l.endsWith("(deleted)"));
      const [kept, other] = store === "memory" ? [memfds, unnamed] : [unnamed, memfds];
      assert.ok(kept.length >= 2, `bodies not in the ${store} store: ${links.join(", ")}`);
      assert.equal(other.length, 0, `a body outside the ${store} store: ${links.join(", ")}`);
    } finally {
      conn.close();
      await listener.shutdown();
    }
    assert.equal(bodyFileCount(), 0, "the last listener's stop closes every body file");
  });
}

Deno.test({
  name:
    "HLS ffi transport: an answer larger than the socket buffers is resumed as the client reads, and the connection goes on",
  ignore,
}, async () => {
  const listener = await start();
  const conn = await Deno.connect({ hostname: "127.0.0.1", port: listener.port });
  try {
    await conn.write(encoder.encode("GET /big HTTP/1.1\r\n\r\n"));
    // The server's sends stop on a full socket meanwhile (EAGAIN) and resume on EPOLLOUT.
    await new Promise((r) => setTimeout(r, 300));
    const head = await readBytes(conn, 64);
    const headText = new TextDecoder("latin1").decode(head.bytes);
    assert.match(headText, /^HTTP\/1.1 200 OK\r\n/);
    const all = new Uint8Array(64 + big.length + 200);
    all.set(head.bytes);
    let have = 64;
    let headBytes = -1;
    while (headBytes < 0 || have < headBytes + big.length) {
      const n = await conn.read(all.subarray(have));
      assert.ok(n !== null, "the whole body comes");
      have += n;
      if (headBytes < 0) {
        const end = new TextDecoder("latin1").decode(all.subarray(0, Math.min(have, 4096)))
          .indexOf("\r\n\r\n");
        if (end >= 0) headBytes = end + 4;
      }
    }
    assert.equal(have, headBytes + big.length);
    assert.deepEqual(all.subarray(headBytes, have), big);
    assert.deepEqual(await get(conn, "/seg/2"), segments[2]);
  } finally {
    conn.close();
    await listener.shutdown();
  }
});

for (const transport of ["ffi", "deno"] as const) {
  Deno.test({
    name:
      `HLS ${transport} transport: a client that stops reading is dropped after the idle timeout; another is served meanwhile`,
    ignore: transport === "ffi" && ignore,
  }, () => stalledClientDropped(transport));
}

async function stalledClientDropped(transport: "ffi" | "deno"): Promise<void> {
  const listener = await start({ transport, idleTimeoutMs: 600 });
  const stalled = await Deno.connect({ hostname: "127.0.0.1", port: listener.port });
  const other = await Deno.connect({ hostname: "127.0.0.1", port: listener.port });
  try {
    await stalled.write(encoder.encode("GET /big HTTP/1.1\r\n\r\n"));
    const started = performance.now();
    for (let i = 0; i < 6; i++) {
      const t = performance.now();
      assert.deepEqual(await get(other, `/seg/${i % 3}`), segments[i % 3]);
      assert.ok(performance.now() - t < 500, "the other client is answered at once");
      await new Promise((r) => setTimeout(r, 250));
    }
    assert.ok(performance.now() - started >= 1500);
    // By now the stalled one is closed: reading it gives part of the body, then its end.
    const { bytes, ended } = await readBytes(stalled, big.length + 1024);
    assert.ok(ended, "the server closed the stalled connection");
    assert.ok(bytes.length < big.length, `${bytes.length} bytes, not the whole body`);
    // The other goes on after that.
    assert.deepEqual(await get(other, "/seg/0"), segments[0]);
  } finally {
    stalled.close();
    other.close();
    await listener.shutdown();
  }
}

Deno.test({
  name:
    "HLS ffi transport: every descriptor is closed after connections end and the listener stops",
  ignore,
}, async () => {
  const before = openFds();
  const listener = await start();
  const conns: Deno.Conn[] = [];
  for (let i = 0; i < 5; i++) {
    const conn = await Deno.connect({ hostname: "127.0.0.1", port: listener.port });
    conns.push(conn);
    assert.deepEqual(await get(conn, `/seg/${i % 3}`), segments[i % 3]);
  }
  // One in the middle of a large answer, one mid-head.
  await conns[0].write(encoder.encode("GET /big HTTP/1.1\r\n\r\n"));
  await conns[1].write(encoder.encode("GET /seg/0 HTTP/1.1\r\nHost"));
  await new Promise((r) => setTimeout(r, 100));
  assert.ok(openFds() > before + 5, "listener, epoll, eventfd, connections and memfds are open");
  // Two clients leave on their own, the rest stay until the stop.
  conns[3].close();
  conns[4].close();
  await new Promise((r) => setTimeout(r, 100));
  await listener.shutdown();
  for (const conn of conns.slice(0, 3)) conn.close();
  assert.equal(openFds(), before);
});

Deno.test({
  name: "HLS ffi transport: a released segment's memfd closes, at once or when its last send ends",
  ignore,
}, async () => {
  const own = new Uint8Array(200_000).map((_, i) => i & 0x7f);
  const ownBig = big.slice(); // its own identity, so another test's memfd of `big` is not it
  const listener = await start({
    idleTimeoutMs: 600,
    handler: (req) =>
      Promise.resolve({
        status: 200,
        headers: [],
        body: req.path === "/own" ? own : ownBig,
      }),
  });
  const conn = await Deno.connect({ hostname: "127.0.0.1", port: listener.port });
  const stalled = await Deno.connect({ hostname: "127.0.0.1", port: listener.port });
  try {
    const files = bodyFileCount();
    assert.deepEqual(await get(conn, "/own"), own);
    assert.equal(bodyFileCount(), files + 1);
    const fds = openFds();
    bodyReleased(own);
    assert.equal(bodyFileCount(), files);
    assert.equal(openFds(), fds - 1, "closed at once: nothing sends it");
    conn.close();
    await new Promise((r) => setTimeout(r, 100));
    // A body being sent to a client that does not read stays open until that send ends.
    await stalled.write(encoder.encode("GET /ownbig HTTP/1.1\r\n\r\n"));
    await new Promise((r) => setTimeout(r, 100));
    const sending = openFds();
    bodyReleased(ownBig);
    assert.equal(openFds(), sending, "still being sent");
    // The idle timeout drops the stalled client, and the memfd with it.
    const deadline = Date.now() + 3000;
    while (openFds() > sending - 2 && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 100));
    }
    assert.equal(openFds(), sending - 2, "the connection and the memfd are closed");
  } finally {
    try {
      conn.close();
    } catch {
      // Closed in the test.
    }
    stalled.close();
    await listener.shutdown();
  }
});

Deno.test({
  name: "HLS ffi transport: a request head over 16 KiB gets 431 and the connection closes",
  ignore,
}, async () => {
  const listener = await start();
  const conn = await Deno.connect({ hostname: "127.0.0.1", port: listener.port });
  try {
    await conn.write(
      encoder.encode(`GET / HTTP/1.1\r\nX: ${"a".repeat(maxHeadBytes + 1024)}\r\n\r\n`),
    );
    const { bytes, ended } = await readBytes(conn, 4096);
    assert.match(
      new TextDecoder().decode(bytes),
      /^HTTP\/1.1 431 Request Header Fields Too Large\r\n/,
    );
    assert.match(new TextDecoder().decode(bytes), /Connection: close\r\n/);
    assert.ok(ended);
  } finally {
    conn.close();
    await listener.shutdown();
  }
});
