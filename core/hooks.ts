/**
 * The one client for outbound REST hooks (`/connect`, `/OnDataEvent`, `/ConnectionStatusEvent`,
 * later `/publishStream`, `/StreamStatusEvent`, ...): `POST {hooks.url}/{hook}` with a JSON
 * body, a timeout, the connection's `restClientConfig` policy and a log line per failure.
 * Calls are plain async fetches, so a slow backend delays only the operation waiting on it.
 */
import { z } from "zod";
import type { Logger } from "./log.ts";
import { hookFailures, hookLabel, hookSeconds } from "./metrics.ts";

/** Fields every hook body carries that a backend may never change. */
export const hookContextFields = ["nodeId", "appKey", "sessionId"] as const;

/** A comma-separated field list (WCS form) or an array of names. */
const fieldList = z.string().transform((s) => s.split(",").map((f) => f.trim()).filter(Boolean))
  .or(z.array(z.string()));

/** Policy of one hook in a `restClientConfig`. */
const hookPolicySchema = z.object({
  clientExclude: fieldList.default([]),
  restExclude: fieldList.default([]),
  // Unset falls back to the application's default (`apps.<appKey>.restOnError`, else LOG).
  restOnError: z.enum(["LOG", "FAIL"]).optional(),
  restPolicy: z.enum(["OVERWRITE", "NOTIFY", "DISABLE"]).default("NOTIFY"),
  restOverwrite: fieldList.default([]),
});

/** What a failed hook does: LOG goes on, FAIL refuses the operation. */
export type RestOnError = "LOG" | "FAIL";

/** How one hook is called and how its failures count (WCS `restClientConfig` entry). */
export type HookPolicy = Omit<z.output<typeof hookPolicySchema>, "restOnError"> & {
  restOnError: RestOnError;
};

/** `restClientConfig` of a connection: a policy per hook name; hooks not named use defaults. */
export const restClientConfigSchema = z.record(z.string(), hookPolicySchema);
/** A parsed `restClientConfig`. */
export type RestClientConfig = z.output<typeof restClientConfigSchema>;

const defaultPolicy = hookPolicySchema.parse({});

/** The policy of `hook` in `config`, defaults filled in (`restOnError` the app's default). */
export function hookPolicy(
  config: RestClientConfig | undefined,
  hook: string,
  restOnError: RestOnError = "LOG",
): HookPolicy {
  const policy = config?.[hook] ?? defaultPolicy;
  return { ...policy, restOnError: policy.restOnError ?? restOnError };
}

/** A copy of `object` without the listed fields. */
export function withoutFields(
  object: Record<string, unknown>,
  fields: readonly string[],
): Record<string, unknown> {
  if (fields.length === 0) return object;
  const copy = { ...object };
  for (const field of fields) delete copy[field];
  return copy;
}

/** Outcome of a hook: `ok` with the body to go on with, or refused with the reason. */
export type HookOutcome =
  | { ok: true; body: Record<string, unknown> }
  | { ok: false; reason: string };

/** Answer of the backend to the `connect` hook: the connection, possibly changed. */
const connectAnswer = z.looseObject({ restClientConfig: restClientConfigSchema.optional() });

/** Options of HookClient. */
export interface HookClientOptions {
  /** Base URL of the backend; undefined means no hooks (everything accepted). */
  url?: string;
  /** Time a hook may take before it counts as failed, in ms. */
  timeoutMs: number;
  /** restOnError of hooks the connection's `restClientConfig` leaves unset (default LOG). */
  restOnError?: RestOnError;
  /** Hooks called; others are skipped as under DISABLE. Absent: every hook. */
  enabledHooks?: readonly string[];
  log: Logger;
}

/** Calls the backend's REST hooks. */
export class HookClient {
  readonly #base?: string;
  readonly #timeoutMs: number;
  readonly #restOnError: RestOnError;
  readonly #enabledHooks?: ReadonlySet<string>;
  readonly #log: Logger;
  readonly #inflight = new Set<Promise<unknown>>();

  constructor(options: HookClientOptions) {
    this.#base = options.url?.replace(/\/+$/, "");
    this.#timeoutMs = options.timeoutMs;
    this.#restOnError = options.restOnError ?? "LOG";
    this.#enabledHooks = options.enabledHooks && new Set(options.enabledHooks);
    this.#log = options.log.child({ component: "hooks" });
  }

  /** True when a backend is configured. */
  get enabled(): boolean {
    return this.#base !== undefined;
  }

  /** True when `hook` goes to the backend: one is configured and the hook is enabled. */
  #calls(hook: string): boolean {
    return this.#base !== undefined && (this.#enabledHooks?.has(hook) ?? true);
  }

  /**
   * The `connect` hook. Any failure (non-200, timeout, an answer that is not a JSON object)
   * refuses the connection whatever the policy. On success: the backend's answer laid over
   * what was sent, context fields and `protectedFields` kept, and its `restClientConfig`.
   */
  async connect(
    body: Record<string, unknown>,
    protectedFields: readonly string[] = [],
  ): Promise<
    | { ok: true; body: Record<string, unknown>; restClientConfig?: RestClientConfig }
    | { ok: false; reason: string }
  > {
    if (!this.#calls("connect")) return { ok: true, body };
    const answer = await this.#post("connect", body);
    if (!answer.ok) return this.#failed("connect", body, answer.reason, "FAIL");
    const parsed = answer.text.trim() === ""
      ? connectAnswer.safeParse({})
      : connectAnswer.safeParse(parseJson(answer.text));
    if (!parsed.success) {
      const reason = `bad answer: ${parsed.error.issues[0].message}`;
      return this.#failed("connect", body, reason, "FAIL");
    }
    const { restClientConfig, ...fields } = parsed.data;
    const merged: Record<string, unknown> = { ...body, ...fields };
    for (const field of [...hookContextFields, ...protectedFields]) {
      if (field in body) merged[field] = body[field];
    }
    return { ok: true, body: merged, restClientConfig };
  }

  /**
   * A direct invocation or event hook under the connection's policy: DISABLE, a hook not
   * enabled or no backend skips the call; restExclude fields are not sent; with OVERWRITE
   * the restOverwrite fields of the answer replace ours; a failure refuses only when
   * restOnError (the policy's, else the app's) is FAIL.
   */
  async invoke(
    hook: string,
    body: Record<string, unknown>,
    config?: RestClientConfig,
  ): Promise<HookOutcome> {
    const policy = hookPolicy(config, hook, this.#restOnError);
    if (!this.#calls(hook) || policy.restPolicy === "DISABLE") return { ok: true, body };
    const answer = await this.#post(hook, withoutFields(body, policy.restExclude));
    if (!answer.ok) return this.#failed(hook, body, answer.reason, policy.restOnError);
    if (policy.restPolicy !== "OVERWRITE" || policy.restOverwrite.length === 0) {
      return { ok: true, body };
    }
    const parsed = z.looseObject({}).safeParse(parseJson(answer.text));
    if (!parsed.success) {
      return this.#failed(hook, body, "answer is not a JSON object", policy.restOnError);
    }
    const result = { ...body };
    for (const field of policy.restOverwrite) {
      if (field in parsed.data && !(hookContextFields as readonly string[]).includes(field)) {
        result[field] = parsed.data[field];
      }
    }
    return { ok: true, body: result };
  }

  /** Resolves once every hook call in flight has ended (for a clean stop). */
  async drain(): Promise<void> {
    while (this.#inflight.size > 0) await Promise.allSettled([...this.#inflight]);
  }

  #failed(
    hook: string,
    body: Record<string, unknown>,
    reason: string,
    restOnError: RestOnError,
  ): HookOutcome {
    hookFailures.inc({ hook: hookLabel(hook) });
    this.#log.warn("hook failed", {
      hook,
      reason,
      restOnError,
      sessionId: body.sessionId,
      outcome: restOnError === "FAIL" ? "refused" : "going on",
    });
    return restOnError === "FAIL" ? { ok: false, reason } : { ok: true, body };
  }

  #post(hook: string, body: Record<string, unknown>): Promise<
    { ok: true; text: string } | { ok: false; reason: string }
  > {
    const startedMs = performance.now();
    const call = this.#fetch(hook, body);
    this.#inflight.add(call);
    call.finally(() => {
      this.#inflight.delete(call);
      hookSeconds.observe({ hook: hookLabel(hook) }, (performance.now() - startedMs) / 1000);
    });
    return call;
  }

  async #fetch(hook: string, body: Record<string, unknown>): Promise<
    { ok: true; text: string } | { ok: false; reason: string }
  > {
    const abort = new AbortController();
    const timer = setTimeout(() => abort.abort(), this.#timeoutMs);
    try {
      const res = await fetch(`${this.#base}/${hook}`, {
        method: "POST",
        headers: {
          "Content-Type": "application/json;charset=UTF-8",
          "Accept": "application/json",
        },
        body: JSON.stringify(body),
        signal: abort.signal,
      });
      const text = await res.text();
      if (res.status !== 200) return { ok: false, reason: `HTTP ${res.status}` };
      return { ok: true, text };
    } catch (err) {
      if (abort.signal.aborted) return { ok: false, reason: `timeout after ${this.#timeoutMs} ms` };
      return { ok: false, reason: `request failed: ${(err as Error).message}` };
    } finally {
      clearTimeout(timer);
    }
  }
}

/** JSON.parse that yields undefined for text that is not JSON (the schema then refuses it). */
function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}
