/** The Web SDK session resumption scenarios (resume_scenarios.ts) in a loopback-only netns. */
import { runInNetns } from "./netns.ts";

Deno.test("Web SDK session resumption e2e in a loopback-only network namespace", async () => {
  await runInNetns("tests/e2e/resume_scenarios.ts");
});
