/**
 * The real `@flashphoner/websdk` phone in headless Chromium (fake microphone) calling baresip
 * (auto-answer, a 400 Hz tone as its microphone) through our gateway: the SDK's call reaches
 * ESTABLISHED, baresip hears the browser (non-silent decoded G.711), the browser hears
 * baresip (WebAudio level above silence), hangup from either side ends both, and baresip
 * calling the session's login rings the SDK, which answers. Meant to run inside a
 * loopback-only network namespace as root: `sip_phone_test.ts` re-executes this file there.
 */
import assert from "node:assert/strict";
import type { Page } from "playwright-core";
import { type Baresip, startBaresip } from "../helpers/baresip.ts";
import { startTestServer, testConfig } from "../helpers/test_server.ts";
import { startBrowser } from "./browser.ts";
import { netnsEnv } from "./netns.ts";

/** Longest wait for a state in the page or at baresip, in ms. */
const waitMs = 15_000;
/** WebAudio RMS (full scale 1) above which the browser hears sound, not silence. */
const heardLevel = 0.01;
/** RMS of 16-bit samples above which baresip heard sound (its tone is ~5600). */
const heardRms = 100;

interface PhoneState {
  statuses: string[];
  warns: Record<string, unknown>[];
  calls: Record<string, { statuses: string[]; caller: string; callee: string }>;
  incoming: string[];
}

type PageApi = {
  phone: PhoneState;
  openPhone(url: string, sipOptions: Record<string, unknown>): Promise<string[]>;
  dial(callee: string): string;
  answer(id: string): void;
  hangup(id: string): void;
  receivedLevel(id: string, ms: number): Promise<number>;
};

function api(page: Page) {
  const state = () => page.evaluate(() => (globalThis as unknown as PageApi).phone);
  return {
    state,
    open: (url: string, sipOptions: Record<string, unknown>) =>
      page.evaluate(
        ([url, o]) => (globalThis as unknown as PageApi).openPhone(url, o),
        [url, sipOptions] as const,
      ),
    dial: (callee: string) =>
      page.evaluate((c) => (globalThis as unknown as PageApi).dial(c), callee),
    answer: (id: string) => page.evaluate((i) => (globalThis as unknown as PageApi).answer(i), id),
    hangup: (id: string) => page.evaluate((i) => (globalThis as unknown as PageApi).hangup(i), id),
    level: (id: string, ms: number) =>
      page.evaluate(
        ([i, ms]) => (globalThis as unknown as PageApi).receivedLevel(i, ms),
        [id, ms] as const,
      ),
    async callStatuses(id: string): Promise<string[]> {
      return (await state()).calls[id]?.statuses ?? [];
    },
  };
}

async function waitUntil(what: string, check: () => Promise<boolean>, timeoutMs = waitMs) {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

async function baresipCalls(baresip: Baresip): Promise<string> {
  return (await baresip.command("listcalls")).data;
}

Deno.test("Web SDK phone in Chromium calls baresip through the gateway", async (t) => {
  if (Deno.env.get(netnsEnv) !== "1") {
    throw new Error(`run through tests/e2e/sip_phone_test.ts (needs a loopback-only netns)`);
  }
  const server = await startTestServer(testConfig());
  const baresip = await startBaresip();
  const browser = await startBrowser(
    "sip-phone-chromium-",
    new URL("./sip_phone_page.html", import.meta.url),
  );
  try {
    const page = await browser.open();
    const phone = api(page);
    const statuses = await phone.open(server.wsUrl, {
      login: "alice",
      authenticationName: "alice",
      password: "",
      domain: "127.0.0.1",
      outboundProxy: "",
      // The SDK's phone example passes its port field's text.
      port: String(baresip.sipPort),
      registerRequired: false,
    });
    assert.deepEqual(statuses, ["ESTABLISHED"]);

    /** Dials baresip and waits for ESTABLISHED in the SDK and at baresip. */
    const dial = async () => {
      const id = await phone.dial(baresip.user);
      await waitUntil("ESTABLISHED in the SDK", async () => {
        const s = await phone.callStatuses(id);
        assert.ok(!s.includes("FAILED"), `call failed: ${s}`);
        return s.includes("ESTABLISHED");
      });
      await waitUntil(
        "ESTABLISHED at baresip",
        async () => (await baresipCalls(baresip)).includes("ESTABLISHED"),
      );
      return id;
    };

    await t.step("call: ESTABLISHED, sound both ways, the SDK's hangup ends both", async () => {
      const id = await dial();
      const statuses = await phone.callStatuses(id);
      assert.equal(statuses.at(-1), "ESTABLISHED", `${statuses}`);
      let level = 0;
      await waitUntil("baresip's tone at the browser (WebAudio)", async () => {
        level = await phone.level(id, 500);
        return level > heardLevel;
      });
      // The fake microphone's beeps reach baresip for a few seconds.
      await new Promise((r) => setTimeout(r, 3000));
      await phone.hangup(id);
      await waitUntil("FINISH in the SDK", async () => {
        return (await phone.callStatuses(id)).includes("FINISH");
      });
      await waitUntil(
        "the call's end at baresip",
        async () => !(await baresipCalls(baresip)).includes("ESTABLISHED"),
      );
      const rms = await baresip.heardRms();
      assert.ok(rms > heardRms, `baresip heard RMS ${rms} (browser heard ${level})`);
    });

    await t.step("call: baresip's hangup ends the SDK's call", async () => {
      const id = await dial();
      await baresip.command("hangup");
      await waitUntil("FINISH in the SDK", async () => {
        return (await phone.callStatuses(id)).includes("FINISH");
      });
    });

    await t.step("baresip calls the session's login: the SDK rings and answers", async () => {
      await baresip.command("dial", `sip:alice@127.0.0.1:${server.sipPort}`);
      let id = "";
      await waitUntil("INCOMING_CALL in the SDK", async () => {
        id = (await phone.state()).incoming[0] ?? "";
        return id !== "";
      });
      await phone.answer(id);
      await waitUntil("ESTABLISHED in the SDK", async () => {
        return (await phone.callStatuses(id)).includes("ESTABLISHED");
      });
      await waitUntil(
        "ESTABLISHED at baresip",
        async () => (await baresipCalls(baresip)).includes("ESTABLISHED"),
      );
      const level = await phone.level(id, 1000);
      assert.ok(level > heardLevel, `browser heard ${level}`);
      await phone.hangup(id);
      await waitUntil(
        "the call's end at baresip",
        async () => !(await baresipCalls(baresip)).includes("ESTABLISHED"),
      );
      await waitUntil("FINISH in the SDK", async () => {
        return (await phone.callStatuses(id)).includes("FINISH");
      });
    });
  } catch (err) {
    console.error(`baresip log:\n${baresip.log()}`);
    throw err;
  } finally {
    await browser.close();
    await baresip.stop();
    await server.stop();
  }
});
