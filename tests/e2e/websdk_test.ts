/** The Web SDK session scenarios (websdk_scenarios.ts) in a loopback-only network namespace. */
import { runInNetns } from "./netns.ts";

Deno.test("Web SDK e2e in a loopback-only network namespace", async () => {
  await runInNetns("tests/e2e/websdk_scenarios.ts");
});
