/** The server as a user starts it: the start task, signals, and a bad configuration. */
import assert from "node:assert/strict";
import dgram from "node:dgram";
import { freePort, spawnDeno, waitForHttp } from "./helpers/process.ts";
import { freePortsEnv } from "./helpers/server_process.ts";

const healthTimeoutMs = 5_000;

Deno.test("`deno task start` on the embedded defaults answers /health within 5 s and exits 0 on SIGTERM", async () => {
  const child = spawnDeno(["task", "start"]);
  const output = Promise.all([
    new Response(child.stdout).text(),
    new Response(child.stderr).text(),
  ]);
  try {
    // The wasm build step may run first on a fresh checkout; the 5 s count from the start.
    await waitForHttp("http://127.0.0.1:8081/health", healthTimeoutMs);
    const health = await (await fetch("http://127.0.0.1:8081/health")).json();
    assert.equal(health.status, "ok");
  } finally {
    child.kill("SIGTERM");
  }
  const status = await child.status;
  const [stdout, stderr] = await output;
  assert.equal(status.code, 0, stderr);
  assert.match(stdout, /"msg":"listening"/);
  assert.match(stdout, /"msg":"shutting down","signal":"SIGTERM"/);
});

Deno.test("SIGINT lets an in-flight request finish, then the server exits 0", async () => {
  const { ports, env } = freePortsEnv();
  const port = ports.rest;
  const child = spawnDeno(["run", "-A", "main.ts"], env);
  const output = Promise.all([
    new Response(child.stdout).text(),
    new Response(child.stderr).text(),
  ]);
  await waitForHttp(`http://127.0.0.1:${port}/health`, healthTimeoutMs);

  // A body that arrives in two halves keeps the request in flight across the signal.
  const { promise: secondHalf, resolve: sendSecondHalf } = Promise.withResolvers<void>();
  const body = new ReadableStream<Uint8Array>({
    async start(controller) {
      controller.enqueue(new TextEncoder().encode('{"name":'));
      await secondHalf;
      controller.enqueue(new TextEncoder().encode('"a"}'));
      controller.close();
    },
  });
  const pending = fetch(`http://127.0.0.1:${port}/rest-api/stream/find`, {
    method: "POST",
    body,
    headers: { "Content-Type": "application/json" },
  });
  await new Promise((r) => setTimeout(r, 300));
  child.kill("SIGINT");
  await new Promise((r) => setTimeout(r, 300));
  sendSecondHalf();
  const res = await pending;
  assert.equal(res.status, 200);
  assert.deepEqual(await res.json(), []);
  const status = await child.status;
  const [, stderr] = await output;
  assert.equal(status.code, 0, stderr);
  await assert.rejects(fetch(`http://127.0.0.1:${port}/health`));
});

Deno.test("a bad configuration stops the start with exit code 2 and names the field", async () => {
  for (
    const [env, field] of [
      [{ MEDIASERVER_PORTS_REST: "eighty" }, "ports.rest"],
      [{ MEDIASERVER_LOG_LEVEL: "loud" }, "log.level"],
    ] as const
  ) {
    const child = spawnDeno(["run", "-A", "main.ts"], env);
    const [status, , stderr] = await Promise.all([
      child.status,
      new Response(child.stdout).text(),
      new Response(child.stderr).text(),
    ]);
    assert.equal(status.code, 2, stderr);
    assert.match(stderr, new RegExp(`configuration error: .*${field.replace(".", "\\.")}`));
  }
  const missing = spawnDeno(["run", "-A", "main.ts", "--config", "/nonexistent/server.json"]);
  const [status, , stderr] = await Promise.all([
    missing.status,
    new Response(missing.stdout).text(),
    new Response(missing.stderr).text(),
  ]);
  assert.equal(status.code, 2);
  assert.match(stderr, /cannot read \/nonexistent\/server\.json/);
});

Deno.test("a port in use stops the start with exit code 1 naming the listener and its port", async () => {
  const rtmpTaken = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const srtTaken = dgram.createSocket("udp4");
  await new Promise<void>((resolve) => srtTaken.bind(0, "127.0.0.1", () => resolve()));
  const ports = freePortsEnv().env;
  try {
    for (
      const [env, named] of [
        [
          { MEDIASERVER_PORTS_RTMP: String((rtmpTaken.addr as Deno.NetAddr).port) },
          `rtmp port ${(rtmpTaken.addr as Deno.NetAddr).port}`,
        ],
        [
          {
            MEDIASERVER_PORTS_RTMP: String(freePort()),
            MEDIASERVER_PORTS_SRT: String(srtTaken.address().port),
          },
          `srt port ${srtTaken.address().port} \\(UDP\\)`,
        ],
      ] as const
    ) {
      const child = spawnDeno(["run", "-A", "main.ts"], { ...ports, ...env });
      const [status, stdout] = await Promise.all([
        child.status,
        new Response(child.stdout).text(),
        new Response(child.stderr).text(),
      ]);
      assert.equal(status.code, 1, stdout);
      assert.match(stdout, new RegExp(`"msg":"cannot start".*cannot start the ${named}`));
    }
  } finally {
    rtmpTaken.close();
    srtTaken.close();
  }
});
