import assert from "node:assert/strict";
import { createLogger } from "../../../core/log.ts";
import { ffiTransportAvailable } from "./hls_ffi_transport.ts";
import {
  type HlsHttpRequest,
  HlsListener,
  type HlsTransportName,
  maxHeadBytes,
} from "./hls_listener.ts";

/** Every test runs on both transports: they share the HTTP logic and must answer alike. */
const transports: HlsTransportName[] = ffiTransportAvailable("127.0.0.1").ok
  ? ["ffi", "deno"]
  : ["deno"];

const segment = new Uint8Array(100_000).map((_, i) => i & 0xff);

/** A listener answering `/seg` with `segment`, the rest with what the request was. */
async function withListener(
  transport: HlsTransportName,
  run: (port: number, seen: HlsHttpRequest[]) => Promise<void>,
) {
  const seen: HlsHttpRequest[] = [];
  const listener = await HlsListener.start({
    transport,
    hostname: "127.0.0.1",
    port: 0,
    log: createLogger({ level: "error" }),
    handler: (req) => {
      seen.push(req);
      if (req.path === "/seg") {
        return Promise.resolve({
          status: 200,
          headers: [["Content-Type", "video/mp2t"]],
          body: segment,
        });
      }
      return Promise.resolve({
        status: req.path === "/missing" ? 404 : 200,
        headers: [["Content-Type", "text/plain"]],
        body: `${req.method} ${req.path} ? ${req.query} ua=${req.header("user-agent")}`,
      });
    },
  });
  try {
    await run(listener.port, seen);
  } finally {
    await listener.shutdown();
  }
}

/** Sends `raw` and reads until the peer closes or `until` holds on what came. */
async function exchange(
  port: number,
  raw: string,
  until: (text: string) => boolean = () => false,
): Promise<{ text: string; bytes: Uint8Array; closed: boolean }> {
  const conn = await Deno.connect({ hostname: "127.0.0.1", port });
  try {
    await conn.write(new TextEncoder().encode(raw));
    const chunks: Uint8Array[] = [];
    let total = 0;
    const buf = new Uint8Array(65536);
    let closed = false;
    for (;;) {
      const n = await conn.read(buf);
      if (n === null) {
        closed = true;
        break;
      }
      chunks.push(buf.slice(0, n));
      total += n;
      const bytes = new Uint8Array(total);
      let at = 0;
      for (const c of chunks) (bytes.set(c, at), at += c.length);
      if (until(new TextDecoder("latin1").decode(bytes))) break;
    }
    const bytes = new Uint8Array(total);
    let at = 0;
    for (const c of chunks) (bytes.set(c, at), at += c.length);
    return { text: new TextDecoder("latin1").decode(bytes), bytes, closed };
  } finally {
    conn.close();
  }
}

const responses = (text: string) => text.split("HTTP/1.1 ").length - 1;

for (const transport of transports) {
  Deno.test(`HLS listener [${transport}]: fetch reads a body, headers, Date and the same segment bytes twice`, async () => {
    await withListener(transport, async (port) => {
      for (let i = 0; i < 2; i++) {
        const res = await fetch(`http://127.0.0.1:${port}/seg`);
        assert.equal(res.status, 200);
        assert.equal(res.headers.get("content-type"), "video/mp2t");
        assert.equal(res.headers.get("content-length"), String(segment.length));
        assert.ok(!Number.isNaN(Date.parse(res.headers.get("date") ?? "")));
        assert.deepEqual(new Uint8Array(await res.arrayBuffer()), segment);
      }
      const res = await fetch(`http://127.0.0.1:${port}/a/b.m3u8?_HLS_msn=3&x=%20`, {
        headers: { "User-Agent": "tester" },
      });
      assert.equal(await res.text(), "GET /a/b.m3u8 ? _HLS_msn=3&x=%20 ua=tester");
    });
  });

  Deno.test(`HLS listener [${transport}]: pipelined requests on one connection are answered in order; HEAD has no body`, async () => {
    await withListener(transport, async (port) => {
      const { text } = await exchange(
        port,
        "GET /one HTTP/1.1\r\nHost: x\r\n\r\nHEAD /seg HTTP/1.1\r\nHost: x\r\n\r\n" +
          "GET /missing HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
      );
      assert.equal(responses(text), 3);
      const [, one, head, missing] = text.split("HTTP/1.1 ");
      assert.match(one, /^200 OK\r\n/);
      assert.match(one, /GET \/one \? {2}ua=undefined$/);
      assert.match(head, /^200 OK\r\n/);
      assert.match(head, new RegExp(`Content-Length: ${segment.length}\r\n`));
      assert.ok(head.endsWith("\r\n\r\n"), "HEAD carries no body");
      assert.match(missing, /^404 Not Found\r\n/);
      assert.match(missing, /Connection: close\r\n/);
    });
  });

  Deno.test(`HLS listener [${transport}]: HTTP/1.0 closes unless keep-alive; a request body is skipped`, async () => {
    await withListener(transport, async (port, seen) => {
      const plain = await exchange(port, "GET /a HTTP/1.0\r\n\r\n");
      assert.ok(plain.closed);
      assert.match(plain.text, /Connection: close\r\n/);
      const kept = await exchange(
        port,
        "GET /b HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
        (t) => t.endsWith("ua=undefined"),
      );
      assert.match(kept.text, /Connection: keep-alive\r\n/);
      const body = await exchange(
        port,
        "GET /c HTTP/1.1\r\nContent-Length: 5\r\n\r\nhelloGET /d HTTP/1.1\r\nConnection: close\r\n\r\n",
      );
      assert.equal(responses(body.text), 2);
      assert.deepEqual(seen.map((r) => r.path), ["/a", "/b", "/c", "/d"]);
    });
  });

  Deno.test(`HLS listener [${transport}]: malformed requests get 400, 431, 501 and the connection closes`, async () => {
    await withListener(transport, async (port, seen) => {
      const line = await exchange(port, "GARBAGE\r\n\r\n");
      assert.match(line.text, /^HTTP\/1.1 400 /);
      assert.ok(line.closed);
      const header = await exchange(port, "GET / HTTP/1.1\r\nBad Name: x\r\n\r\n");
      assert.match(header.text, /^HTTP\/1.1 400 /);
      const big = await exchange(port, `GET / HTTP/1.1\r\nX: ${"a".repeat(maxHeadBytes)}\r\n\r\n`);
      assert.match(big.text, /^HTTP\/1.1 431 /);
      assert.ok(big.closed);
      const chunked = await exchange(port, "GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n");
      assert.match(chunked.text, /^HTTP\/1.1 501 /);
      assert.equal(seen.length, 0, "no malformed request reaches the handler");
    });
  });

  Deno.test(`HLS listener [${transport}]: shutdown closes idle keep-alive connections`, async () => {
    const listener = await HlsListener.start({
      transport,
      hostname: "127.0.0.1",
      port: 0,
      log: createLogger({ level: "error" }),
      handler: () => Promise.resolve({ status: 200, headers: [], body: "ok" }),
    });
    const conn = await Deno.connect({ hostname: "127.0.0.1", port: listener.port });
    await conn.write(new TextEncoder().encode("GET / HTTP/1.1\r\n\r\n"));
    const buf = new Uint8Array(1024);
    assert.ok((await conn.read(buf))! > 0);
    await listener.shutdown();
    // The server closed its end: the client's next read sees the end.
    let n: number | null = 0;
    while (n !== null) n = await conn.read(buf);
    conn.close();
  });

  Deno.test(`HLS listener [${transport}]: shutdown does not wait long for a client that reads nothing`, async () => {
    const big = new Uint8Array(32 * 1024 * 1024);
    const listener = await HlsListener.start({
      transport,
      hostname: "127.0.0.1",
      port: 0,
      log: createLogger({ level: "error" }),
      handler: () => Promise.resolve({ status: 200, headers: [], body: big }),
    });
    const conn = await Deno.connect({ hostname: "127.0.0.1", port: listener.port });
    await conn.write(new TextEncoder().encode("GET / HTTP/1.1\r\n\r\n"));
    // The answer fills the socket buffers and waits for a reader that never comes.
    await new Promise((r) => setTimeout(r, 200));
    const started = performance.now();
    await listener.shutdown();
    const ms = performance.now() - started;
    conn.close();
    assert.ok(ms < 4000, `shutdown took ${ms} ms`);
  });

  Deno.test(`HLS listener [${transport}]: one body answered with other headers, statuses and Connection gets each as asked (kept responses are per head)`, async () => {
    const playlistHeaders = [["Content-Type", "application/vnd.apple.mpegurl"]] as const;
    const corsHeaders = [...playlistHeaders, ["Access-Control-Allow-Origin", "*"]] as const;
    const text = "#EXTM3U\n";
    const listener = await HlsListener.start({
      transport,
      hostname: "127.0.0.1",
      port: 0,
      log: createLogger({ level: "error" }),
      handler: (req) =>
        Promise.resolve({
          status: req.query === "gone" ? 404 : 200,
          headers: req.query === "cors" ? corsHeaders : playlistHeaders,
          // The same text each time, and the same bytes for `/bytes`.
          body: req.path === "/bytes" ? segment : text,
        }),
    });
    try {
      const { text: answers } = await exchange(
        listener.port,
        ["plain", "cors", "plain", "gone", "plain"].map((q) => `GET /p?${q} HTTP/1.1\r\n\r\n`)
          .join("") +
          "GET /bytes?cors HTTP/1.1\r\n\r\nGET /bytes HTTP/1.0\r\nConnection: keep-alive\r\n\r\n" +
          "GET /p HTTP/1.0\r\n\r\n",
      );
      const [, plain, cors, plainAgain, gone, plainLast, bytesCors, bytes10, close] = answers.split(
        "HTTP/1.1 ",
      );
      for (const answer of [plain, plainAgain, plainLast]) {
        assert.match(answer, /^200 OK\r\n/);
        assert.doesNotMatch(answer, /Access-Control-Allow-Origin|Connection/);
        assert.ok(answer.endsWith(`\r\n\r\n${text}`));
      }
      assert.match(cors, /^200 OK\r\n(.*\r\n)*Access-Control-Allow-Origin: \*\r\n/);
      assert.match(gone, /^404 Not Found\r\n/);
      assert.match(bytesCors, /Access-Control-Allow-Origin: \*\r\n/);
      assert.doesNotMatch(bytesCors, /Connection/);
      assert.match(bytes10, /^200 OK\r\n(.*\r\n)*Connection: keep-alive\r\n/);
      assert.doesNotMatch(bytes10, /Access-Control-Allow-Origin/);
      assert.equal(bytes10.length - bytes10.indexOf("\r\n\r\n") - 4, segment.length);
      assert.match(close, /Connection: close\r\n/);
      assert.ok(close.endsWith(`\r\n\r\n${text}`));
    } finally {
      await listener.shutdown();
    }
  });
}
