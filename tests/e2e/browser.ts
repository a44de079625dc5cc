/**
 * Headless Chromium for the browser suites: a page server on 127.0.0.1 serving a suite's
 * page at `/`, the Web SDK bundle at `/flashphoner.js` and any other files it names, and a
 * persistent Chromium context with the loopback flags of ../shared/peers/README.md.
 */
import { createRequire } from "node:module";
import { type BrowserContext, chromium, type Page } from "playwright-core";
import { chromiumArgs } from "./netns.ts";

/** A running page server and Chromium. */
export interface SuiteBrowser {
  readonly context: BrowserContext;
  /** The page server, e.g. `http://127.0.0.1:PORT`. */
  readonly origin: string;
  /** A new page at `path` (`/` by default), its errors logged; resolved once its `sdkReady` has. */
  open(path?: string): Promise<Page>;
  /** Closes Chromium, removes its profile and stops the page server. */
  close(): Promise<void>;
}

/**
 * Starts the page server with `page` at `/` (and `files` by path, `.html` ones as pages) and
 * a Chromium whose profile folder starts with `profilePrefix`, with `extraArgs` after the
 * standard flags.
 */
export async function startBrowser(
  profilePrefix: string,
  page: URL,
  files: Record<string, Uint8Array> = {},
  extraArgs: string[] = [],
): Promise<SuiteBrowser> {
  const sdk = createRequire(import.meta.url).resolve("@flashphoner/websdk/flashphoner.js");
  const served: Record<string, Uint8Array> = {
    "/": await Deno.readFile(page),
    "/flashphoner.js": await Deno.readFile(sdk),
    ...files,
  };
  const pages = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, (req) => {
    const path = new URL(req.url).pathname;
    const body = served[path];
    if (!body) return new Response("not found", { status: 404 });
    const type = path === "/" || path.endsWith(".html") ? "text/html" : "text/javascript";
    return new Response(body.slice(), { headers: { "Content-Type": type } });
  });
  const origin = `http://127.0.0.1:${pages.addr.port}`;
  const profile = await Deno.makeTempDir({ prefix: profilePrefix });
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: "/usr/bin/chromium",
    headless: true,
    args: [...chromiumArgs, ...extraArgs],
  });
  return {
    context,
    origin,
    async open(path = "/") {
      const tab = await context.newPage();
      tab.on("pageerror", (err) => console.error("[page error]", err.message));
      await tab.goto(`${origin}${path}`);
      await tab.evaluate(() => (globalThis as { sdkReady?: Promise<unknown> }).sdkReady);
      return tab;
    },
    async close() {
      await context.close();
      await Deno.remove(profile, { recursive: true });
      await pages.shutdown();
    },
  };
}
