import assert from "node:assert/strict";
import { createLogger } from "./log.ts";

Deno.test("log lines are JSON with level, message and fields, filtered by level", () => {
  const lines: string[] = [];
  const log = createLogger({ level: "info", write: (l) => lines.push(l) }).child({
    component: "t",
  });
  log.debug("hidden");
  log.info("shown", { n: 1 });
  log.error("failed", { err: new TypeError("boom") });
  assert.equal(lines.length, 2);
  const first = JSON.parse(lines[0]);
  assert.equal(first.level, "info");
  assert.equal(first.msg, "shown");
  assert.equal(first.component, "t");
  assert.equal(first.n, 1);
  assert.ok(!Number.isNaN(Date.parse(first.time)));
  assert.equal(JSON.parse(lines[1]).err, "TypeError: boom");
  assert.ok(log.enabled("warn"));
  assert.ok(!log.enabled("debug"));
});
