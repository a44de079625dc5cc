/** The CDN of three server processes on Redis (cdn_scenarios.ts) in a loopback-only namespace. */
import { runInNetns } from "./netns.ts";

Deno.test("CDN e2e: origin, edge and transcoder processes on Redis, the Web SDK in Chromium", async () => {
  await runInNetns("tests/e2e/cdn_scenarios.ts");
});
