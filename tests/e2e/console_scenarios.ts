/**
 * The web console (/console) in headless Chromium, driven as a user would: REST auth on, so
 * the page asks for credentials first; then it lists a running VOD stream with its codecs
 * and size, previews it over WHEP (frames decode), starts an RTSP pull from its form (seen
 * in /rtsp/find_all) and stops it, records the stream and downloads the file, and shows
 * recent log lines. Meant to run inside a loopback-only network namespace as root;
 * `console_test.ts` re-executes this file there.
 */
import assert from "node:assert/strict";
import { chromium, type Page } from "playwright-core";
import { createLogger } from "../../core/log.ts";
import { LogRing } from "../../core/log_ring.ts";
import { makeClip, waitFor } from "../helpers/media_fixtures.ts";
import { startTestServer, testConfig } from "../helpers/test_server.ts";
import { chromiumArgs, netnsEnv } from "./netns.ts";

/** Longest wait for a state in the page or the server, in ms. */
const waitMs = 15_000;
const user = "admin";
const password = "console-pass-1";
const token = "console-token-0123456789";

Deno.test("the web console in Chromium with REST auth on", async (t) => {
  if (Deno.env.get(netnsEnv) !== "1") {
    throw new Error(`run through tests/e2e/console_test.ts (needs a loopback-only netns)`);
  }
  const config = testConfig({
    rest: { basicUsers: [`${user}:${password}`], authTokens: [token] },
  });
  await Deno.mkdir(config.folders.media, { recursive: true });
  await makeClip(`${config.folders.media}/clip.mp4`, { seconds: 30, audio: "aac" });
  const log = createLogger({ level: "info", write: () => {}, recent: new LogRing() });
  const server = await startTestServer(config, log);
  const auth = { Authorization: `Bearer ${token}` };
  const rest = async (path: string, body: unknown = {}) => {
    const res = await server.post(path, body, auth);
    const text = await res.text();
    assert.equal(res.status, 200, `${path}: ${res.status} ${text}`);
    return text === "" ? undefined : JSON.parse(text);
  };
  const profile = await Deno.makeTempDir({ prefix: "console-chromium-" });
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: "/usr/bin/chromium",
    headless: true,
    args: chromiumArgs,
    acceptDownloads: true,
  });
  const pageErrors: string[] = [];
  try {
    const page = await context.newPage();
    page.on("pageerror", (err) => pageErrors.push(err.message));
    const consoleUrl = `${server.restUrl}/console`;

    await t.step(
      "without credentials the console asks for them; a wrong password is refused",
      async () => {
        const api = await fetch(`${server.restUrl}/console/api/info`);
        assert.equal(api.status, 401);
        await api.body?.cancel();
        await page.goto(consoleUrl);
        await page.locator("#login").waitFor({ state: "visible", timeout: waitMs });
        assert.equal(await page.locator("#main").isVisible(), false);
        await page.fill("#login [name=user]", user);
        await page.fill("#login [name=password]", "wrong");
        await page.click("#login button[type=submit]");
        await page.locator("#login-error", { hasText: "refused" }).waitFor({ timeout: waitMs });
        assert.equal(await page.locator("#main").isVisible(), false);
      },
    );

    await t.step("after user and password the console shows the server's state", async () => {
      await page.fill("#login [name=user]", user);
      await page.fill("#login [name=password]", password);
      await page.click("#login button[type=submit]");
      await page.locator("#main").waitFor({ state: "visible", timeout: waitMs });
      await page.locator("#streams td.empty").waitFor({ timeout: waitMs });
      assert.equal(await page.locator("#login").isVisible(), false);
      assert.match(await page.locator("#server-info").innerText(), /version/);
    });

    let filmId = "";
    await t.step("a running VOD stream is listed with provider, codecs and size", async () => {
      await rest("/vod/startup", { uri: "vod-live://clip.mp4", localStreamName: "film" });
      const row = page.locator("#streams tr", { hasText: "film" });
      await row.waitFor({ timeout: waitMs });
      filmId = (await row.getAttribute("data-key")) ?? "";
      const cells = await row.locator("td").allInnerTexts();
      const film = (await rest("/stream/find_all") as { name: string; mediaSessionId: string }[])
        .find((s) => s.name === "film")!;
      assert.equal(filmId, film.mediaSessionId);
      assert.ok(cells.includes("320x240"), cells.join(" | "));
      assert.ok(cells.some((c) => /H264 \/ AAC/.test(c)), cells.join(" | "));
    });

    await t.step("its preview (WHEP) shows frames and counts as a reader", async () => {
      await page.locator(`#streams tr[data-key="${filmId}"]`).locator("button.preview").click();
      const frames = await waitFor("preview frames", async () => {
        const seen = await videoFrames(page);
        return seen.frames > 10 ? seen : undefined;
      }, waitMs);
      assert.deepEqual([frames.width, frames.height], [320, 240]);
      await page.locator(`#streams tr[data-key="${filmId}"] td`, { hasText: /^1$/ })
        .waitFor({ timeout: waitMs });
      await page.click("#preview-close");
      await waitFor(
        "WHEP session closed",
        () => (server.services.whip.size === 0 ? true : undefined),
        waitMs,
      );
    });

    await t.step(
      "an RTSP pull started from the form is in /rtsp/find_all; Stop ends it",
      async () => {
        const uri = `${server.rtspUrl}/film`;
        const form = page.locator('form[data-path="/rtsp/startup"]');
        await form.locator("[name=uri]").fill(uri);
        await form.locator("[name=localStreamName]").fill("camera");
        await form.locator("button[type=submit]").click();
        const pulls = await waitFor("the pull in /rtsp/find_all", async () => {
          const list = await rest("/rtsp/find_all") as { uri: string; toStream: string }[];
          return list.length > 0 ? list : undefined;
        }, waitMs);
        assert.deepEqual(pulls.map((p) => [p.uri, p.toStream]), [[uri, "camera"]]);
        await page.locator("#streams tr", { hasText: "camera" }).waitFor({ timeout: waitMs });
        await page.locator("#rtsp tr", { hasText: uri }).getByRole("button", { name: "Stop" })
          .click();
        await waitFor("no RTSP pull left", async () => {
          const list = await rest("/rtsp/find_all") as unknown[];
          return list.length === 0 ? true : undefined;
        }, waitMs);
        await page.locator("#rtsp td.empty").waitFor({ timeout: waitMs });
      },
    );

    await t.step("Record, then Stop in Recorders: the file is listed and downloads", async () => {
      await page.locator(`#streams tr[data-key="${filmId}"]`)
        .getByRole("button", { name: "Record" }).click();
      const recorderRow = page.locator("#recorders tr", { hasText: filmId });
      await recorderRow.waitFor({ timeout: waitMs });
      await new Promise((r) => setTimeout(r, 2500));
      await recorderRow.getByRole("button", { name: "Stop" }).click();
      await page.locator("#recorders td.empty").waitFor({ timeout: waitMs });
      // The file of a running recording names its end as `{endTime}` until it stops.
      const fileRow = page.locator('#records tr[data-key]:not([data-key*="{"])').first();
      await fileRow.waitFor({ timeout: waitMs });
      const name = (await fileRow.getAttribute("data-key"))!;
      const [download] = await Promise.all([
        page.waitForEvent("download", { timeout: waitMs }),
        fileRow.getByRole("button", { name: "Download" }).click(),
      ]);
      assert.equal(download.suggestedFilename(), name);
      const saved = await Deno.readFile((await download.path())!);
      const onDisk = await Deno.readFile(`${config.folders.records}/${name}`);
      assert.equal(saved.length, onDisk.length);
      assert.ok(saved.length > 1000, `${saved.length} bytes`);
    });

    await t.step("recent log lines show the server's own lines", async () => {
      await page.locator("#log", { hasText: "session opened" }).waitFor({ timeout: waitMs });
    });

    await t.step("signed out, a token signs in too", async () => {
      await page.click("#sign-out");
      await page.locator("#login").waitFor({ state: "visible", timeout: waitMs });
      await page.fill("#login [name=token]", token);
      await page.click("#login button[type=submit]");
      await page.locator(`#streams tr[data-key="${filmId}"]`).waitFor({ timeout: waitMs });
    });

    await t.step("with REST auth off the console opens without asking", async () => {
      const open = await startTestServer();
      try {
        const tab = await context.newPage();
        tab.on("pageerror", (err) => pageErrors.push(err.message));
        await tab.goto(`${open.restUrl}/console`);
        await tab.locator("#streams td.empty").waitFor({ timeout: waitMs });
        assert.equal(await tab.locator("#login").isVisible(), false);
        assert.equal(await tab.locator("#sign-out").isVisible(), false);
        await tab.close();
      } finally {
        await open.stop();
      }
    });

    await t.step("no page errors", () => {
      assert.deepEqual(pageErrors, []);
    });
  } finally {
    await context.close();
    await Deno.remove(profile, { recursive: true });
    await server.stop();
  }
});

/** What the test reads of the page's document (the DOM types are not in Deno's lib). */
interface PageDocument {
  document: {
    getElementById(id: string): {
      videoWidth: number;
      videoHeight: number;
      getVideoPlaybackQuality(): { totalVideoFrames: number };
    };
  };
}

/** Frames the preview video has shown and its picture size. */
function videoFrames(page: Page): Promise<{ frames: number; width: number; height: number }> {
  return page.evaluate(() => {
    const video = (globalThis as unknown as PageDocument).document.getElementById("preview-video");
    return {
      frames: video.getVideoPlaybackQuality().totalVideoFrames,
      width: video.videoWidth,
      height: video.videoHeight,
    };
  });
}
