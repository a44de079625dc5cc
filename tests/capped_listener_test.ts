import assert from "node:assert/strict";
import { CappedListener } from "../core/capped_listener.ts";
import { Cap, KeyedCap } from "../core/limits.ts";
import { createLogger, type LogLevel } from "../core/log.ts";

/** A wrapped connection that records its closing. */
class Wrapped {
  closed = false;
  constructor(readonly tcp: Deno.TcpConn) {}
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.tcp.close();
  }
}

const waitUntil = async (what: string, ok: () => boolean) => {
  for (let i = 0; i < 200 && !ok(); i++) await new Promise((r) => setTimeout(r, 10));
  assert.ok(ok(), what);
};

Deno.test("capped listener: a handler that throws, rejects or ends frees its slots and closes its connection; close() waits for the ones still serving", async () => {
  const lines: { level: LogLevel; line: string }[] = [];
  const log = createLogger({ level: "info", write: (line, level) => lines.push({ level, line }) });
  const connections = new Cap("test connections", 10);
  const perAddress = new KeyedCap("test per address", 10);
  const served: Wrapped[] = [];
  const hold = Promise.withResolvers<void>();
  let n = 0;
  const listener = new CappedListener<Wrapped>({ connections, perAddress }, {
    protocol: "test",
    wrap: (tcp) => new Wrapped(tcp),
    serve: (conn) => {
      served.push(conn);
      const kind = n++;
      if (kind === 0) throw new Error("thrown by the handler");
      if (kind === 1) return Promise.reject(new Error("rejected by the handler"));
      if (kind === 2) return Promise.resolve();
      return hold.promise;
    },
  }, log);
  const port = listener.listen("127.0.0.1", 0);
  const clients: Deno.Conn[] = [];
  try {
    for (let i = 0; i < 3; i++) {
      clients.push(await Deno.connect({ hostname: "127.0.0.1", port }));
      await waitUntil(`connection ${i} served and ended`, () => served[i]?.closed === true);
    }
    await waitUntil("the slots freed", () => connections.current === 0);
    const errors = lines.filter((l) => l.level === "error").map((l) => l.line);
    assert.equal(errors.length, 2, errors.join("\n"));
    assert.match(errors[0], /test connection failed.*thrown by the handler/);
    assert.match(errors[1], /test connection failed.*rejected by the handler/);

    clients.push(await Deno.connect({ hostname: "127.0.0.1", port }));
    await waitUntil("the fourth connection served", () => served.length === 4);
    assert.equal(connections.current, 1);
    let closed = false;
    const closing = listener.close().then(() => closed = true);
    await waitUntil("the listener closed the connection", () => served[3].closed);
    await new Promise((r) => setTimeout(r, 50));
    assert.equal(closed, false, "close() waits for the handler still serving");
    hold.resolve();
    await closing;
    assert.equal(connections.current, 0);
  } finally {
    hold.resolve();
    await listener.close();
    for (const c of clients) c.close();
  }
});
