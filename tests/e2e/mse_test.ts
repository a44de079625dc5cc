/**
 * The Web SDK's MSE player in Chromium (mse_scenarios.ts) in a loopback-only network
 * namespace; the scenarios also need ffmpeg.
 */
import { runInNetns } from "./netns.ts";

Deno.test("Web SDK MSE e2e in a loopback-only network namespace", async () => {
  await runInNetns("tests/e2e/mse_scenarios.ts");
});
