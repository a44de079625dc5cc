import assert from "node:assert/strict";
import { startHookBackend } from "../tests/helpers/hook_backend.ts";
import { freePort } from "../tests/helpers/process.ts";
import { HookClient, restClientConfigSchema } from "./hooks.ts";
import { createLogger, silentLogger } from "./log.ts";

const context = { nodeId: "node@127.0.0.1", appKey: "app", sessionId: "/s" };

Deno.test("no backend: every hook is accepted unchanged without a call", async () => {
  const hooks = new HookClient({ timeoutMs: 1000, log: silentLogger });
  assert.equal(hooks.enabled, false);
  const body = { ...context, x: 1 };
  assert.deepEqual(await hooks.invoke("OnDataEvent", body), { ok: true, body });
  assert.deepEqual(await hooks.connect(body), { ok: true, body });
});

Deno.test("restClientConfig: restExclude, DISABLE, NOTIFY and OVERWRITE", async () => {
  const backend = await startHookBackend((call) => ({
    status: 200,
    body: { ...call.body, name: "renamed", sessionId: "/forged", extra: true },
  }));
  const hooks = new HookClient({ url: backend.url + "/", timeoutMs: 1000, log: silentLogger });
  try {
    const config = restClientConfigSchema.parse({
      publishStream: {
        restExclude: "sdp, custom",
        restPolicy: "OVERWRITE",
        restOverwrite: "name,sessionId",
      },
      playStream: { restPolicy: "DISABLE" },
    });
    const body = { ...context, name: "s1", sdp: "v=0", custom: { a: 1 } };
    const published = await hooks.invoke("publishStream", body, config);
    assert.deepEqual(published, { ok: true, body: { ...body, name: "renamed" } });
    assert.deepEqual(backend.calls[0].body, { ...context, name: "s1" });
    assert.equal(backend.calls[0].hook, "publishStream");

    assert.deepEqual(await hooks.invoke("playStream", body, config), { ok: true, body });
    assert.equal(backend.calls.length, 1, "DISABLE makes no call");

    assert.deepEqual(await hooks.invoke("stopStream", body, config), { ok: true, body });
    assert.deepEqual(backend.calls[1].body, body, "NOTIFY sends everything, keeps ours");
  } finally {
    await backend.close();
  }
});

Deno.test("failures: LOG goes on, FAIL refuses; non-200, unreachable backend", async () => {
  const backend = await startHookBackend(() => ({ status: 500 }));
  const lines: string[] = [];
  const log = createLogger({ level: "warn", write: (line) => lines.push(line) });
  const hooks = new HookClient({ url: backend.url, timeoutMs: 1000, log });
  const down = new HookClient({
    url: `http://127.0.0.1:${freePort()}`,
    timeoutMs: 1000,
    log: silentLogger,
  });
  try {
    const fail = restClientConfigSchema.parse({ OnDataEvent: { restOnError: "FAIL" } });
    assert.deepEqual(await hooks.invoke("OnDataEvent", context), { ok: true, body: context });
    assert.deepEqual(await hooks.invoke("OnDataEvent", context, fail), {
      ok: false,
      reason: "HTTP 500",
    });
    assert.equal(lines.length, 2, "a log line per failure");
    assert.match(lines[0], /"msg":"hook failed".*"hook":"OnDataEvent".*"reason":"HTTP 500"/);
    assert.match(lines[0], /"outcome":"going on"/);
    assert.match(lines[1], /"outcome":"refused"/);
    const unreachable = await down.invoke("OnDataEvent", context, fail);
    assert.equal(unreachable.ok, false);
    assert.match((unreachable as { reason: string }).reason, /^request failed/);
  } finally {
    await backend.close();
  }
});

Deno.test("connect: the answer is laid over the body; context fields and protected ones stay ours", async () => {
  let reply: { status: number; body?: unknown } = { status: 200 };
  const backend = await startHookBackend(() => reply);
  const hooks = new HookClient({ url: backend.url, timeoutMs: 1000, log: silentLogger });
  try {
    const body = { ...context, authToken: "t", custom: { a: 1 } };
    assert.deepEqual(await hooks.connect(body, ["authToken"]), {
      ok: true,
      body,
      restClientConfig: undefined,
    });
    reply = {
      status: 200,
      body: {
        appKey: "forged",
        authToken: "forged",
        custom: { b: 2 },
        restClientConfig: { OnDataEvent: { restOnError: "FAIL", clientExclude: "x,y" } },
      },
    };
    const changed = await hooks.connect(body, ["authToken"]);
    assert.ok(changed.ok);
    assert.deepEqual(changed.body, { ...body, custom: { b: 2 } });
    assert.deepEqual(changed.restClientConfig?.OnDataEvent.clientExclude, ["x", "y"]);
    assert.equal(changed.restClientConfig?.OnDataEvent.restOnError, "FAIL");
    reply = { status: 200, body: [1] };
    assert.equal((await hooks.connect(body)).ok, false, "an answer that is not an object refuses");
    reply = { status: 200, body: { restClientConfig: { connect: { restOnError: "MAYBE" } } } };
    assert.equal((await hooks.connect(body)).ok, false, "a bad restClientConfig refuses");
    reply = { status: 403 };
    assert.deepEqual(await hooks.connect(body), { ok: false, reason: "HTTP 403" });
  } finally {
    await backend.close();
  }
});

Deno.test("a timeout counts as a failure and drain() waits for calls in flight", async () => {
  const backend = await startHookBackend(() => ({ status: 200, delayMs: 300 }));
  const hooks = new HookClient({ url: backend.url, timeoutMs: 100, log: silentLogger });
  const fail = restClientConfigSchema.parse({ OnDataEvent: { restOnError: "FAIL" } });
  try {
    const started = performance.now();
    const pending = hooks.invoke("OnDataEvent", context, fail);
    await hooks.drain();
    assert.ok(performance.now() - started < 250);
    assert.deepEqual(await pending, { ok: false, reason: "timeout after 100 ms" });
  } finally {
    await backend.close();
  }
});
