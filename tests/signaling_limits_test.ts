/**
 * Web SDK signaling against hostile clients on bare TCP: message limits enforced while
 * reading, protocol errors, broken upgrades, the handshake deadline, connection caps (refused
 * with 503 and counted, slots returned; the sessions cap is in session_cap_test.ts), and a
 * server at its open-file limit.
 */
import assert from "node:assert/strict";
import type { Config } from "../config.ts";
import { startTestServer, testConfig, type TestServer } from "./helpers/test_server.ts";
import { clientFrame, RawWsClient, upgradeRequest } from "./helpers/raw_ws_client.ts";
import { sdkConnectionObject } from "./helpers/wcs_client.ts";
import { freePort, waitForHttp } from "./helpers/process.ts";

const text = 1;
const continuation = 0;

/** Runs `fn` with a server, closing every raw client it opened. */
async function withServer(
  fn: (server: TestServer, open: () => Promise<RawWsClient>) => Promise<void>,
  config: Config = testConfig(),
): Promise<void> {
  const server = await startTestServer(config);
  const clients: RawWsClient[] = [];
  try {
    await fn(server, async () => {
      const client = await RawWsClient.open(server.wsPort);
      clients.push(client);
      return client;
    });
  } finally {
    clients.forEach((c) => c.close());
    await server.stop();
  }
}

/** A raw client with an established session. */
async function established(open: () => Promise<RawWsClient>): Promise<RawWsClient> {
  const client = await open();
  await client.sendMessage("connection", sdkConnectionObject());
  await client.next("getUserData");
  return client;
}

/** Waits until `check` holds, polling. */
async function until(check: () => boolean, what: string, timeoutMs = 5000): Promise<void> {
  const started = performance.now();
  while (!check()) {
    if (performance.now() - started > timeoutMs) assert.fail(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** Sends a raw HTTP request and returns the whole response. */
async function rawResponse(port: number, request: string): Promise<string> {
  const client = await RawWsClient.connect(port);
  try {
    await client.write(request);
    return await client.readHead();
  } finally {
    client.close();
  }
}

Deno.test("a frame announcing 100 MiB closes with 1009 before its payload is buffered; RSS stays", async () => {
  await withServer(async (server, open) => {
    const header = clientFrame(text, new Uint8Array(0), { announcedLength: 100 * 2 ** 20 });
    const chunk = new Uint8Array(64 * 1024);
    const rssBefore = Deno.memoryUsage().rss;
    const clients = await Promise.all(Array.from({ length: 12 }, () => established(open)));
    const closes = await Promise.all(clients.map(async (client) => {
      await client.write(header);
      // Some payload follows: read and dropped while our close frame is on its way.
      await client.write(chunk).catch(() => {});
      return await client.readClose();
    }));
    for (const close of closes) {
      assert.equal(close?.code, 1009);
      assert.match(close!.reason, /message exceeds 262144 bytes/);
    }
    const grownMiB = (Deno.memoryUsage().rss - rssBefore) / 2 ** 20;
    assert.ok(grownMiB < 40, `RSS grew ${grownMiB.toFixed(1)} MiB`);
    await Promise.all(clients.map((c) => c.readToEnd()));
    await until(() => server.signaling.sessionCount === 0, "sessions ended");
  });
});

Deno.test("before the connection message the lower handshake limit applies", async () => {
  await withServer(async (_server, open) => {
    const client = await open();
    const limit = testConfig().ws.maxHandshakeMessageBytes;
    await client.write(clientFrame(text, "x".repeat(limit + 1)));
    assert.equal((await client.readClose())?.code, 1009);
  });
});

Deno.test("a fragmented message over the limit closes with 1009 as its fragments arrive", async () => {
  await withServer(async (server, open) => {
    const client = await established(open);
    const limit = server.services.config.ws.maxMessageBytes;
    const fragment = "f".repeat(limit / 4);
    for (let i = 0; i < 4; i++) {
      await client.write(clientFrame(i === 0 ? text : continuation, fragment, { fin: false }));
    }
    await client.write(clientFrame(continuation, "f", { fin: false }));
    assert.equal((await client.readClose())?.code, 1009);
  });
});

Deno.test("protocol errors: unmasked frame 1002, bad opcode 1002, invalid UTF-8 1007", async () => {
  await withServer(async (server, open) => {
    const cases: [Uint8Array, number][] = [
      [clientFrame(text, '{"message":"ping"}', { masked: false }), 1002],
      [clientFrame(5, "x"), 1002],
      [clientFrame(text, "x", { rsv: 1 }), 1002],
      [clientFrame(9, "p".repeat(126)), 1002],
      [clientFrame(text, new Uint8Array([0xff, 0xfe])), 1007],
    ];
    for (const [frame, code] of cases) {
      const client = await established(open);
      await client.write(frame);
      assert.equal((await client.readClose())?.code, code);
      assert.ok(await client.readToEnd(), "the server closes TCP");
    }
    await until(() => server.signaling.sessionCount === 0, "sessions ended");
    assert.deepEqual(await (await server.post("/connection/find_all")).json(), []);
  });
});

Deno.test("pings get pongs with the same payload; a client close is echoed and ends the session", async () => {
  await withServer(async (server, open) => {
    const client = await established(open);
    await client.write(clientFrame(9, "are you there"));
    let frame;
    do frame = await client.readFrame(); while (frame && frame.opcode !== 10);
    assert.equal(new TextDecoder().decode(frame!.payload), "are you there");
    const close = new Uint8Array([0x03, 0xe8, ...new TextEncoder().encode("bye")]);
    await client.write(clientFrame(8, close));
    assert.deepEqual(await client.readClose(), { code: 1000, reason: "" });
    assert.ok(await client.readToEnd(), "the server closes TCP after its echo");
    await until(() => server.signaling.sessionCount === 0, "session ended");
  });
});

Deno.test("upgrade refusals: no key 400, version 12 400 naming 13, plain GET 426", async () => {
  await withServer(async (server) => {
    const noKey = await rawResponse(server.wsPort, upgradeRequest({ "Sec-WebSocket-Key": "" }));
    assert.match(noKey, /^HTTP\/1\.1 400 /);
    assert.match(noKey, /missing Sec-WebSocket-Key\n$/);
    const v12 = await rawResponse(server.wsPort, upgradeRequest({ "Sec-WebSocket-Version": "12" }));
    assert.match(v12, /^HTTP\/1\.1 400 /);
    assert.match(v12, /\r\nSec-WebSocket-Version: 13\r\n/);
    const plain = await fetch(`http://127.0.0.1:${server.wsPort}/`);
    assert.equal(plain.status, 426);
    assert.equal(plain.headers.get("upgrade"), "websocket");
    await plain.body?.cancel();
    const big = await rawResponse(
      server.wsPort,
      upgradeRequest({ "Cookie": "c".repeat(20_000) }),
    );
    assert.match(big, /^HTTP\/1\.1 431 /);
    const upgrade = await rawResponse(
      server.wsPort,
      upgradeRequest({
        "Sec-WebSocket-Extensions": "permessage-deflate; client_max_window_bits",
      }),
    );
    assert.match(upgrade, /^HTTP\/1\.1 101 /);
    assert.doesNotMatch(upgrade, /extensions/i, "no extension is accepted");
    await until(() => server.signaling.limitsSnapshot().ws.connections.current === 0, "slots");
  });
});

Deno.test("handshake deadline: no connection message in time closes; no request head cuts TCP", async () => {
  const config = testConfig({ ws: { handshakeTimeoutMs: 300 } });
  await withServer(async (server, open) => {
    const silent = await open();
    const idle = await RawWsClient.connect(server.wsPort);
    const started = performance.now();
    const close = await silent.readClose();
    assert.equal(close?.code, 1008);
    assert.match(close!.reason, /no connection message accepted within 300 ms/);
    assert.ok(await idle.readToEnd(), "a connection without a request head is closed");
    idle.close();
    const elapsed = performance.now() - started;
    assert.ok(elapsed < 2000, `closed after ${elapsed.toFixed(0)} ms`);
    // An established session outlives the deadline.
    const ok = await established(open);
    await new Promise((r) => setTimeout(r, 500));
    await ok.sendMessage("ping", null);
    assert.deepEqual(await ok.next("pong"), []);
  }, config);
});

Deno.test("a connection cap of N: the N+1th gets 503, counted; slots return to 0", async () => {
  const config = testConfig({ limits: { connectionsPerListener: 3 } });
  await withServer(async (server, open) => {
    const held = await Promise.all([open(), open(), open()]);
    const refused = await rawResponse(server.wsPort, upgradeRequest());
    assert.match(refused, /^HTTP\/1\.1 503 /);
    assert.match(refused, /ws connections limit of 3 reached/);
    const snapshot = server.signaling.limitsSnapshot();
    assert.deepEqual(snapshot.ws.connections, { current: 3, max: 3, refused: 1 });
    assert.deepEqual(snapshot.ws.connectionsPerAddress, { keys: 1, maxPerKey: 1000, refused: 0 });
    held.forEach((c) => c.close());
    await until(
      () => server.signaling.limitsSnapshot().ws.connections.current === 0,
      "slots released",
    );
    assert.equal(server.signaling.limitsSnapshot().ws.connectionsPerAddress.keys, 0);
    await established(open);
  }, config);
});

Deno.test("the per-address cap refuses with 503 and counts", async () => {
  const perAddress = testConfig({ limits: { connectionsPerAddress: 2 } });
  await withServer(async (server, open) => {
    await open();
    await open();
    const refused = await rawResponse(server.wsPort, upgradeRequest());
    assert.match(refused, /ws connections per address limit of 2 reached/);
    assert.equal(server.signaling.limitsSnapshot().ws.connectionsPerAddress.refused, 1);
  }, perAddress);
});

Deno.test("a client that reads nothing is cut off; others are served meanwhile", async () => {
  await withServer(async (server, open) => {
    const mute = await established(open);
    const other = await established(open);
    const [record] = (await (await server.post("/connection/find_all")).json()) as {
      sessionId: string;
    }[];
    const payload = "d".repeat(900 * 1024);
    // ~18 MiB for a client that never reads: our queue passes its bound and the session ends.
    for (let i = 0; i < 20 && server.signaling.sessionCount === 2; i++) {
      const res = await server.post("/data/send", {
        nodeId: server.services.nodeId,
        sessionId: record.sessionId,
        operationId: String(i),
        payload,
      });
      await res.body?.cancel();
      await other.sendMessage("ping", null);
      await other.next("pong");
    }
    await until(() => server.signaling.sessionCount === 1, "the mute session ended", 10_000);
    mute.close();
  });
});

Deno.test("at the open-file limit the server keeps running and serves again afterwards", async () => {
  const ports = Object.fromEntries(
    ["REST", "WS", "WSS", "HLS", "RTMP"].map((p) => [`MEDIASERVER_PORTS_${p}`, String(freePort())]),
  );
  const dir = await Deno.makeTempDir({ prefix: "signaling-emfile-" });
  // `ulimit -n` in a shell, then exec: the server runs with 128 open files at most.
  const child = new Deno.Command("bash", {
    args: ["-c", `ulimit -n 128 && exec "${Deno.execPath()}" run -A main.ts`],
    cwd: new URL("..", import.meta.url).pathname,
    env: {
      ...ports,
      MEDIASERVER_FOLDERS_LOGS: dir,
      MEDIASERVER_FOLDERS_RECORDS: dir,
      // No descriptor reserve: the accept loop itself meets the limit (EMFILE) and retries.
      MEDIASERVER_LIMITS_FD_RESERVE: "0",
      NO_COLOR: "1",
    },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  // Log lines go to stdout, an uncaught error to stderr: read both.
  const output = Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text()])
    .then((texts) => texts.join("\n"));
  const wsPort = Number(ports.MEDIASERVER_PORTS_WS);
  const conns: Deno.Conn[] = [];
  try {
    await waitForHttp(`http://127.0.0.1:${ports.MEDIASERVER_PORTS_REST}/health`, 15_000);
    // Twice the limit: the kernel completes the connections, the server cannot accept them all.
    for (let i = 0; i < 256; i++) {
      conns.push(await Deno.connect({ hostname: "127.0.0.1", port: wsPort }));
    }
    await new Promise((r) => setTimeout(r, 1000));
    conns.forEach((c) => c.close());
    conns.length = 0;
    const client = await (async () => {
      for (let attempt = 0;; attempt++) {
        try {
          return await RawWsClient.open(wsPort);
        } catch (err) {
          if (attempt > 50) throw err;
          await new Promise((r) => setTimeout(r, 200));
        }
      }
    })();
    await client.sendMessage("connection", sdkConnectionObject());
    assert.ok((await client.next("getUserData")).length === 1);
    client.close();
  } finally {
    conns.forEach((c) => c.close());
    child.kill("SIGTERM");
    const status = await child.status;
    const log = await output;
    await Deno.remove(dir, { recursive: true });
    // Alive until our SIGTERM, then a clean stop.
    assert.doesNotMatch(log, /Uncaught/);
    assert.match(log, /"msg":"shutting down","signal":"SIGTERM"/, log.slice(-2000));
    assert.equal(status.code, 0);
    assert.match(log, /accept failed; retrying/);
  }
});
