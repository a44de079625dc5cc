/**
 * Runs webrtc_scenarios.ts (WebRTC publish/play with the real Web SDK in Chromium) inside a
 * network namespace that has only loopback, as websdk_test.ts does for the session suite.
 * Needs root, /usr/bin/chromium, unshare, ip and ffprobe.
 */
import assert from "node:assert/strict";
import { netnsEnv } from "./netns.ts";

const repoRoot = new URL("../..", import.meta.url).pathname;
const scenarios = "tests/e2e/webrtc_scenarios.ts";

Deno.test("WebRTC e2e with the Web SDK in a loopback-only network namespace", async () => {
  assert.equal(Deno.uid(), 0, "unshare -n needs root");
  // npm packages are fetched here: inside the namespace there is no route to any registry.
  const cached = await new Deno.Command(Deno.execPath(), {
    args: ["cache", scenarios],
    cwd: repoRoot,
  })
    .output();
  assert.equal(cached.code, 0, new TextDecoder().decode(cached.stderr));
  const inner = await new Deno.Command("unshare", {
    args: [
      "-n",
      "--",
      "sh",
      "-c",
      'ip link set lo up && exec "$0" test -A --no-check "$1"',
      Deno.execPath(),
      scenarios,
    ],
    cwd: repoRoot,
    env: { NO_COLOR: "1", [netnsEnv]: "1" },
    stdin: "null",
  }).output();
  const text = new TextDecoder().decode(inner.stdout) + new TextDecoder().decode(inner.stderr);
  assert.equal(inner.code, 0, `browser scenarios failed:\n${text}`);
  assert.match(text, /ok \| 1 passed \(\d+ steps\) \| 0 failed/, text);
  console.log(text.split("\n").filter((l) => /\.\.\. ok|\.\.\. FAILED/.test(l)).join("\n"));
});
