/**
 * Stalled TLS handshakes on the WSS listener: a client that opens TCP and sends nothing, or
 * only part of a ClientHello, is cut within `tlsHandshakeTimeoutMs` and its descriptor comes
 * free (Deno holds the socket of a pending handshake even after the connection is closed).
 */
import assert from "node:assert/strict";
import { openFiles } from "../core/fd_limit.ts";
import { tlsHandshakeTimeoutMs } from "../core/tls_handshake.ts";
import { makeCertificates } from "./helpers/certificates.ts";
import { startTestServer, testConfig } from "./helpers/test_server.ts";
import { sdkConnectionObject, WcsClient } from "./helpers/wcs_client.ts";

/** Slack on top of the deadline for a loaded machine, in ms. */
const slackMs = 2_000;

/** The first bytes of a TLS 1.2 record carrying a ClientHello announced as 512 bytes long. */
const partialClientHello = new Uint8Array([0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc]);

/** Resolves with the time until the server closes `conn` (read ends), or undefined at `waitMs`. */
async function closedWithin(conn: Deno.Conn, waitMs: number): Promise<number | undefined> {
  const started = performance.now();
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timedOut = new Promise<"timeout">((r) => timer = setTimeout(() => r("timeout"), waitMs));
  const ended = (async () => {
    const buffer = new Uint8Array(1024);
    try {
      while (await conn.read(buffer) !== null) { /* an alert, then the end */ }
    } catch {
      // A reset ends it too.
    }
  })();
  const outcome = await Promise.race([ended, timedOut]);
  clearTimeout(timer);
  return outcome === "timeout" ? undefined : performance.now() - started;
}

function openCount(): number {
  const files = openFiles();
  assert.ok(files, "descriptors countable (FFI)");
  return files.open;
}

/** The count of open descriptors once it reaches `expected`, or after `waitMs` if never. */
async function settledCount(expected: number, waitMs = 1000): Promise<number> {
  const until = performance.now() + waitMs;
  while (openCount() !== expected && performance.now() < until) {
    await new Promise((r) => setTimeout(r, 20));
  }
  return openCount();
}

Deno.test("WSS: clients stalled in the TLS handshake are cut within the deadline and their descriptors freed", async () => {
  const dir = await Deno.makeTempDir({ prefix: "tls-stall-test-" });
  const files = await makeCertificates(dir);
  const server = await startTestServer(
    testConfig({ tls: { certFile: files.cert, keyFile: files.key } }),
  );
  const httpClient = Deno.createHttpClient({ caCerts: [await Deno.readTextFile(files.ca)] });
  const stalled: Deno.Conn[] = [];
  try {
    const port = server.wssPort!;
    const before = openCount();
    const silent = await Deno.connect({ hostname: "127.0.0.1", port });
    const partial = await Deno.connect({ hostname: "127.0.0.1", port });
    stalled.push(silent, partial);
    await partial.write(partialClientHello);
    const [silentMs, partialMs] = await Promise.all(
      stalled.map((conn) => closedWithin(conn, tlsHandshakeTimeoutMs + slackMs)),
    );
    assert.ok(silentMs !== undefined, "a silent client is cut");
    assert.ok(partialMs !== undefined, "a client stuck in its ClientHello is cut");
    assert.ok(silentMs >= tlsHandshakeTimeoutMs - 500, `cut after ${silentMs} ms, not at once`);
    // Only the two client ends are left open: the server's two came free.
    assert.equal(await settledCount(before + 2), before + 2);
    for (const conn of stalled.splice(0)) conn.close();
    assert.equal(await settledCount(before), before);

    // The listener still serves a client that completes its handshake.
    const secure = await WcsClient.connect(
      `wss://127.0.0.1:${port}`,
      sdkConnectionObject(),
      { client: httpClient },
    );
    assert.equal(secure.userData.status, "ESTABLISHED");
    await secure.client.close();
  } finally {
    for (const conn of stalled) conn.close();
    await server.stop();
    httpClient.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("WSS: a server stop frees the descriptor of a client stalled in the TLS handshake", async () => {
  const dir = await Deno.makeTempDir({ prefix: "tls-stall-test-" });
  const files = await makeCertificates(dir);
  const server = await startTestServer(
    testConfig({ tls: { certFile: files.cert, keyFile: files.key } }),
  );
  const before = openCount();
  const silent = await Deno.connect({ hostname: "127.0.0.1", port: server.wssPort! });
  try {
    // Accepted and waiting for its ClientHello.
    await new Promise((r) => setTimeout(r, 200));
    await server.stop();
    assert.ok(await closedWithin(silent, slackMs) !== undefined, "cut at the stop");
  } finally {
    silent.close();
    await Deno.remove(dir, { recursive: true });
  }
  // The listeners' descriptors are gone too; nothing of the stalled client stays.
  assert.ok(openCount() < before, `${openCount()} open, ${before} before the client`);
});
