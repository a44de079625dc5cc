/**
 * The mixer played and auto-mixed with the Web SDK in Chromium (mixer_scenarios.ts) in a
 * loopback-only network namespace; the scenarios also need ffmpeg.
 */
import { runInNetns } from "./netns.ts";

Deno.test("mixer e2e with the Web SDK in a loopback-only network namespace", async () => {
  await runInNetns("tests/e2e/mixer_scenarios.ts");
});
