/** Helpers for tests that run the server or peers as subprocesses. */
import dgram from "node:dgram";

/** The server's command of the `start` task in deno.json (after its kernel build). */
const startCommand: readonly string[] = (() => {
  const denoJson = JSON.parse(
    Deno.readTextFileSync(new URL("../../deno.json", import.meta.url)),
  ) as { tasks: { start: string } };
  return denoJson.tasks.start.split("&&").at(-1)!.trim().split(/\s+/);
})();

/**
 * The permissions and V8 flags of the `start` task, read from deno.json so that tests and
 * benchmarks run the server exactly as users start it.
 */
export const startPermissions: readonly string[] = startCommand.filter((arg) =>
  arg.startsWith("--allow-") || arg.startsWith("--v8-flags=")
);

/** The environment the `start` task sets for the server (its `NAME=value` words). */
export const startEnv: Readonly<Record<string, string>> = Object.fromEntries(
  startCommand.slice(0, startCommand.indexOf("deno")).map((word) => {
    const equals = word.indexOf("=");
    return [word.slice(0, equals), word.slice(equals + 1)];
  }),
);

/**
 * Ports `freePort` gave lately: the kernel may hand a port it just freed out again, and one
 * server's ports, picked one after another, must differ (CI once got REST and RTMP on one).
 */
const givenPorts = new Set<number>();
/** Ports remembered in `givenPorts`; the oldest is forgotten beyond. */
const maxGivenPorts = 1024;
/** Tries for a port not given lately before taking one anyway. */
const maxFreePortTries = 64;

/** A TCP port that was free a moment ago on 127.0.0.1, and not one this process got lately. */
export function freePort(): number {
  for (let tries = 1;; tries++) {
    const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
    const { port } = listener.addr as Deno.NetAddr;
    listener.close();
    if (givenPorts.has(port) && tries < maxFreePortTries) continue;
    givenPorts.add(port);
    if (givenPorts.size > maxGivenPorts) givenPorts.delete(givenPorts.values().next().value!);
    return port;
  }
}

/** Binds a UDP socket on 127.0.0.1:`port`; undefined when the port is taken. */
export async function bindUdp(port: number): Promise<dgram.Socket | undefined> {
  const socket = dgram.createSocket("udp4");
  try {
    await new Promise<void>((resolve, reject) => {
      socket.once("error", reject);
      socket.bind(port, "127.0.0.1", () => resolve());
    });
    return socket;
  } catch {
    socket.close();
    return undefined;
  }
}

/**
 * The first of `count` consecutive UDP ports, all free a moment ago (Deno.listenDatagram
 * would need --unstable-net).
 */
export async function freeUdpRange(count: number): Promise<number> {
  for (;;) {
    const base = freePort();
    if (base + count > 65535) continue;
    const sockets: dgram.Socket[] = [];
    for (let p = base; p < base + count; p++) {
      const socket = await bindUdp(p);
      if (!socket) break;
      sockets.push(socket);
    }
    await Promise.all(sockets.map((s) => new Promise<void>((r) => s.close(() => r()))));
    if (sockets.length === count) return base;
  }
}

/** Polls `url` until it answers 200 or `timeoutMs` passes; returns the ms it took. */
export async function waitForHttp(url: string, timeoutMs: number): Promise<number> {
  const started = performance.now();
  for (;;) {
    try {
      const res = await fetch(url);
      await res.body?.cancel();
      if (res.ok) return performance.now() - started;
    } catch {
      // not listening yet
    }
    if (performance.now() - started > timeoutMs) {
      throw new Error(`${url} did not answer within ${timeoutMs} ms`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}

/**
 * Starts `deno <args>` in the repository root with extra environment variables; `output`
 * "null" discards stdout and stderr (benchmarks), "piped" lets the caller read them.
 */
export function spawnDeno(
  args: string[],
  env: Record<string, string> = {},
  output: "piped" | "null" = "piped",
): Deno.ChildProcess {
  return new Deno.Command(Deno.execPath(), {
    args,
    cwd: new URL("../..", import.meta.url).pathname,
    env: { NO_COLOR: "1", ...startEnv, ...env },
    stdin: "null",
    stdout: output,
    stderr: output,
  }).spawn();
}
