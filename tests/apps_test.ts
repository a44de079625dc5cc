/**
 * Applications (`apps`): each Web SDK session's hooks go to the backend of its appKey, under
 * that app's restOnError and enabled hooks; unknown appKeys are refused when apps are
 * configured; the configuration's checks and its environment form.
 */
import assert from "node:assert/strict";
import { ConfigError, configSchema, loadConfig } from "../config.ts";
import { HookRouter } from "../core/hook_router.ts";
import { silentLogger } from "../core/log.ts";
import { type HookBackend, startHookBackend } from "./helpers/hook_backend.ts";
import { startTestServer, testConfig, type TestServer } from "./helpers/test_server.ts";
import { sdkConnectionObject, WcsClient } from "./helpers/wcs_client.ts";
import { startPublishing, TestPublisher, waitFor, weriftSanitizers } from "./webrtc_helpers.ts";

/** Hooks a session makes from connect to PUBLISHING, sorted. */
const sessionHooks = [
  "ConnectionStatusEvent",
  "OnDataEvent",
  "StreamStatusEvent",
  "connect",
  "publishStream",
];

/** Connects a session of `appKey` and publishes `name` over WebRTC until PUBLISHING. */
async function publishAs(
  server: TestServer,
  appKey: string,
  name: string,
  publisher: TestPublisher,
): Promise<{ client: WcsClient; sessionId: string }> {
  const { client, userData } = await WcsClient.connect(
    server.wsUrl,
    sdkConnectionObject({ appKey }),
  );
  assert.equal((await client.sendData({ from: appKey })).status, "ACCEPTED");
  await startPublishing(publisher, client, { name });
  return { client, sessionId: userData.sessionId as string };
}

/** The hook names `backend` got, each once, sorted (separate requests may arrive in any order). */
function hookNames(backend: HookBackend): string[] {
  return [...new Set(backend.calls.map((c) => c.hook))].sort();
}

/** Waits until `backend` has had the StreamStatusEvent PUBLISHING of `name`. */
function publishingSeen(backend: HookBackend, name: string): Promise<void> {
  return waitFor(
    () =>
      backend.calls.some((c) =>
        c.hook === "StreamStatusEvent" && c.body.name === name && c.body.status === "PUBLISHING"
      ),
    5000,
    `the PUBLISHING hook of ${name}`,
  );
}

Deno.test({
  name: "two apps with two hook backends: each session's hooks go to its app's backend only",
  ...weriftSanitizers,
  fn: async () => {
    const alpha = await startHookBackend();
    const beta = await startHookBackend();
    const fallback = await startHookBackend();
    const server = await startTestServer(testConfig({
      hooks: { url: fallback.url },
      apps: { alpha: { hooksUrl: alpha.url }, beta: { hooksUrl: beta.url } },
    }));
    const publishers = [new TestPublisher("VP8"), new TestPublisher("VP8")];
    const clients: WcsClient[] = [];
    try {
      const a = await publishAs(server, "alpha", "cam-alpha", publishers[0]);
      clients.push(a.client);
      const b = await publishAs(server, "beta", "cam-beta", publishers[1]);
      clients.push(b.client);
      await publishingSeen(alpha, "cam-alpha");
      await publishingSeen(beta, "cam-beta");

      for (
        const [backend, appKey, session, name] of [
          [alpha, "alpha", a, "cam-alpha"],
          [beta, "beta", b, "cam-beta"],
        ] as const
      ) {
        assert.deepEqual(hookNames(backend), sessionHooks, appKey);
        for (const call of backend.calls) {
          assert.equal(call.body.appKey, appKey, `${appKey}: ${call.hook}`);
          assert.equal(call.body.sessionId, session.sessionId, `${appKey}: ${call.hook}`);
        }
        const published = backend.calls.find((c) => c.hook === "publishStream")!;
        assert.equal(published.body.name, name);
        const data = backend.calls.find((c) => c.hook === "OnDataEvent")!;
        assert.deepEqual(data.body.payload, { from: appKey });
      }
      assert.deepEqual(fallback.calls, [], "no hook of a listed app reaches hooks.url");

      // A built-in appKey not listed uses hooks.url; an unknown one is refused before any hook.
      const plain = await WcsClient.connect(server.wsUrl, sdkConnectionObject());
      clients.push(plain.client);
      assert.equal((await fallback.waitFor("connect")).body.appKey, "defaultApp");
      const stranger = await WcsClient.open(server.wsUrl);
      clients.push(stranger);
      stranger.send("connection", sdkConnectionObject({ appKey: "nobody" }));
      const [fail] = await stranger.next("fail") as [Record<string, unknown>];
      assert.deepEqual(fail, {
        apiMethod: "ConnectionStatusEvent",
        status: "FAILED",
        info: 'unknown appKey "nobody"',
      });
      assert.equal((await stranger.closed).code, 1008);
      for (const backend of [alpha, beta, fallback]) {
        assert.ok(!backend.calls.some((c) => c.body.appKey === "nobody"));
      }
    } finally {
      await Promise.all(publishers.map((p) => p.close()));
      await Promise.all(clients.map((c) => c.close()));
      await server.stop();
      await Promise.all([alpha, beta, fallback].map((b) => b.close()));
    }
  },
});

Deno.test("per-app restOnError and enabledHooks; a down backend refuses only its app's connects", async () => {
  // strict: restOnError FAIL and a backend refusing OnDataEvent (its restClientConfig may
  // still set a hook's restOnError: custom.lenient asks for LOG, custom.exclude sets no
  // restOnError, so the app's FAIL holds). quiet: OnDataEvent not enabled.
  const strict = await startHookBackend((call) => {
    if (call.hook === "OnDataEvent") return { status: 403 };
    const custom = call.body.custom as Record<string, unknown> | undefined;
    const restClientConfig = custom?.lenient
      ? { OnDataEvent: { restOnError: "LOG" } }
      : custom?.exclude
      ? { OnDataEvent: { restExclude: "payload" } }
      : undefined;
    return { status: 200, body: { ...call.body, restClientConfig } };
  });
  const quiet = await startHookBackend();
  const gone = await startHookBackend();
  const goneUrl = gone.url;
  await gone.close();
  const server = await startTestServer(testConfig({
    apps: {
      strict: { hooksUrl: strict.url, restOnError: "FAIL" },
      quiet: { hooksUrl: quiet.url, enabledHooks: ["connect", "ConnectionStatusEvent"] },
      down: { hooksUrl: goneUrl, restOnError: "FAIL", timeoutMs: 2000 },
    },
  }));
  const clients: WcsClient[] = [];
  const connect = async (appKey: string, custom: Record<string, unknown> = {}) => {
    const { client } = await WcsClient.connect(
      server.wsUrl,
      sdkConnectionObject({ appKey, custom }),
    );
    clients.push(client);
    return client;
  };
  try {
    const refused = await (await connect("strict")).sendData({ n: 1 });
    assert.equal(refused.status, "FAILED", "the app's FAIL applies");
    assert.match(refused.info as string, /HTTP 403/);
    const lenient = await connect("strict", { lenient: true });
    assert.equal((await lenient.sendData({ n: 2 })).status, "ACCEPTED");
    const excluding = await connect("strict", { exclude: true });
    assert.equal((await excluding.sendData({ n: 3 })).status, "FAILED");
    const sent = strict.calls.filter((c) => c.hook === "OnDataEvent");
    assert.equal(sent.length, 3);
    assert.ok(!("payload" in sent[2].body), "the backend's restExclude still applies");

    const client = await connect("quiet");
    assert.equal((await client.sendData({ n: 4 })).status, "ACCEPTED");
    await quiet.waitFor("ConnectionStatusEvent");
    assert.deepEqual(hookNames(quiet), ["ConnectionStatusEvent", "connect"]);

    const doomed = await WcsClient.open(server.wsUrl);
    clients.push(doomed);
    doomed.send("connection", sdkConnectionObject({ appKey: "down" }));
    const [fail] = await doomed.next("fail") as [Record<string, unknown>];
    assert.equal(fail.status, "FAILED");
    assert.match(fail.info as string, /^connection refused by the backend: request failed/);
    assert.equal((await doomed.closed).code, 1008);
    const still = await connect("quiet");
    assert.equal((await still.sendData({ n: 5 })).status, "ACCEPTED");
    const found = await server.post("/connection/find_all");
    const listed = (await found.json() as { appKey: string }[]).map((c) => c.appKey).sort();
    assert.deepEqual(listed, ["quiet", "quiet", "strict", "strict", "strict"]);
  } finally {
    await Promise.all(clients.map((c) => c.close()));
    await server.stop();
    await Promise.all([strict, quiet].map((b) => b.close()));
  }
});

Deno.test("apps configuration: JSON in MEDIASERVER_APPS, defaults, bad fields named", () => {
  const read = () => "{}";
  const config = loadConfig({
    args: ["--config", "x.json"],
    readTextFile: read,
    env: {
      MEDIASERVER_APPS: JSON.stringify({
        roomApp: { hooksUrl: "http://127.0.0.1:9/room", enabledHooks: ["OnDataEvent"] },
      }),
    },
  });
  assert.deepEqual(config.apps, {
    roomApp: {
      hooksUrl: "http://127.0.0.1:9/room",
      restOnError: "LOG",
      enabledHooks: ["OnDataEvent"],
    },
  });
  const fails = (apps: unknown, field: string) =>
    assert.throws(
      () => loadConfig({ readTextFile: () => JSON.stringify({ apps }) }),
      (err: unknown) => err instanceof ConfigError && err.field === field,
      field,
    );
  fails({ a: { hooksUrl: "ftp://x" } }, "apps.a.hooksUrl");
  fails({ a: { hooksUrl: "http://x", restOnError: "MAYBE" } }, "apps.a.restOnError");
  fails({ a: { hooksUrl: "http://x", enabledHooks: ["on data"] } }, "apps.a.enabledHooks.0");
  fails({ "bad key": { hooksUrl: "http://x" } }, "apps.bad key");
  fails({ a: { hooksUrl: "http://x", extra: 1 } }, "apps.a.extra");
  assert.throws(
    () => loadConfig({ readTextFile: read, env: { MEDIASERVER_APPS: "not json" } }),
    (err: unknown) => err instanceof ConfigError && err.field === "apps",
  );
});

Deno.test("HookRouter: RTMP apps and REST-made calls without an appKey; no apps accepts any key", async () => {
  const studio = await startHookBackend();
  const fallback = await startHookBackend();
  const { hooks, apps } = configSchema.parse({
    hooks: { url: fallback.url },
    apps: { studio: { hooksUrl: studio.url } },
  });
  const router = new HookRouter({ hooks, apps, log: silentLogger });
  try {
    // An RTMP client of rtmp://host/studio/... has appKey "studio"; of /live, flashStreamingApp.
    assert.equal((await router.connect({ appKey: "studio", sessionId: "s1" })).ok, true);
    assert.equal((await router.connect({ appKey: "flashStreamingApp", sessionId: "s2" })).ok, true);
    assert.deepEqual(await router.connect({ appKey: "other", sessionId: "s3" }), {
      ok: false,
      reason: 'unknown appKey "other"',
    });
    // A call made over REST may carry no appKey: its events go to hooks.url.
    await router.invoke("CallStatusEvent", { appKey: null, callId: "c1", status: "RING" });
    await router.drain();
    assert.deepEqual(studio.calls.map((c) => [c.hook, c.body.sessionId]), [["connect", "s1"]]);
    assert.deepEqual(fallback.calls.map((c) => c.hook), ["connect", "CallStatusEvent"]);
    const open = new HookRouter({ hooks, apps: {}, log: silentLogger });
    assert.ok(open.accepts("anything"), "with no apps, every appKey uses hooks.url");
  } finally {
    await Promise.all([studio, fallback].map((b) => b.close()));
  }
});
