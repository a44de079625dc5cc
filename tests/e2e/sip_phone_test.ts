/** The Web SDK phone scenarios (sip_phone_scenarios.ts) in a loopback-only network namespace. */
import { runInNetns } from "./netns.ts";

Deno.test("Web SDK phone e2e in a loopback-only network namespace", async () => {
  await runInNetns("tests/e2e/sip_phone_scenarios.ts");
});
