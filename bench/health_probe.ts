/**
 * A Worker that times `/health` on its own thread for the soak bench: the bench's main thread
 * runs thousands of Web SDK clients, whose work delayed the handling of each answer there and
 * added up to a few hundred ms to what was measured as the server's latency.
 *
 * Message in: `{ url, intervalMs }` starts probing, `"stop"` ends it; message out when
 * stopped: `{ ms: number[], slow: [sentAtSec, ms][], failures: number, engineRunning,
 * engineQueued }`.
 */
/// <reference lib="deno.worker" />

/** Answers slower than this are listed with the time they were sent, in ms. */
const slowMs = 100;
/** Longest wait for one answer, in ms. */
const probeTimeoutMs = 5000;

let stopping = false;
self.onmessage = async (e: MessageEvent<{ url: string; intervalMs: number } | "stop">) => {
  if (e.data === "stop") {
    stopping = true;
    return;
  }
  const { url, intervalMs } = e.data;
  const client = Deno.createHttpClient({});
  const started = performance.now();
  const ms: number[] = [];
  const slow: [number, number][] = [];
  let failures = 0;
  let engineRunning = 0;
  let engineQueued = 0;
  while (!stopping) {
    const sent = performance.now();
    try {
      const res = await fetch(url, { signal: AbortSignal.timeout(probeTimeoutMs), client });
      const body = await res.json();
      const tookMs = performance.now() - sent;
      ms.push(tookMs);
      if (tookMs > slowMs) slow.push([(sent - started) / 1000, tookMs]);
      engineRunning = Math.max(engineRunning, body.limits.engineJobs.running);
      engineQueued = Math.max(engineQueued, body.limits.engineJobs.queued);
    } catch {
      failures++;
    }
    await new Promise((r) => setTimeout(r, intervalMs));
  }
  client.close();
  self.postMessage({ ms, slow, failures, engineRunning, engineQueued });
};
