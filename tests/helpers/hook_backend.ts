/** A REST hook backend for tests and benches: records every hook call, answers as told. */

/** One hook call as the backend saw it. */
export interface HookCall {
  /** Hook name, the last path segment (`connect`, `OnDataEvent`, ...). */
  readonly hook: string;
  readonly contentType: string | null;
  readonly body: Record<string, unknown>;
}

/** What the backend answers to a call: a status and an optional JSON body. */
export interface HookReply {
  status: number;
  body?: unknown;
  /** Milliseconds to wait before answering (to exercise timeouts). */
  delayMs?: number;
}

/** Decides the reply of a hook call; the default echoes the body with 200, as WCS's EchoApp. */
export type HookResponder = (call: HookCall) => HookReply;

/** A running test backend. */
export interface HookBackend {
  /** Base URL to configure as `hooks.url`. */
  readonly url: string;
  /** Every call received, in order. */
  readonly calls: HookCall[];
  /** Replaces the responder. */
  respond(responder: HookResponder): void;
  /** Resolves with the next call of `hook` (or the first one already recorded after `from`). */
  waitFor(hook: string, timeoutMs?: number, from?: number): Promise<HookCall>;
  close(): Promise<void>;
}

const echo: HookResponder = (call) => ({ status: 200, body: call.body });

/** Starts a backend on 127.0.0.1 with an ephemeral port. */
export async function startHookBackend(responder: HookResponder = echo): Promise<HookBackend> {
  const calls: HookCall[] = [];
  const waiters: (() => void)[] = [];
  /** Pending delayed replies: their timers and how to release them at once on close. */
  const delays = new Map<ReturnType<typeof setTimeout>, () => void>();
  let current = responder;
  const { promise: listening, resolve } = Promise.withResolvers<number>();
  const server = Deno.serve({
    hostname: "127.0.0.1",
    port: 0,
    onListen: ({ port }) => resolve(port),
  }, async (req) => {
    const call: HookCall = {
      hook: new URL(req.url).pathname.split("/").pop()!,
      contentType: req.headers.get("content-type"),
      body: await req.json(),
    };
    calls.push(call);
    waiters.splice(0).forEach((w) => w());
    const reply = current(call);
    if (reply.delayMs) {
      await new Promise<void>((r) => {
        const t = setTimeout(() => {
          delays.delete(t);
          r();
        }, reply.delayMs);
        delays.set(t, r);
      });
    }
    return reply.body === undefined
      ? new Response(null, { status: reply.status })
      : Response.json(reply.body, { status: reply.status });
  });
  const port = await listening;
  return {
    url: `http://127.0.0.1:${port}`,
    calls,
    respond(r) {
      current = r;
    },
    async waitFor(hook, timeoutMs = 5000, from = 0) {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        const found = calls.slice(from).find((c) => c.hook === hook);
        if (found) return found;
        const left = deadline - Date.now();
        if (left <= 0) throw new Error(`no ${hook} hook call within ${timeoutMs} ms`);
        let timer: ReturnType<typeof setTimeout> | undefined;
        await new Promise<void>((r) => {
          waiters.push(r);
          timer = setTimeout(r, left);
        });
        clearTimeout(timer);
      }
    },
    async close() {
      for (const [t, release] of delays) {
        clearTimeout(t);
        release();
      }
      delays.clear();
      await server.shutdown();
    },
  };
}
