/** The hls.js scenarios (hls_scenarios.ts) in a loopback-only network namespace. */
import { runInNetns } from "./netns.ts";

Deno.test("hls.js e2e in a loopback-only network namespace", async () => {
  await runInNetns("tests/e2e/hls_scenarios.ts");
});
