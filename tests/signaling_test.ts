/**
 * Web SDK signaling over a real WebSocket with the Deno protocol client: the connect flow
 * and its hooks, sendData/OnDataEvent, /connection, /logger, /data, bad and oversize frames,
 * keepalive, many sessions at once.
 */
import assert from "node:assert/strict";
import type { Config } from "../config.ts";
import { makeCertificates } from "./helpers/certificates.ts";
import { startHookBackend } from "./helpers/hook_backend.ts";
import { startTestServer, testConfig, type TestServer } from "./helpers/test_server.ts";
import { sdkConnectionObject, WcsClient } from "./helpers/wcs_client.ts";

const sessionIdShape = /^\/127\.0\.0\.1:\d+\/127\.0\.0\.1:\d+-[0-9a-f-]{36}$/;

/** Runs `fn` with a server (and closes every client it opened). */
async function withSignaling(
  fn: (server: TestServer, clients: WcsClient[]) => Promise<void>,
  config: Config = testConfig(),
): Promise<void> {
  const server = await startTestServer(config);
  const clients: WcsClient[] = [];
  try {
    await fn(server, clients);
  } finally {
    await Promise.all(clients.map((c) => c.close()));
    await server.stop();
  }
}

async function connect(
  server: TestServer,
  clients: WcsClient[],
  connection = sdkConnectionObject(),
  options = {},
) {
  const result = await WcsClient.connect(server.wsUrl, connection, options);
  clients.push(result.client);
  return result;
}

async function findAll(server: TestServer): Promise<Record<string, unknown>[]> {
  const res = await server.post("/connection/find_all");
  assert.equal(res.status, 200);
  return await res.json();
}

Deno.test("connect without a backend: getUserData makes the session ESTABLISHED and listed", async () => {
  await withSignaling(async (server, clients) => {
    const { client, userData } = await connect(
      server,
      clients,
      sdkConnectionObject({
        custom: { login: "alice" },
        clientInfo: { platform: "Linux", mobile: false },
      }),
      { headers: { Origin: "http://app.test:8888" } },
    );
    assert.equal(userData.status, "ESTABLISHED");
    assert.match(userData.sessionId as string, sessionIdShape);
    assert.match(userData.authToken as string, /^[A-Za-z0-9]{40}$/);
    assert.equal(userData.appKey, "defaultApp");
    assert.match(userData.nodeId as string, /^[A-Za-z0-9]{32}@127\.0\.0\.1$/);

    const [record] = await findAll(server);
    assert.equal(record.sessionId, userData.sessionId);
    assert.equal(record.authToken, userData.authToken);
    assert.equal(record.origin, "http://app.test:8888");
    assert.equal(record.appKey, "defaultApp");
    assert.deepEqual(record.mediaProviders, ["WebRTC", "MSE", "WSPlayer"]);
    assert.equal(record.clientVersion, "2.0");
    assert.equal(record.clientBrowserVersion, "wcs_client (Deno)");
    assert.equal(record.msePacketizationVersion, 2);
    assert.deepEqual(record.custom, {
      login: "alice",
      clientInfo: { platform: "Linux", mobile: false },
    });

    const other = await connect(server, clients, sdkConnectionObject({ appKey: "roomApp" }));
    assert.notEqual(other.userData.authToken, userData.authToken);
    const found = await server.post("/connection/find", { appKey: "roomApp" });
    assert.deepEqual((await found.json()).map((r: { sessionId: string }) => r.sessionId), [
      other.userData.sessionId,
    ]);
    assert.ok(!client.messages().includes("registered"), "registered is for SIP clients only");
  });
});

Deno.test("the connect hook gets the connection; its changes and clientExclude reach the client", async () => {
  const backend = await startHookBackend((call) =>
    call.hook === "connect"
      ? {
        status: 200,
        body: {
          ...call.body,
          custom: { role: "viewer" },
          restClientConfig: { connect: { clientExclude: "sipLogin" } },
        },
      }
      : { status: 200, body: call.body }
  );
  try {
    await withSignaling(async (server, clients) => {
      const { userData } = await connect(server, clients);
      const hook = backend.calls.find((c) => c.hook === "connect")!;
      assert.equal(hook.contentType, "application/json;charset=UTF-8");
      assert.equal(hook.body.sessionId, userData.sessionId);
      assert.equal(hook.body.appKey, "defaultApp");
      assert.equal(hook.body.authToken, userData.authToken);
      assert.match(hook.body.nodeId as string, /@127\.0\.0\.1$/);
      assert.equal(hook.body.clientVersion, "2.0");
      assert.deepEqual(userData.custom, { role: "viewer" });
      assert.equal(userData.sipLogin, undefined, "clientExclude removes sipLogin");
      assert.equal(userData.restClientConfig, undefined);
      const [record] = await findAll(server);
      assert.deepEqual(record.custom, { role: "viewer" });
      const established = await backend.waitFor("ConnectionStatusEvent");
      assert.equal(established.body.status, "ESTABLISHED");
      assert.equal(established.body.sessionId, userData.sessionId);
    }, testConfig({ hooks: { url: backend.url } }));
    const events = backend.calls.filter((c) => c.hook === "ConnectionStatusEvent");
    assert.deepEqual(events.map((e) => e.body.status), ["ESTABLISHED", "DISCONNECTED"]);
  } finally {
    await backend.close();
  }
});

Deno.test("a backend refusing /connect: fail, socket closed, no session", async () => {
  const backend = await startHookBackend(() => ({ status: 403 }));
  try {
    await withSignaling(async (server) => {
      const client = await WcsClient.open(server.wsUrl);
      client.send("connection", sdkConnectionObject());
      const [fail] = await client.next("fail") as [Record<string, unknown>];
      assert.equal(fail.apiMethod, "ConnectionStatusEvent");
      assert.equal(fail.status, "FAILED");
      assert.match(fail.info as string, /HTTP 403/);
      const closed = await client.closed;
      assert.equal(closed.code, 1008);
      assert.ok(!client.messages().includes("getUserData"));
      assert.deepEqual(await findAll(server), []);
    }, testConfig({ hooks: { url: backend.url } }));
  } finally {
    await backend.close();
  }
});

Deno.test("sendData: OnDataEvent hook body; ACCEPTED on 200; 403 is FAILED only under restOnError FAIL", async () => {
  let dataStatus = 200;
  let restClientConfig: unknown = undefined;
  const backend = await startHookBackend((call) => {
    if (call.hook === "connect") {
      return { status: 200, body: { ...call.body, restClientConfig } };
    }
    return call.hook === "OnDataEvent" ? { status: dataStatus } : { status: 200 };
  });
  try {
    await withSignaling(async (server, clients) => {
      const { client, userData } = await connect(server, clients);
      const payload = { text: "hello", n: [1, 2] };
      const operationId = crypto.randomUUID();
      client.send("sendData", { operationId, payload });
      const [status] = await client.next("DataStatusEvent");
      assert.deepEqual(status, { operationId, status: "ACCEPTED" });
      const hook = await backend.waitFor("OnDataEvent");
      assert.equal(hook.contentType, "application/json;charset=UTF-8");
      assert.deepEqual(hook.body, {
        nodeId: userData.nodeId,
        appKey: "defaultApp",
        sessionId: userData.sessionId,
        operationId,
        payload,
      });

      dataStatus = 403;
      assert.equal((await client.sendData({ a: 1 })).status, "ACCEPTED", "LOG is the default");

      restClientConfig = { OnDataEvent: { restOnError: "FAIL" } };
      const strict = await connect(server, clients);
      const refused = await strict.client.sendData({ a: 2 });
      assert.equal(refused.status, "FAILED");
      assert.match(refused.info as string, /HTTP 403/);
      dataStatus = 200;
      assert.equal((await strict.client.sendData({ a: 3 })).status, "ACCEPTED");
    }, testConfig({ hooks: { url: backend.url } }));
  } finally {
    await backend.close();
  }
});

Deno.test("sendData: a backend slower than hooks.timeoutMs is FAILED under FAIL; other sessions go on", async () => {
  const backend = await startHookBackend((call) =>
    call.hook === "connect"
      ? {
        status: 200,
        body: { ...call.body, restClientConfig: { OnDataEvent: { restOnError: "FAIL" } } },
      }
      : call.hook === "OnDataEvent" && (call.body.payload as { slow?: boolean }).slow
      ? { status: 200, delayMs: 2000 }
      : { status: 200 }
  );
  try {
    await withSignaling(async (server, clients) => {
      const slow = await connect(server, clients);
      const fast = await connect(server, clients);
      const started = performance.now();
      const pending = slow.client.sendData({ slow: true });
      assert.equal((await fast.client.sendData({ slow: false })).status, "ACCEPTED");
      assert.ok(performance.now() - started < 250, "a slow hook must not delay other sessions");
      const status = await pending;
      assert.equal(status.status, "FAILED");
      assert.match(status.info as string, /timeout after 300 ms/);
    }, testConfig({ hooks: { url: backend.url, timeoutMs: 300 } }));
  } finally {
    await backend.close();
  }
});

Deno.test("/data/send delivers OnDataEvent to the session; unknown sessionId is a 404", async () => {
  await withSignaling(async (server, clients) => {
    const { client, userData } = await connect(server, clients);
    const res = await server.post("/data/send", {
      nodeId: "n1",
      operationId: "op-1",
      sessionId: userData.sessionId,
      payload: { message: "from backend" },
    });
    assert.equal(res.status, 200);
    assert.equal(await res.text(), "");
    const [event] = await client.next("OnDataEvent") as [Record<string, unknown>];
    assert.deepEqual(event.payload, { message: "from backend" });
    assert.equal(event.sessionId, userData.sessionId);
    assert.equal(event.operationId, "op-1");

    const missing = await server.post("/data/send", { sessionId: "/nope", payload: {} });
    assert.equal(missing.status, 404);
    assert.match((await missing.json()).message, /session \/nope not found/);
  });
});

Deno.test("/connection/terminate closes the socket and ends the session's streams; unknown is a 404", async () => {
  await withSignaling(async (server, clients) => {
    const { client, userData } = await connect(server, clients);
    const keep = await connect(server, clients);
    const ended: string[] = [];
    for (const [id, sessionId] of [["m1", userData.sessionId], ["m2", keep.userData.sessionId]]) {
      server.services.streams.add({
        mediaSessionId: id as string,
        name: `s-${id}`,
        published: true,
        record: () => ({ sessionId }) as never,
        terminate: (info) => {
          ended.push(`${id}: ${info}`);
          return Promise.resolve();
        },
      });
    }
    const res = await server.post("/connection/terminate", { sessionId: userData.sessionId });
    assert.equal(res.status, 200);
    await res.body?.cancel();
    const closed = await client.closed;
    assert.equal(closed.code, 1000);
    assert.deepEqual(ended, ["m1: Stopped by session disconnect"]);
    assert.deepEqual((await findAll(server)).map((r) => r.sessionId), [keep.userData.sessionId]);
    const again = await server.post("/connection/terminate", { sessionId: userData.sessionId });
    assert.equal(again.status, 404);
    await again.body?.cancel();
  });
});

Deno.test("a client closing its socket ends its session", async () => {
  await withSignaling(async (server, clients) => {
    const { client } = await connect(server, clients);
    assert.equal((await findAll(server)).length, 1);
    await client.close();
    for (let i = 0; i < 50 && server.services.sessions.size > 0; i++) {
      await new Promise((r) => setTimeout(r, 10));
    }
    assert.deepEqual(await findAll(server), []);
  });
});

Deno.test("client log: enable at DEBUG writes frames and pushed lines; INFO leaves out DEBUG; disable closes", async () => {
  const config = testConfig();
  await withSignaling(async (server, clients) => {
    const { client, userData } = await connect(server, clients);
    const sessionId = userData.sessionId as string;
    const missing = await server.post("/logger/enable_client_log", {
      sessionId: "/nope",
      logLevel: "DEBUG",
    });
    assert.equal(missing.status, 404);
    await missing.body?.cancel();

    const on = await server.post("/logger/enable_client_log", { sessionId, logLevel: "DEBUG" });
    assert.equal(on.status, 200);
    await on.body?.cancel();
    await client.sendData({ marker: "debug-frame" });
    client.send("pushLogs", { logs: "12:00:00 DEBUG core - pushed-debug-line\n" });
    client.send("pushLogs", { logs: "12:00:01 ERROR core - pushed-error-line\n" });
    await client.sendData({ marker: "flush" });

    const relevel = await server.post("/logger/enable_client_log", { sessionId, logLevel: "INFO" });
    await relevel.body?.cancel();
    await client.sendData({ marker: "info-hidden" });
    client.send("pushLogs", { logs: "12:00:02 DEBUG core - pushed-hidden\n" });
    client.send("pushLogs", { logs: "12:00:03 WARN core - pushed-warn-line\n" });
    await client.sendData({ marker: "flush2" });

    const off = await server.post("/logger/disable_client_log", { sessionId });
    assert.equal(off.status, 200);
    await off.body?.cancel();
    const dir = config.folders.logs;
    const files = [...Deno.readDirSync(dir)].map((e) => e.name);
    assert.equal(files.length, 1);
    assert.match(files[0], /^client-127\.0\.0\.1_\d+_127\.0\.0\.1_\d+-[0-9a-f-]{36}\.log$/);
    const text = Deno.readTextFileSync(`${dir}/${files[0]}`);
    assert.match(text, /DEBUG server - <<< .*debug-frame/);
    assert.match(text, /DEBUG server - >>> .*DataStatusEvent/);
    assert.match(text, /pushed-debug-line/);
    assert.match(text, /pushed-error-line/);
    assert.match(text, /pushed-warn-line/);
    assert.doesNotMatch(text, /info-hidden/);
    assert.doesNotMatch(text, /pushed-hidden/);
    assert.match(text, /client log disabled/);
    await client.sendData({ marker: "after-disable" });
    assert.doesNotMatch(Deno.readTextFileSync(`${dir}/${files[0]}`), /after-disable/);
  }, config);
});

Deno.test("client log: the file is closed when the session ends", async () => {
  const config = testConfig();
  await withSignaling(async (server, clients) => {
    const { client, userData } = await connect(server, clients);
    const sessionId = userData.sessionId as string;
    const on = await server.post("/logger/enable_client_log", { sessionId, logLevel: "TRACE" });
    await on.body?.cancel();
    const res = await server.post("/connection/terminate", { sessionId });
    await res.body?.cancel();
    await client.closed;
    const [file] = [...Deno.readDirSync(config.folders.logs)];
    const text = Deno.readTextFileSync(`${config.folders.logs}/${file.name}`);
    assert.match(text, /session ended: Terminated by rest \/connection\/terminate/);
    assert.match(text, /client log disabled/);
  }, config);
});

Deno.test("bad frames are answered with fail and the session goes on; binary is ignored", async () => {
  await withSignaling(async (server, clients) => {
    const { client } = await connect(server, clients);
    client.sendRaw("{not json");
    const [notJson] = await client.next("fail") as [Record<string, unknown>];
    assert.equal(notJson.apiMethod, "signaling");
    assert.match(notJson.info as string, /malformed frame: not JSON/);
    client.sendRaw(JSON.stringify({ data: [] }));
    assert.match(
      ((await client.next("fail"))[0] as { info: string }).info,
      /`message` must be a non-empty string/,
    );
    client.sendRaw(JSON.stringify({ message: "sendData", data: "x" }));
    assert.match(((await client.next("fail"))[0] as { info: string }).info, /`data` must be/);
    client.send("noSuchMessage", {});
    const [unknown] = await client.next("fail") as [Record<string, unknown>];
    assert.deepEqual(unknown, {
      apiMethod: "noSuchMessage",
      info: "unknown message noSuchMessage",
    });
    client.send("sendData", { payload: 1 });
    const [badData] = await client.next("fail") as [Record<string, unknown>];
    assert.equal(badData.apiMethod, "sendData");
    assert.match(badData.info as string, /operationId/);
    client.sendRaw(new Uint8Array([1, 2, 3]));
    assert.equal((await client.sendData({ still: "alive" })).status, "ACCEPTED");
    assert.equal(client.messages().filter((m) => m === "fail").length, 5);
  });
});

Deno.test("messages before the handshake are refused; a second connection message too", async () => {
  await withSignaling(async (server, clients) => {
    const early = await WcsClient.open(server.wsUrl);
    clients.push(early);
    early.send("sendData", { operationId: "x", payload: 1 });
    assert.deepEqual((await early.next("fail"))[0], {
      apiMethod: "sendData",
      info: "the session is not established",
    });
    const { client } = await connect(server, clients);
    client.send("connection", sdkConnectionObject());
    assert.deepEqual((await client.next("fail"))[0], {
      apiMethod: "connection",
      info: "the session is already connected",
    });
  });
});

Deno.test("a message over ws.maxMessageBytes closes that session with 1009; others are untouched", async () => {
  await withSignaling(async (server, clients) => {
    const maxFrameBytes = server.services.config.ws.maxMessageBytes;
    const big = await connect(server, clients);
    const other = await connect(server, clients);
    big.client.send("sendData", {
      operationId: "big",
      payload: "x".repeat(maxFrameBytes + 1),
    });
    const closed = await big.client.closed;
    assert.equal(closed.code, 1009);
    assert.equal((await other.client.sendData({ ok: 1 })).status, "ACCEPTED");
    assert.deepEqual((await findAll(server)).map((r) => r.sessionId), [other.userData.sessionId]);
  });
});

Deno.test("keepalive: pings carry a data array; a client that stops answering is closed", async () => {
  await withSignaling(async (server, clients) => {
    const { client: mute } = await WcsClient.connect(
      server.wsUrl,
      sdkConnectionObject(),
      { autoPong: false },
    );
    clients.push(mute);
    const { client: alive } = await connect(server, clients);
    const [pingData] = [await mute.next("ping", 1000)];
    assert.deepEqual(pingData, []);
    const started = performance.now();
    const closed = await mute.closed;
    const elapsed = performance.now() - started;
    assert.equal(closed.code, 1001);
    assert.match(closed.reason, /no pong to 3 pings/);
    assert.ok(elapsed < 1500, `closed after ${elapsed} ms`);
    assert.ok(alive.open, "a client answering pings stays connected");
    assert.ok(alive.messages().filter((m) => m === "ping").length >= 3);
  }, testConfig({ keepAlive: { intervalMs: 100, probes: 3 } }));
});

Deno.test("1000 sessions connecting at once are all established and listed", async () => {
  await withSignaling(async (server, clients) => {
    const results = await Promise.all(
      Array.from({ length: 1000 }, () => WcsClient.connect(server.wsUrl)),
    );
    clients.push(...results.map((r) => r.client));
    const ids = new Set(results.map((r) => r.userData.sessionId));
    assert.equal(ids.size, 1000);
    const listed = await findAll(server);
    assert.equal(listed.length, 1000);
    assert.deepEqual(new Set(listed.map((r) => r.sessionId)), ids);
  });
});

Deno.test("WSS: with a certificate configured, sessions connect over TLS too", async () => {
  const dir = await Deno.makeTempDir({ prefix: "wss-test-" });
  const files = await makeCertificates(dir);
  const httpClient = Deno.createHttpClient({ caCerts: [await Deno.readTextFile(files.ca)] });
  try {
    await withSignaling(async (server, clients) => {
      assert.ok(server.wssPort, "the WSS listener is open");
      const { userData } = await connect(server, clients, sdkConnectionObject(), {});
      const secure = await WcsClient.connect(
        `wss://127.0.0.1:${server.wssPort}`,
        sdkConnectionObject(),
        { client: httpClient },
      );
      clients.push(secure.client);
      assert.equal(secure.userData.status, "ESTABLISHED");
      assert.match(secure.userData.sessionId as string, new RegExp(`:${server.wssPort}-`));
      assert.equal((await secure.client.sendData({ over: "tls" })).status, "ACCEPTED");
      assert.equal((await findAll(server)).length, 2);
      assert.notEqual(userData.sessionId, secure.userData.sessionId);
    }, testConfig({ tls: { certFile: files.cert, keyFile: files.key } }));
  } finally {
    httpClient.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("WSS stays closed without a certificate", async () => {
  await withSignaling((server) => {
    assert.equal(server.wssPort, undefined);
    return Promise.resolve();
  });
});

Deno.test("a client that never answers the close frame still has its session ended", async () => {
  const { closeHandshakeTimeoutMs } = await import("../signaling/session.ts");
  await withSignaling(async (server) => {
    // A bare upgrade that then reads nothing: no pong, no close answer.
    const conn = await Deno.connect({ hostname: "127.0.0.1", port: server.wsPort });
    try {
      await conn.write(new TextEncoder().encode(
        "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
          "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
      ));
      const buf = new Uint8Array(1024);
      const n = await conn.read(buf);
      assert.match(new TextDecoder().decode(buf.subarray(0, n ?? 0)), /^HTTP\/1\.1 101/);
      assert.equal(server.signaling.sessionCount, 1);
      const started = performance.now();
      while (server.signaling.sessionCount > 0) {
        assert.ok(
          performance.now() - started < closeHandshakeTimeoutMs + 1000,
          "session not ended",
        );
        await new Promise((r) => setTimeout(r, 20));
      }
    } finally {
      conn.close();
    }
  }, testConfig({ keepAlive: { intervalMs: 100, probes: 1 } }));
});
