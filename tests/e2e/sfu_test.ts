/** The SFU SDK in Chromium (sfu_scenarios.ts) in a loopback-only network namespace. */
import { runInNetns } from "./netns.ts";

Deno.test("SFU SDK e2e in a loopback-only network namespace", async () => {
  await runInNetns("tests/e2e/sfu_scenarios.ts");
});
