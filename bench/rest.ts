/**
 * REST throughput: /rest-api/stream/find_all of our server (default configuration, request
 * log on, stdout discarded) against a bare Deno.serve handler answering the same `[]`, both
 * driven by wrk on 127.0.0.1 in the same run. The ratio is ours over the runtime's limit.
 */
import { freePort, spawnDeno, waitForHttp } from "../tests/helpers/process.ts";
import { requireWrk, runWrk, type WrkResult } from "./support/wrk.ts";

const durationSeconds = 5;
const connections = 50;
const startTimeoutMs = 10_000;

async function measure(label: string, args: string[], url: string, health: string, env = {}) {
  const child = spawnDeno(args, env, "null");
  try {
    await waitForHttp(health, startTimeoutMs);
    await runWrk({ url, durationSeconds: 1, connections, method: "POST" }); // warm-up
    const result = await runWrk({ url, durationSeconds, connections, method: "POST" });
    return { label, result };
  } finally {
    child.kill("SIGTERM");
    await child.status;
  }
}

function line(label: string, r: WrkResult): string {
  return `${label.padEnd(34)} ${r.requestsPerSecond.toFixed(0).padStart(8)} req/s   p50 ${
    r.p50Ms.toFixed(2).padStart(6)
  } ms   p99 ${r.p99Ms.toFixed(2).padStart(6)} ms   errors ${r.errors}`;
}

await requireWrk();
const ourPort = freePort();
const env = Object.fromEntries(
  ["REST", "WS", "WSS", "HLS", "RTMP"].map((p) => [`MEDIASERVER_PORTS_${p}`, String(freePort())]),
);
env.MEDIASERVER_PORTS_REST = String(ourPort);
const ours = await measure(
  "ours  POST /rest-api/stream/find_all",
  ["run", "-A", "main.ts"],
  `http://127.0.0.1:${ourPort}/rest-api/stream/find_all`,
  `http://127.0.0.1:${ourPort}/health`,
  env,
);
const barePort = freePort();
const bare = await measure(
  "bare  Deno.serve -> []",
  ["run", "-A", "bench/support/bare_server.ts", String(barePort)],
  `http://127.0.0.1:${barePort}/`,
  `http://127.0.0.1:${barePort}/`,
);
console.log(
  `REST throughput (wrk -t1 -c${connections} -d${durationSeconds}s, 127.0.0.1, 0 streams)`,
);
console.log(line(ours.label, ours.result));
console.log(line(bare.label, bare.result));
console.log(
  `ratio ours/bare: ${
    (ours.result.requestsPerSecond / bare.result.requestsPerSecond).toFixed(2)
  } (throughput), ${(ours.result.p99Ms / bare.result.p99Ms).toFixed(2)} (p99 latency)`,
);
