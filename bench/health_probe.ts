/**
 * Times `/health` for the soak bench, as a process of its own: the bench's thousands of Web
 * SDK clients delayed the handling of each answer when the probe shared their process (on
 * its main thread by a few hundred ms; on a Worker thread still, since the bench's clients
 * run at a lower priority than the server and a Worker is a thread of their process), which
 * counted as the server's latency.
 *
 * Usage: `deno run --allow-net bench/health_probe.ts <url> <intervalMs>`, then on stdin one
 * command a line: `start` begins probing, `stop` ends it and prints one JSON line on stdout
 * (`{ ms: number[], slow: [sentAtSec, ms][], failures: number, engineRunning,
 * engineQueued }`); the end of stdin ends the process. Started once, before the bench lowers
 * its own priority, so it keeps the server's.
 */

/** Answers slower than this are listed with the time they were sent, in ms. */
const slowMs = 100;
/** Longest wait for one answer, in ms. */
const probeTimeoutMs = 5000;

/** What one probing run measured. */
export interface ProbeResult {
  ms: number[];
  slow: [number, number][];
  failures: number;
  engineRunning: number;
  engineQueued: number;
}

const [url, intervalArg] = Deno.args;
const intervalMs = Number(intervalArg);
if (!url || !(intervalMs > 0)) {
  console.error("usage: health_probe.ts <url> <intervalMs>");
  Deno.exit(2);
}

const client = Deno.createHttpClient({});
let probing: { state: { stop: boolean }; done: Promise<ProbeResult> } | undefined;

/** Probes every `intervalMs` until `state.stop`. */
async function probe(state: { stop: boolean }): Promise<ProbeResult> {
  const started = performance.now();
  const result: ProbeResult = { ms: [], slow: [], failures: 0, engineRunning: 0, engineQueued: 0 };
  while (!state.stop) {
    const sent = performance.now();
    try {
      const res = await fetch(url, { signal: AbortSignal.timeout(probeTimeoutMs), client });
      const body = await res.json();
      const tookMs = performance.now() - sent;
      result.ms.push(tookMs);
      if (tookMs > slowMs) result.slow.push([(sent - started) / 1000, tookMs]);
      result.engineRunning = Math.max(result.engineRunning, body.limits.engineJobs.running);
      result.engineQueued = Math.max(result.engineQueued, body.limits.engineJobs.queued);
    } catch {
      result.failures++;
    }
    await new Promise((r) => setTimeout(r, intervalMs));
  }
  return result;
}

const decoder = new TextDecoder();
let pending = "";
for await (const chunk of Deno.stdin.readable) {
  pending += decoder.decode(chunk, { stream: true });
  let newline: number;
  while ((newline = pending.indexOf("\n")) >= 0) {
    const command = pending.slice(0, newline).trim();
    pending = pending.slice(newline + 1);
    if (command === "start" && !probing) {
      const state = { stop: false };
      probing = { state, done: probe(state) };
    } else if (command === "stop" && probing) {
      probing.state.stop = true;
      console.log(JSON.stringify(await probing.done));
      probing = undefined;
    }
  }
}
if (probing) {
  probing.state.stop = true;
  await probing.done;
}
client.close();
