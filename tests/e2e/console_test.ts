/** The web console with Chromium (console_scenarios.ts) in a loopback-only namespace. */
import { runInNetns } from "./netns.ts";

Deno.test("web console e2e with Chromium in a loopback-only namespace", async () => {
  await runInNetns("tests/e2e/console_scenarios.ts");
});
