/**
 * Routes each hook to the backend of its application (WCS "apps"): the `appKey` context field
 * every hook body carries picks the HookClient of `apps.<appKey>`; built-in and unset appKeys
 * go to `hooks.url`. With `apps` configured, a connection of an unknown appKey is refused at
 * `connect`, as WCS does (spec §3.2).
 */
import type { Config } from "../config.ts";
import { HookClient, type HookOutcome, type RestClientConfig } from "./hooks.ts";
import type { Logger } from "./log.ts";

/** appKeys WCS has without configuration; they use `hooks.url` unless `apps` lists them. */
export const builtInAppKeys: ReadonlySet<string> = new Set([
  "defaultApp",
  "flashStreamingApp",
  "roomApp",
  "sfuApp",
]);

/** Options of HookRouter: the `hooks` and `apps` sections of the configuration. */
export interface HookRouterOptions {
  hooks: Config["hooks"];
  apps: Config["apps"];
  log: Logger;
}

/** The server's hooks: the calls of HookClient, each sent to the backend of its appKey. */
export class HookRouter {
  readonly #fallback: HookClient;
  readonly #apps = new Map<string, HookClient>();

  constructor({ hooks, apps, log }: HookRouterOptions) {
    this.#fallback = new HookClient({ url: hooks.url, timeoutMs: hooks.timeoutMs, log });
    for (const [appKey, app] of Object.entries(apps)) {
      this.#apps.set(
        appKey,
        new HookClient({
          url: app.hooksUrl,
          timeoutMs: app.timeoutMs ?? hooks.timeoutMs,
          restOnError: app.restOnError,
          enabledHooks: app.enabledHooks,
          log: log.child({ appKey }),
        }),
      );
    }
  }

  /** Whether connections of `appKey` are accepted: any with no apps configured. */
  accepts(appKey: string): boolean {
    return this.#apps.size === 0 || this.#apps.has(appKey) || builtInAppKeys.has(appKey);
  }

  /** The `connect` hook of the body's app (HookClient.connect); an unknown appKey refuses. */
  connect(
    body: Record<string, unknown>,
    protectedFields: readonly string[] = [],
  ): ReturnType<HookClient["connect"]> {
    const appKey = String(body.appKey ?? "");
    if (!this.accepts(appKey)) {
      return Promise.resolve({ ok: false, reason: `unknown appKey ${JSON.stringify(appKey)}` });
    }
    return this.#client(body.appKey).connect(body, protectedFields);
  }

  /** A hook of the body's app (HookClient.invoke), under that app's defaults. */
  invoke(
    hook: string,
    body: Record<string, unknown>,
    config?: RestClientConfig,
  ): Promise<HookOutcome> {
    return this.#client(body.appKey).invoke(hook, body, config);
  }

  /** Resolves once every hook call in flight, of every app, has ended. */
  async drain(): Promise<void> {
    await Promise.all([this.#fallback, ...this.#apps.values()].map((c) => c.drain()));
  }

  /** The client of an appKey; an absent or unlisted one (REST-made calls) uses `hooks.url`. */
  #client(appKey: unknown): HookClient {
    return (typeof appKey === "string" && this.#apps.get(appKey)) || this.#fallback;
  }
}
