/**
 * The Web SDK's Room API against the built-in roomApp (room_app_scenarios.ts) in a
 * loopback-only network namespace.
 */
import { runInNetns } from "./netns.ts";

Deno.test("Room API e2e with the Web SDK in a loopback-only network namespace", async () => {
  await runInNetns("tests/e2e/room_app_scenarios.ts");
});
