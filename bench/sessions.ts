/**
 * Web SDK sessions: connect rate and memory per idle session for 5,000 concurrent sessions
 * (no backend, the default), the connect rate again with every connect going through the
 * `/connect` and `ConnectionStatusEvent` hooks, and sendData round trips per second through
 * the OnDataEvent hook. The server runs as its own process (`main.ts`) so its RSS and CPU are
 * its own; the backend runs in this process, which also holds the 5,000 client sockets.
 */
import { freePort, spawnDeno, waitForHttp } from "../tests/helpers/process.ts";
import { startHookBackend } from "../tests/helpers/hook_backend.ts";
import { WcsClient } from "../tests/helpers/wcs_client.ts";

const sessionCount = 5000;
/** Handshakes in flight at once while connecting. */
const connectConcurrency = 250;
/** Sessions sending data in the round-trip phase, each one request at a time. */
const dataSessions = 50;
const dataDurationMs = 5000;
const startTimeoutMs = 15_000;
/** Idle time before the memory reading, in ms, so the handshakes' garbage can be collected. */
const settleMs = 2000;
/** File descriptors needed: the client sockets plus headroom for the runtime. */
const neededFds = sessionCount + 200;

/** The soft limit of open files of this process (the server child inherits it). */
function openFileLimit(): number {
  const line = Deno.readTextFileSync("/proc/self/limits").split("\n")
    .find((l) => l.startsWith("Max open files"))!;
  const soft = line.split(/\s{2,}/)[1];
  return soft === "unlimited" ? Infinity : Number(soft);
}

/** CPU time (user + system) a process has used, in ms. */
function cpuMs(pid: number): number {
  const fields = Deno.readTextFileSync(`/proc/${pid}/stat`).split(") ")[1].split(" ");
  // utime and stime are fields 14 and 15 of stat, in clock ticks (100 per second on Linux).
  return (Number(fields[11]) + Number(fields[12])) * 10;
}

/** Resident memory of a process, in KiB. */
function rssKiB(pid: number): number {
  const line = Deno.readTextFileSync(`/proc/${pid}/status`).split("\n")
    .find((l) => l.startsWith("VmRSS:"))!;
  return Number(line.split(/\s+/)[1]);
}

async function connectAll(url: string, count: number): Promise<WcsClient[]> {
  const clients: WcsClient[] = [];
  let next = 0;
  await Promise.all(Array.from({ length: connectConcurrency }, async () => {
    while (next < count) {
      next++;
      clients.push((await WcsClient.connect(url)).client);
    }
  }));
  return clients;
}

const limit = openFileLimit();
if (limit < neededFds) {
  console.error(
    `open file limit ${limit} < ${neededFds}: raise it (e.g. \`ulimit -n ${neededFds * 2}\`)`,
  );
  Deno.exit(1);
}

/** A server process of `main.ts` with its own ports. */
interface ServerProcess {
  readonly pid: number;
  readonly wsUrl: string;
  readonly restUrl: string;
  stop(): Promise<void>;
}

async function startServerProcess(extraEnv: Record<string, string>): Promise<ServerProcess> {
  const env = Object.fromEntries(
    ["REST", "WS", "WSS", "HLS", "RTMP"].map((p) => [`MEDIASERVER_PORTS_${p}`, String(freePort())]),
  );
  // Per-session info lines would measure stdout, not sessions.
  const child = spawnDeno(["run", "-A", "main.ts"], {
    ...env,
    MEDIASERVER_LOG_LEVEL: "warn",
    // Every client here comes from 127.0.0.1: lift the per-address cap above the sessions.
    MEDIASERVER_LIMITS_CONNECTIONS_PER_ADDRESS: String(sessionCount + connectConcurrency),
    ...extraEnv,
  });
  const drained = Promise.all([
    child.stdout.pipeTo(new WritableStream()),
    child.stderr.pipeTo(new WritableStream()),
  ]);
  const restUrl = `http://127.0.0.1:${env.MEDIASERVER_PORTS_REST}`;
  const stop = async () => {
    child.kill("SIGTERM");
    await child.status;
    await drained;
  };
  try {
    await waitForHttp(`${restUrl}/health`, startTimeoutMs);
  } catch (err) {
    await stop();
    throw err;
  }
  return { pid: child.pid, wsUrl: `ws://127.0.0.1:${env.MEDIASERVER_PORTS_WS}`, restUrl, stop };
}

/** Connects `sessionCount` sessions; returns them, the wall time and both sides' CPU time. */
async function measureConnect(server: ServerProcess) {
  const serverCpu = cpuMs(server.pid);
  const clientCpu = cpuMs(Deno.pid);
  const started = performance.now();
  const clients = await connectAll(server.wsUrl, sessionCount);
  const wallMs = performance.now() - started;
  const listed = await (await fetch(`${server.restUrl}/rest-api/connection/find_all`)).json();
  if (listed.length !== sessionCount) throw new Error(`server lists ${listed.length} sessions`);
  return {
    clients,
    line: `${(sessionCount / (wallMs / 1000)).toFixed(0)} sessions/s (${sessionCount} in ${
      wallMs.toFixed(0)
    } ms, ${connectConcurrency} handshakes in flight; CPU per session: server ${
      ((cpuMs(server.pid) - serverCpu) / sessionCount * 1000).toFixed(0)
    } µs, this client ${((cpuMs(Deno.pid) - clientCpu) / sessionCount * 1000).toFixed(0)} µs)`,
  };
}

const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));

console.log(
  `Web SDK sessions (server in its own process, 127.0.0.1, log level warn; open file limit ${limit})`,
);

// Phase 1: no backend (the default configuration): connect rate and memory.
{
  const server = await startServerProcess({});
  let clients: WcsClient[] = [];
  try {
    const warm = await connectAll(server.wsUrl, 200);
    await Promise.all(warm.map((c) => c.close()));
    await pause(settleMs);
    const baseKiB = rssKiB(server.pid);
    const connect = await measureConnect(server);
    clients = connect.clients;
    await pause(settleMs);
    const loadedKiB = rssKiB(server.pid);
    console.log(`connect, no backend:            ${connect.line}`);
    console.log(
      `memory per idle session:        ${
        ((loadedKiB - baseKiB) / sessionCount).toFixed(1)
      } KiB (server RSS ${(baseKiB / 1024).toFixed(1)} MiB -> ${
        (loadedKiB / 1024).toFixed(1)
      } MiB with ${sessionCount} sessions)`,
    );
  } finally {
    await Promise.all(clients.map((c) => c.close()));
    await server.stop();
  }
}

// Phase 2: a backend on 127.0.0.1: connect through the hooks, then sendData round trips.
{
  const backend = await startHookBackend((call) => ({ status: 200, body: call.body }));
  const server = await startServerProcess({ MEDIASERVER_HOOKS_URL: backend.url });
  let clients: WcsClient[] = [];
  try {
    const warm = await connectAll(server.wsUrl, 200);
    await Promise.all(warm.map((c) => c.close()));
    const connect = await measureConnect(server);
    clients = connect.clients;
    console.log(`connect, /connect hook + event: ${connect.line}`);

    let roundTrips = 0;
    let failed = 0;
    const latenciesMs: number[] = [];
    const deadline = performance.now() + dataDurationMs;
    const started = performance.now();
    await Promise.all(
      clients.slice(0, dataSessions).map(async (client) => {
        while (performance.now() < deadline) {
          const t0 = performance.now();
          const status = await client.sendData({ n: roundTrips });
          latenciesMs.push(performance.now() - t0);
          if (status.status === "ACCEPTED") roundTrips++;
          else failed++;
        }
      }),
    );
    const seconds = (performance.now() - started) / 1000;
    latenciesMs.sort((a, b) => a - b);
    const pct = (p: number) => latenciesMs[Math.floor((latenciesMs.length - 1) * p)].toFixed(2);
    console.log(
      `sendData round trips:           ${
        (roundTrips / seconds).toFixed(0)
      } /s (sendData -> OnDataEvent hook -> DataStatusEvent; ${dataSessions} sessions, one in flight each, ${sessionCount} connected)   p50 ${
        pct(0.5)
      } ms   p99 ${pct(0.99)} ms   FAILED ${failed}`,
    );
  } finally {
    await Promise.all(clients.map((c) => c.close()));
    await server.stop();
    await backend.close();
  }
}
