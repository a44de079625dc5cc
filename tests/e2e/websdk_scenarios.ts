/**
 * The real `@flashphoner/websdk` 2.0.276 in headless Chromium against our server. Meant to
 * run inside a loopback-only network namespace as root; `websdk_test.ts` re-executes this
 * file there (`deno test -A tests/e2e/websdk_scenarios.ts`). One Chromium for every step.
 */
import assert from "node:assert/strict";
// Importing the package's manifest makes Deno install the package (and so its bundle).
import websdkPackage from "@flashphoner/websdk/package.json" with { type: "json" };
import { startHookBackend } from "../helpers/hook_backend.ts";
import { startTestServer, testConfig } from "../helpers/test_server.ts";
import { startBrowser } from "./browser.ts";
import { netnsEnv } from "./netns.ts";

/** Longest wait for a state in the page, in ms. */
const pageWaitMs = 10_000;

interface PageSession {
  statuses: string[];
  appData: Record<string, unknown>[];
  warns: Record<string, unknown>[];
  userData: Record<string, unknown> | null;
}

Deno.test("Web SDK 2.0.276 in Chromium", async (t) => {
  if (Deno.env.get(netnsEnv) !== "1") {
    throw new Error(`run through tests/e2e/websdk_test.ts (needs a loopback-only netns)`);
  }
  assert.equal(websdkPackage.version, "2.0.276");

  let dataStatus = 200;
  const backend = await startHookBackend((call) => {
    const custom = (call.body.custom ?? {}) as { deny?: boolean; strict?: boolean };
    if (call.hook === "connect") {
      if (custom.deny) return { status: 403 };
      const restClientConfig = custom.strict ? { OnDataEvent: { restOnError: "FAIL" } } : undefined;
      return { status: 200, body: { ...call.body, restClientConfig } };
    }
    if (call.hook === "OnDataEvent") return { status: dataStatus };
    return { status: 200 };
  });
  const server = await startTestServer(testConfig({ hooks: { url: backend.url } }));
  const browser = await startBrowser(
    "websdk-chromium-",
    new URL("./websdk_page.html", import.meta.url),
  );
  const pageOrigin = browser.origin;
  try {
    const page = await browser.open();

    const open = (key: string, custom: Record<string, unknown> = {}) =>
      page.evaluate(
        ([key, url, custom]) =>
          (globalThis as unknown as {
            openSession: (k: string, o: unknown) => Promise<unknown>;
          }).openSession(key, { urlServer: url, custom }),
        [key, server.wsUrl, custom] as const,
      ) as Promise<PageSession>;
    const state = (key: string) =>
      page.evaluate(
        (key) =>
          (globalThis as unknown as { sessions: Record<string, { record: unknown }> })
            .sessions[key].record,
        key,
      ) as Promise<PageSession>;
    const sendData = (key: string, payload: unknown) =>
      page.evaluate(
        ([key, payload]) =>
          (globalThis as unknown as {
            sendData: (k: string, p: unknown) => Promise<unknown>;
          }).sendData(key, payload),
        [key, payload] as const,
      ) as Promise<{ status: string; detail: Record<string, unknown> }>;
    const waitForStatus = (key: string, status: string) =>
      page.waitForFunction(
        ([key, status]) =>
          (globalThis as unknown as {
            sessions: Record<string, { record: { statuses: string[] } }>;
          }).sessions[key].record.statuses.includes(status),
        [key, status] as const,
        { timeout: pageWaitMs },
      );

    let sessionId = "";
    await t.step("createSession reaches ESTABLISHED", async () => {
      const s = await open("main", { login: "alice" });
      assert.deepEqual(s.statuses, ["ESTABLISHED"]);
      sessionId = s.userData!.sessionId as string;
      assert.match(sessionId, /^\/127\.0\.0\.1:\d+\/127\.0\.0\.1:\d+-[0-9a-f-]{36}$/);
      assert.match(s.userData!.authToken as string, /^[A-Za-z0-9]{40}$/);
    });

    await t.step("/connection/find_all shows the session with its fields", async () => {
      const res = await server.post("/connection/find_all");
      const [record] = await res.json();
      assert.equal(record.sessionId, sessionId);
      assert.equal(record.appKey, "defaultApp");
      assert.equal(record.origin, pageOrigin);
      assert.equal(record.clientVersion, "2.0");
      assert.match(record.clientBrowserVersion, /Chrome\/\d+/);
      assert.deepEqual(record.mediaProviders.slice(0, 1), ["WebRTC"]);
      assert.equal(record.msePacketizationVersion, 2);
      assert.equal(record.custom.login, "alice");
      // The SDK fills clientInfo from UA client hints only on https pages; here it sends {}.
      assert.deepEqual(record.custom.clientInfo, {});
      assert.match(record.authToken, /^[A-Za-z0-9]{40}$/);
    });

    await t.step("session.sendData reaches the backend with exactly the hook fields", async () => {
      const from = backend.calls.length;
      const result = await sendData("main", { text: "hello", list: [1, 2] });
      assert.equal(result.status, "ACCEPTED");
      const hook = await backend.waitFor("OnDataEvent", pageWaitMs, from);
      assert.equal(hook.contentType, "application/json;charset=UTF-8");
      const { operationId, ...rest } = hook.body;
      assert.match(operationId as string, /^[0-9a-f]{8}-[0-9a-f]{4}-1[0-9a-f]{3}-/, "uuid v1");
      assert.deepEqual(rest, {
        nodeId: server.services.nodeId,
        appKey: "defaultApp",
        sessionId,
        payload: { text: "hello", list: [1, 2] },
      });
    });

    await t.step("backend 403: FAILED under restOnError FAIL, ACCEPTED otherwise", async () => {
      const strict = await open("strict", { strict: true });
      assert.deepEqual(strict.statuses, ["ESTABLISHED"]);
      dataStatus = 403;
      try {
        const refused = await sendData("strict", { n: 1 });
        assert.equal(refused.status, "FAILED");
        assert.match(refused.detail.info as string, /HTTP 403/);
        const lenient = await sendData("main", { n: 2 });
        assert.equal(lenient.status, "ACCEPTED");
      } finally {
        dataStatus = 200;
      }
    });

    await t.step("REST /data/send reaches the page's APP_DATA handler", async () => {
      const res = await server.post("/data/send", {
        nodeId: server.services.nodeId,
        operationId: "op-42",
        sessionId,
        payload: { greeting: "from the backend" },
      });
      assert.equal(res.status, 200);
      await res.body?.cancel();
      await page.waitForFunction(
        () =>
          (globalThis as unknown as {
            sessions: Record<string, { record: { appData: unknown[] } }>;
          }).sessions.main.record.appData.length > 0,
        undefined,
        { timeout: pageWaitMs },
      );
      const [appData] = (await state("main")).appData;
      assert.deepEqual(appData.payload, { greeting: "from the backend" });
      assert.equal(appData.operationId, "op-42");
    });

    await t.step("publish reaches PUBLISHING", async () => {
      const result = await page.evaluate(
        () =>
          (globalThis as unknown as {
            publish: (k: string, n: string) => Promise<unknown>;
          }).publish("main", "stream1"),
      ) as { status: string; info: string };
      assert.equal(result.status, "PUBLISHING", result.info);
    });

    await t.step("/connection/terminate makes the SDK report DISCONNECTED", async () => {
      const res = await server.post("/connection/terminate", { sessionId });
      assert.equal(res.status, 200);
      await res.body?.cancel();
      await waitForStatus("main", "DISCONNECTED");
      const listed = await (await server.post("/connection/find", { sessionId })).json();
      assert.deepEqual(listed, []);
    });

    await t.step("a backend refusing /connect makes the SDK fail to connect", async () => {
      const s = await open("denied", { deny: true });
      assert.ok(!s.statuses.includes("ESTABLISHED"), JSON.stringify(s.statuses));
      assert.ok(["DISCONNECTED", "FAILED"].includes(s.statuses[0]), JSON.stringify(s.statuses));
      const warns = (await state("denied")).warns;
      assert.match(String(warns[0]?.info), /connection refused by the backend: HTTP 403/);
      const listed = await (await server.post("/connection/find_all")).json();
      assert.deepEqual(listed.filter((r: { custom: { deny?: boolean } }) => r.custom.deny), []);
    });
  } finally {
    await browser.close();
    await server.stop();
    await backend.close();
  }
});
