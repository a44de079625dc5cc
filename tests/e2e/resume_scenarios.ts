/**
 * Session resumption with the real `@flashphoner/websdk` 2.0.276 in headless Chromium: a
 * `keepAlive` session playing a stream has its TCP connection cut by the server side; the
 * page reconnects with the session's `authToken` and gets the same session back. Meant to run
 * inside a loopback-only network namespace as root (through resume_test.ts).
 *
 * The SDK closes the peer connections of every stream of a session whose socket closed
 * (flashphoner-core.js onSessionStatusChange marks them FAILED, which closes their
 * RTCPeerConnection), so a browser player cannot outlive the cut: the page plays again in the
 * resumed session. Peers that outlive the socket keep playing (tests/session_resume_test.ts).
 */
import assert from "node:assert/strict";
// Importing the package's manifest makes Deno install the package (and so its bundle).
import websdkPackage from "@flashphoner/websdk/package.json" with { type: "json" };
import { cutServerConnections } from "../helpers/connection_cut.ts";
import { startTestServer, testConfig } from "../helpers/test_server.ts";
import { startBrowser } from "./browser.ts";
import { netnsEnv } from "./netns.ts";

/** Longest wait for a state in the page, in ms. */
const pageWaitMs = 15_000;

interface SessionRecord {
  statuses: string[];
  userData: Record<string, unknown> | null;
}

interface PageApi {
  sdkReady: Promise<boolean>;
  openSession(key: string, options: Record<string, unknown>): Promise<SessionRecord>;
  startStream(
    sessionKey: string,
    key: string,
    kind: "publish" | "play",
    name: string,
  ): Promise<{ status: string; info: string }>;
  videoState(key: string): { time: number; width: number } | null;
  sessions: Record<string, { record: SessionRecord }>;
}

Deno.test("Web SDK 2.0.276 session resumption in Chromium", async (t) => {
  if (Deno.env.get(netnsEnv) !== "1") {
    throw new Error(`run through tests/e2e/resume_test.ts (needs a loopback-only netns)`);
  }
  assert.equal(websdkPackage.version, "2.0.276");
  const server = await startTestServer(testConfig({ ws: { resumeWindowSec: 30 } }));
  const browser = await startBrowser(
    "resume-chromium-",
    new URL("./resume_page.html", import.meta.url),
  );
  try {
    const page = await browser.open();
    const api = <A extends unknown[], R>(fn: (api: PageApi, ...args: A) => R, ...args: A) =>
      page.evaluate(
        ([source, args]) => {
          const f = new Function(`return (${source})`)();
          return f(globalThis, ...args);
        },
        [fn.toString(), args] as const,
      ) as Promise<Awaited<R>>;
    const sessionIds = async () =>
      ((await (await server.post("/connection/find_all")).json()) as { sessionId: string }[])
        .map((s) => s.sessionId).sort();
    /** Waits until the <video> of `key` has advanced by `seconds` of media. */
    const videoAdvances = async (key: string, seconds: number) => {
      const start = await api((p, k) => p.videoState(k), key);
      assert.ok(start, `stream ${key} has a <video>`);
      await page.waitForFunction(
        ([k, from, by]) =>
          ((globalThis as unknown as PageApi).videoState(k)?.time ?? 0) > from + by,
        [key, start.time, seconds] as const,
        { timeout: pageWaitMs },
      );
    };

    let viewerId = "";
    let authToken = "";
    await t.step("a keepAlive session plays a stream published by another session", async () => {
      const pub = await api((p, url) => p.openSession("pub", { urlServer: url }), server.wsUrl);
      assert.deepEqual(pub.statuses, ["ESTABLISHED"]);
      const published = await api((p) => p.startStream("pub", "cam", "publish", "resumed"));
      assert.equal(published.status, "PUBLISHING", published.info);
      const viewer = await api(
        (p, url) => p.openSession("viewer", { urlServer: url, keepAlive: true }),
        server.wsUrl,
      );
      assert.deepEqual(viewer.statuses, ["ESTABLISHED"]);
      viewerId = viewer.userData!.sessionId as string;
      authToken = viewer.userData!.authToken as string;
      const played = await api((p) => p.startStream("viewer", "first", "play", "resumed"));
      assert.equal(played.status, "PLAYING", played.info);
      await videoAdvances("first", 1);
    });

    await t.step(
      "the server side cuts the viewer's TCP connection: the session stays",
      async () => {
        const clientPort = Number(/^\/127\.0\.0\.1:(\d+)\//.exec(viewerId)![1]);
        await cutServerConnections(server.wsPort, clientPort);
        await page.waitForFunction(
          () =>
            (globalThis as unknown as PageApi).sessions.viewer.record.statuses.some((s) =>
              s === "DISCONNECTED" || s === "FAILED"
            ),
          undefined,
          { timeout: pageWaitMs },
        );
        assert.ok((await sessionIds()).includes(viewerId), "the detached session is listed");
        assert.equal((await sessionIds()).length, 2);
      },
    );

    await t.step("createSession with keepAlive and the authToken resumes the session", async () => {
      const again = await api(
        (p, url, token) =>
          p.openSession("again", { urlServer: url, keepAlive: true, authToken: token }),
        server.wsUrl,
        authToken,
      );
      assert.deepEqual(again.statuses, ["ESTABLISHED"]);
      assert.equal(again.userData!.sessionId, viewerId);
      assert.equal(again.userData!.authToken, authToken);
      assert.equal((await sessionIds()).length, 2);
    });

    await t.step("the resumed session plays: PLAYING and its video advances", async () => {
      const played = await api((p) => p.startStream("again", "second", "play", "resumed"));
      assert.equal(played.status, "PLAYING", played.info);
      await videoAdvances("second", 1);
      const streams = await (await server.post("/stream/find", { sessionId: viewerId })).json();
      assert.ok(
        (streams as { status: string }[]).some((s) => s.status === "PLAYING"),
        JSON.stringify(streams),
      );
    });

    await t.step("the first player, whose peer the SDK closed, ends on its own", async () => {
      const started = Date.now();
      const playing = async () =>
        ((await (await server.post("/stream/find", { sessionId: viewerId })).json()) as {
          status: string;
        }[]).filter((s) => s.status === "PLAYING").length;
      while (await playing() > 1) {
        assert.ok(Date.now() - started < 60_000, "the closed peer's player outlived 60 s");
        await new Promise((r) => setTimeout(r, 250));
      }
      console.log(`bench: orphaned player ended ${Date.now() - started} ms after the resume`);
    });
  } finally {
    await browser.close();
    await server.stop();
  }
});
