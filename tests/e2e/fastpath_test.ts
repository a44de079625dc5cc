/**
 * The WebRTC fan-out fast path (send engine, and werift's path) with the real Web SDK in
 * Chromium (fastpath_scenarios.ts) in a loopback-only network namespace; the injected loss
 * needs `nft` (Debian package nftables).
 */
import { runInNetns } from "./netns.ts";

Deno.test("WebRTC fast path e2e with the Web SDK in a loopback-only network namespace", async () => {
  await runInNetns("tests/e2e/fastpath_scenarios.ts");
});
