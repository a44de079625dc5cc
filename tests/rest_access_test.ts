/**
 * Who may call the REST port: bearer tokens and Basic users (every path but /health and
 * preflights), CORS with a list of origins, the Host guard of an open API on loopback, and
 * a REST bind address apart from the other listeners.
 */
import assert from "node:assert/strict";
import { testConfig, withServer } from "./helpers/test_server.ts";

const token = "tok-0123456789abcdef";
const basic = (userPass: string) => `Basic ${btoa(userPass)}`;

/** Sends one raw HTTP/1.1 request (fetch will not send a foreign Host); status and body. */
async function rawRequest(
  hostname: string,
  port: number,
  head: string,
): Promise<{ status: number; text: string }> {
  const conn = await Deno.connect({ hostname, port });
  try {
    await conn.write(new TextEncoder().encode(head + "Connection: close\r\n\r\n"));
    const text = new TextDecoder().decode(await new Response(conn.readable).arrayBuffer());
    return { status: Number(text.split(" ")[1]), text };
  } catch (err) {
    conn.close();
    throw err;
  }
}

Deno.test("REST auth: 401 with both challenges and a JSON body; tokens and Basic users pass; /health and preflights stay open", async () => {
  const config = testConfig({
    rest: { authTokens: [token], basicUsers: ["admin:pa:ss"] },
  });
  await withServer(async (server) => {
    for (
      const [path, init] of [
        ["/rest-api/stream/find_all", { method: "POST" }],
        ["/rest-api/stream/find_all", { method: "GET" }],
        ["/rest-api/openapi.json", {}],
        ["/rest-api/no/such/path", { method: "POST" }],
        ["/client/records/a.mp4", {}],
        ["/rest-api/stream/find_all", { headers: { Authorization: `Bearer ${token}x` } }],
        ["/rest-api/stream/find_all", {
          headers: { Authorization: `Bearer ${token.slice(0, -1)}` },
        }],
        ["/rest-api/stream/find_all", { headers: { Authorization: basic("admin:pa:sX") } }],
        ["/rest-api/stream/find_all", { headers: { Authorization: `Basic ${token}` } }],
        ["/rest-api/stream/find_all", { headers: { Authorization: token } }],
      ] as const
    ) {
      const res = await fetch(server.restUrl + path, init);
      assert.equal(res.status, 401, `${path} ${JSON.stringify(init)}`);
      assert.equal(
        res.headers.get("WWW-Authenticate"),
        'Bearer realm="media-server", Basic realm="media-server", charset="UTF-8"',
      );
      assert.equal(res.headers.get("Content-Type"), "application/json");
      assert.equal((await res.json()).error, "unauthorized");
    }
    for (const authorization of [`Bearer ${token}`, `bearer  ${token}`, basic("admin:pa:ss")]) {
      const res = await server.post("/stream/find_all", undefined, {
        Authorization: authorization,
      });
      assert.equal(res.status, 200, authorization);
      assert.deepEqual(await res.json(), []);
    }
    const health = await fetch(`${server.restUrl}/health`);
    assert.equal(health.status, 200);
    assert.equal((await health.json()).status, "ok");
    const preflight = await fetch(`${server.restUrl}/rest-api/stream/find_all`, {
      method: "OPTIONS",
      headers: { "Origin": "http://a.test", "Access-Control-Request-Headers": "authorization" },
    });
    assert.equal(preflight.status, 204);
    assert.equal(preflight.headers.get("Access-Control-Allow-Headers"), "authorization");
    await preflight.body?.cancel();
  }, config);
});

Deno.test("REST auth with tokens only challenges Bearer only", async () => {
  await withServer(async (server) => {
    const res = await server.post("/stream/find_all");
    assert.equal(res.status, 401);
    assert.equal(res.headers.get("WWW-Authenticate"), 'Bearer realm="media-server"');
    await res.body?.cancel();
  }, testConfig({ rest: { authTokens: [token] } }));
});

Deno.test("CORS with a list of origins: listed ones echoed with credentials, others get nothing", async () => {
  const config = testConfig({
    rest: { corsOrigins: ["https://console.example"], authTokens: [token] },
  });
  await withServer(async (server) => {
    const listed = { Origin: "https://console.example", Authorization: `Bearer ${token}` };
    const ok = await server.post("/stream/find_all", undefined, listed);
    assert.equal(ok.status, 200);
    assert.equal(ok.headers.get("Access-Control-Allow-Origin"), "https://console.example");
    assert.equal(ok.headers.get("Access-Control-Allow-Credentials"), "true");
    assert.match(ok.headers.get("Vary") ?? "", /Origin/);
    await ok.body?.cancel();

    const refused = await server.post("/stream/find_all", undefined, {
      Origin: "https://console.example",
    });
    assert.equal(refused.status, 401);
    assert.equal(refused.headers.get("Access-Control-Allow-Origin"), "https://console.example");
    await refused.body?.cancel();

    const other = await server.post("/stream/find_all", undefined, {
      ...listed,
      Origin: "https://evil.example",
    });
    assert.equal(other.status, 200);
    assert.equal(other.headers.get("Access-Control-Allow-Origin"), null);
    assert.equal(other.headers.get("Access-Control-Allow-Credentials"), null);
    await other.body?.cancel();

    for (
      const [origin, allowed] of [["https://console.example", true], [
        "https://evil.example",
        false,
      ]] as const
    ) {
      const pre = await fetch(`${server.restUrl}/rest-api/stream/find_all`, {
        method: "OPTIONS",
        headers: { Origin: origin, "Access-Control-Request-Method": "POST" },
      });
      assert.equal(pre.status, 204);
      assert.equal(pre.headers.get("Access-Control-Allow-Origin"), allowed ? origin : null);
      assert.equal(pre.headers.get("Access-Control-Allow-Credentials"), allowed ? "true" : null);
      await pre.body?.cancel();
    }
  }, config);
});

Deno.test("open REST on loopback refuses a foreign Host (DNS rebinding); auth on lifts the guard", async () => {
  await withServer(async (server) => {
    const port = server.restPort;
    const get = (host: string) =>
      rawRequest("127.0.0.1", port, `GET /rest-api/stream/find_all HTTP/1.1\r\nHost: ${host}\r\n`);
    for (
      const host of ["evil.example", "evil.example:8081", "127.0.0.1.evil.example", "10.0.0.1"]
    ) {
      const { status, text } = await get(host);
      assert.equal(status, 403, host);
      assert.match(text, /"error":"forbidden"/);
      assert.match(text, /Host header must name a loopback address/);
    }
    for (
      const host of [
        "localhost",
        `localhost:${port}`,
        "127.0.0.1",
        `127.9.8.7:${port}`,
        `[::1]:${port}`,
        "app.localhost",
      ]
    ) {
      assert.equal((await get(host)).status, 200, host);
    }
  });
  await withServer(async (server) => {
    const { status } = await rawRequest(
      "127.0.0.1",
      server.restPort,
      `GET /rest-api/stream/find_all HTTP/1.1\r\nHost: media.example\r\nAuthorization: Bearer ${token}\r\n`,
    );
    assert.equal(status, 200);
  }, testConfig({ rest: { authTokens: [token] } }));
});

Deno.test("binds.rest puts REST on its own address while the other listeners keep bind", async () => {
  await withServer(async (server) => {
    assert.equal(server.restUrl, `http://127.0.0.2:${server.restPort}`);
    const res = await fetch(`${server.restUrl}/health`);
    assert.equal(res.status, 200);
    await res.body?.cancel();
    await assert.rejects(
      Deno.connect({ hostname: "127.0.0.1", port: server.restPort }),
      Deno.errors.ConnectionRefused,
    );
    const ws = await Deno.connect({ hostname: "127.0.0.1", port: server.wsPort });
    ws.close();
    const rtmp = await Deno.connect({ hostname: "127.0.0.1", port: server.rtmpPort });
    rtmp.close();
    await assert.rejects(
      Deno.connect({ hostname: "127.0.0.2", port: server.rtmpPort }),
      Deno.errors.ConnectionRefused,
    );
  }, testConfig({ binds: { rest: "127.0.0.2" } }));
});
