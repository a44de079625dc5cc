/**
 * The web console's server side: its files answer without credentials, its JSON answers
 * (recent log lines, recordings, readers, info) only with them; the log ring is bounded.
 * The page itself runs in Chromium in tests/e2e/console_test.ts.
 */
import assert from "node:assert/strict";
import { configSchema } from "../config.ts";
import { createLogger } from "../core/log.ts";
import { LogRing } from "../core/log_ring.ts";
import { startTestServer, testConfig } from "./helpers/test_server.ts";

const token = "console-test-token-0123";

Deno.test("the log ring keeps the newest lines, cut to a bounded length, shared by children", () => {
  const ring = new LogRing(3);
  const log = createLogger({ level: "info", write: () => {}, recent: ring });
  const child = log.child({ component: "c" });
  log.debug("not written, not kept");
  log.unkept().info("written, not kept");
  for (let i = 0; i < 5; i++) child.info(`line ${i}`);
  log.info("pull of rtsp://user:hunter2@10.0.0.1/cam started");
  const lines = ring.lines();
  assert.deepEqual(lines.map((l) => JSON.parse(l).msg), [
    "line 3",
    "line 4",
    "pull of rtsp://user:***@10.0.0.1/cam started",
  ]);
  assert.equal(child.recent, ring);
  assert.deepEqual(ring.lines(1).map((l) => JSON.parse(l).msg), [JSON.parse(lines[2]).msg]);
  log.info("x".repeat(100_000));
  assert.ok(ring.lines(1)[0].length <= 4_000);
});

Deno.test("with REST auth on, the console's files are open and its JSON needs credentials", async () => {
  const config = testConfig({ rest: { authTokens: [token] } });
  const log = createLogger({ level: "info", write: () => {}, recent: new LogRing() });
  const server = await startTestServer(config, log);
  const get = (path: string, headers: HeadersInit = {}) =>
    fetch(`${server.restUrl}${path}`, { headers });
  const auth = { Authorization: `Bearer ${token}` };
  try {
    for (
      const [path, type] of [
        ["/console", "text/html"],
        ["/console/", "text/html"],
        ["/console/console.js", "text/javascript"],
        ["/console/console.css", "text/css"],
      ]
    ) {
      const res = await get(path);
      assert.equal(res.status, 200, path);
      assert.match(res.headers.get("Content-Type") ?? "", new RegExp(`^${type}`), path);
      assert.ok((await res.text()).length > 100, path);
    }
    // Only reading the files is open: any other method, or another path, asks for credentials.
    const post = await fetch(`${server.restUrl}/console`, { method: "POST" });
    assert.equal(post.status, 401);
    await post.body?.cancel();
    for (const path of ["/console/api/info", "/console/api/logs", "/console/api/records"]) {
      const refused = await get(path);
      assert.equal(refused.status, 401, path);
      await refused.body?.cancel();
    }

    log.child({ component: "test" }).warn("a line for the console");
    const logs = await (await get("/console/api/logs", auth)).json();
    assert.equal(logs.kept, true);
    assert.ok(
      logs.lines.some((l: string) => JSON.parse(l).msg === "a line for the console"),
      JSON.stringify(logs.lines),
    );
    // Request lines (the console polls every 2 s) are written but not kept: they would push
    // every other line out of the ring.
    assert.equal(logs.lines.filter((l: string) => JSON.parse(l).msg === "request").length, 0);

    const info = await (await get("/console/api/info", auth)).json();
    assert.deepEqual(info.whepPath, "/whep");

    await Deno.mkdir(config.folders.records, { recursive: true });
    await Deno.writeFile(`${config.folders.records}/a b.mp4`, new Uint8Array(1234));
    const records = await (await get("/console/api/records", auth)).json();
    assert.deepEqual(
      records.map((r: { name: string; bytes: number; url: string }) => [
        r.name,
        r.bytes,
        r.url,
      ]),
      [["a b.mp4", 1234, "/client/records/a%20b.mp4"]],
    );
    const file = await get(records[0].url, auth);
    assert.equal(file.status, 200);
    assert.equal((await file.arrayBuffer()).byteLength, 1234);

    assert.deepEqual(await (await get("/console/api/readers", auth)).json(), {});
  } finally {
    await server.stop();
  }
});

Deno.test("with REST auth off, the console's JSON answers as is; no records folder lists none", async () => {
  const server = await startTestServer();
  try {
    const records = await fetch(`${server.restUrl}/console/api/records`);
    assert.equal(records.status, 200);
    assert.deepEqual(await records.json(), []);
    const logs = await (await fetch(`${server.restUrl}/console/api/logs`)).json();
    assert.deepEqual(logs, { kept: false, lines: [] });
  } finally {
    await server.stop();
  }
});

Deno.test("a WHIP/WHEP prefix may not take /console", () => {
  const parsed = configSchema.safeParse({ whip: { playPath: "/console" } });
  assert.equal(parsed.success, false);
});
