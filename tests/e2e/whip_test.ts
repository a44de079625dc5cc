/** WHIP/WHEP with real clients (whip_scenarios.ts) in a loopback-only network namespace. */
import { runInNetns } from "./netns.ts";

Deno.test("WHIP/WHEP e2e with Chromium, the Web SDK and aiortc in a loopback-only namespace", async () => {
  await runInNetns("tests/e2e/whip_scenarios.ts");
});
