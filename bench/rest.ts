/**
 * REST throughput: /rest-api/stream/find_all of our server (default configuration, request
 * log on, stdout discarded) against a bare Deno.serve handler reading the same JSON body and
 * answering the same `[]`, both driven by wrk on 127.0.0.1 in the same run, in alternating
 * runs. The ratio is ours over the runtime's limit.
 */
import { freePort, spawnDeno, waitForHttp } from "../tests/helpers/process.ts";
import { requireWrk, runWrk, type WrkResult } from "./support/wrk.ts";

const durationSeconds = 3;
/** Alternating runs of each server; the median is reported, so a burst of load elsewhere on the machine colours one run, not the ratio. */
const rounds = 5;
const connections = 50;
const startTimeoutMs = 10_000;

interface Target {
  label: string;
  url: string;
  child: Deno.ChildProcess;
  results: WrkResult[];
  /** Server CPU time per answered request of each run, in µs. */
  cpuUs: number[];
}

const clockTicksPerSecond = 100;

/** CPU seconds (user and system) the process has used so far. */
function cpuSeconds(pid: number): number {
  const stat = Deno.readTextFileSync(`/proc/${pid}/stat`);
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return (Number(fields[11]) + Number(fields[12])) / clockTicksPerSecond;
}

async function start(
  label: string,
  args: string[],
  url: string,
  health: string,
  env = {},
): Promise<Target> {
  const child = spawnDeno(args, env, "null");
  await waitForHttp(health, startTimeoutMs);
  await runWrk({ url, durationSeconds: 1, connections, method: "POST" }); // warm-up
  return { label, url, child, results: [], cpuUs: [] };
}

function medianOf(values: number[]): number {
  const sorted = values.toSorted((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)];
}

function median(r: WrkResult[], key: "requestsPerSecond" | "p50Ms" | "p99Ms"): number {
  return medianOf(r.map((x) => x[key]));
}

function line(t: Target): string {
  const errors = t.results.reduce((sum, r) => sum + r.errors, 0);
  return `${t.label.padEnd(38)} ${
    median(t.results, "requestsPerSecond").toFixed(0).padStart(8)
  } req/s   p50 ${median(t.results, "p50Ms").toFixed(2).padStart(6)} ms   p99 ${
    median(t.results, "p99Ms").toFixed(2).padStart(6)
  } ms   CPU ${medianOf(t.cpuUs).toFixed(1).padStart(5)} µs/req   errors ${errors}`;
}

await requireWrk();
const ourPort = freePort();
const env = Object.fromEntries(
  ["REST", "WS", "WSS", "HLS", "RTMP", "RTSP", "SRT", "SIP", "CDN"].map((
    p,
  ) => [`MEDIASERVER_PORTS_${p}`, String(freePort())]),
);
env.MEDIASERVER_PORTS_REST = String(ourPort);
const barePort = freePort();
const targets = [
  await start(
    "ours  POST /rest-api/stream/find_all",
    ["run", "-A", "main.ts"],
    `http://127.0.0.1:${ourPort}/rest-api/stream/find_all`,
    `http://127.0.0.1:${ourPort}/health`,
    env,
  ),
  await start(
    "bare  Deno.serve: JSON body -> []",
    ["run", "-A", "bench/support/bare_server.ts", String(barePort)],
    `http://127.0.0.1:${barePort}/`,
    `http://127.0.0.1:${barePort}/`,
  ),
];
try {
  for (let i = 0; i < rounds; i++) {
    for (const t of targets) {
      const before = cpuSeconds(t.child.pid);
      const result = await runWrk({ url: t.url, durationSeconds, connections, method: "POST" });
      const requests = result.requestsPerSecond * durationSeconds;
      t.cpuUs.push((cpuSeconds(t.child.pid) - before) / requests * 1e6);
      t.results.push(result);
    }
  }
} finally {
  for (const t of targets) {
    t.child.kill("SIGTERM");
    await t.child.status;
  }
}
const [ours, bare] = targets;
console.log(
  `REST throughput (wrk -t1 -c${connections}, ${rounds} alternating runs of ${durationSeconds}s each, medians; 127.0.0.1, 0 streams)`,
);
console.log(line(ours));
console.log(line(bare));
const ratios = ours.results.map((r, i) => r.requestsPerSecond / bare.results[i].requestsPerSecond)
  .sort((a, b) => a - b);
console.log(
  `ratio ours/bare: ${
    (median(ours.results, "requestsPerSecond") / median(bare.results, "requestsPerSecond"))
      .toFixed(2)
  } (throughput; per round ${ratios.map((r) => r.toFixed(2)).join(" ")}), ${
    (median(ours.results, "p99Ms") / median(bare.results, "p99Ms")).toFixed(2)
  } (p99 latency), ${
    (medianOf(bare.cpuUs) / medianOf(ours.cpuUs)).toFixed(2)
  } (CPU per request, bare/ours)`,
);
