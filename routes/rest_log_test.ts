import assert from "node:assert/strict";
import { createLogger } from "../core/log.ts";
import { createServices } from "../core/services.ts";
import { testConfig } from "../tests/helpers/test_server.ts";
import { createRestHandler } from "./http.ts";
import { operations } from "./mod.ts";

function restHandler() {
  const lines: string[] = [];
  const log = createLogger({ level: "info", write: (line) => lines.push(line) });
  const services = createServices(testConfig(), log);
  return { handle: createRestHandler({ services, operations }), lines };
}

function post(path: string, body: string): Request {
  return new Request(`http://127.0.0.1${path}`, {
    method: "POST",
    body,
    headers: { "Content-Type": "application/json", "Host": "127.0.0.1" },
  });
}

Deno.test("rest: an operation's request line names method, path, status and time, in this order", async () => {
  const { handle, lines } = restHandler();
  const before = Date.now();
  const res = await handle(post("/rest-api/stream/find_all", "{}"));
  assert.equal(res.status, 200);
  assert.equal(res.headers.get("Content-Type"), "application/json");
  // No Origin: no browser asked, so no CORS header (tests/rest_api_test.ts has a browser's).
  assert.equal(res.headers.get("Access-Control-Allow-Origin"), null);
  assert.deepEqual(await res.json(), []);
  const line = JSON.parse(lines.at(-1)!);
  assert.deepEqual(Object.keys(line), [
    "time",
    "level",
    "msg",
    "component",
    "method",
    "path",
    "status",
    "ms",
  ]);
  assert.deepEqual({ ...line, time: undefined, ms: undefined }, {
    level: "info",
    msg: "request",
    component: "rest",
    method: "POST",
    path: "/rest-api/stream/find_all",
    status: 200,
    time: undefined,
    ms: undefined,
  });
  assert.ok(Date.parse(line.time) >= before && Date.parse(line.time) <= Date.now());
  assert.ok(typeof line.ms === "number" && line.ms >= 0);
});

Deno.test("rest: operations answer bad bodies, other methods and other routes as before", async () => {
  const { handle, lines } = restHandler();
  const unknown = await handle(post("/rest-api/stream/find_all", '{"x":1}'));
  assert.equal(unknown.status, 400);
  assert.deepEqual(await unknown.json(), {
    error: "bad request",
    field: "x",
    message: "unknown field",
  });
  const malformed = await handle(post("/rest-api/stream/find_all", "{"));
  assert.equal(malformed.status, 400);
  assert.match((await malformed.json()).message, /malformed JSON/);
  const text = await handle(
    new Request("http://127.0.0.1/rest-api/stream/find_all", {
      method: "POST",
      body: "{}",
      headers: { "Content-Type": "text/plain", "Host": "127.0.0.1" },
    }),
  );
  assert.equal(text.status, 415);
  await text.body?.cancel();
  const put = await handle(
    new Request("http://127.0.0.1/rest-api/stream/find_all", {
      method: "PUT",
      headers: { "Host": "127.0.0.1" },
    }),
  );
  assert.equal(put.status, 405);
  assert.equal(put.headers.get("Allow"), "GET, POST");
  await put.body?.cancel();
  const get = await handle(
    new Request("http://127.0.0.1/rest-api/stream/find_all", { headers: { "Host": "127.0.0.1" } }),
  );
  assert.deepEqual([get.status, await get.json()], [200, []]);
  const missing = await handle(post("/rest-api/stream/nothing", "{}"));
  assert.equal(missing.status, 404);
  await missing.body?.cancel();
  const statuses = lines.map((l) => JSON.parse(l)).filter((l) => l.msg === "request")
    .map((l) => `${l.method} ${l.status}`);
  assert.deepEqual(statuses, [
    "POST 400",
    "POST 400",
    "POST 415",
    "PUT 405",
    "GET 200",
    "POST 404",
  ]);
});
