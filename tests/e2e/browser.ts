/**
 * Headless Chromium for the browser suites: a page server on 127.0.0.1 serving a suite's
 * page at `/`, the Web SDK bundle at `/flashphoner.js` and any other files it names, and a
 * persistent Chromium context with the loopback flags of ../shared/peers/README.md.
 */
import { createRequire } from "node:module";
import { type BrowserContext, chromium, type Page } from "playwright-core";
import { chromiumArgs } from "./netns.ts";

/**
 * How long one driver call may take. A page promise that never settles (an SDK call whose
 * answer never comes) would otherwise hold the suite until CI's own limit.
 */
export const driverCallTimeoutMs = 60_000;

type Driver = Record<string, (...args: unknown[]) => Promise<unknown>>;

/** `promise`, or a rejection naming `what` once it has not settled within `driverCallTimeoutMs`. */
async function settledInTime<T>(promise: Promise<T>, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const expired = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new Error(`${what} unsettled after ${driverCallTimeoutMs} ms`)),
      driverCallTimeoutMs,
    );
  });
  try {
    return await Promise.race([promise, expired]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Calls the driver function `fn` a suite's page defines on `globalThis` with `args`; rejects
 * naming the call when it has not settled within `driverCallTimeoutMs`.
 */
export function call<T>(page: Page, fn: string, ...args: unknown[]): Promise<T> {
  return settledInTime(
    page.evaluate(
      ([fn, args]) => (globalThis as unknown as Driver)[fn as string](...(args as unknown[])),
      [fn, args] as const,
    ) as Promise<T>,
    `page call ${fn}(${JSON.stringify(args)})`,
  );
}

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
      await settledInTime(
        tab.evaluate(() => (globalThis as { sdkReady?: Promise<unknown> }).sdkReady),
        `sdkReady of ${path}`,
      );
      return tab;
    },
    async close() {
      await context.close();
      await Deno.remove(profile, { recursive: true });
      await pages.shutdown();
    },
  };
}
