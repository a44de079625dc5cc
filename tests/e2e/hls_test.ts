/** The hls.js scenarios (hls_scenarios.ts) in a loopback-only network namespace. */
import { runInNetns } from "./netns.ts";

/** About 130 s on an idle machine: VOD over 30 s, two LL-HLS latency runs, an ABR switch. */
const hlsDeadlineSec = 450;

Deno.test("hls.js e2e in a loopback-only network namespace", async () => {
  await runInNetns("tests/e2e/hls_scenarios.ts", hlsDeadlineSec);
});
