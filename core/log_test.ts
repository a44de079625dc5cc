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

Deno.test("URIs in the message, string fields and errors lose their secrets", () => {
  const lines: string[] = [];
  const log = createLogger({ level: "info", write: (l) => lines.push(l) }).child({
    camera: "rtsp://u:hunter2@10.0.0.1/x?token=abc",
  });
  log.info("pull of rtsp://u:hunter2@10.0.0.1/x started", {
    uri: "rtmp://h/live/s?key=abc",
    err: new Error("camera rtsp://u:hunter2@10.0.0.1/x: refused"),
  });
  assert.equal(lines.length, 1);
  assert.ok(!lines[0].includes("hunter2") && !lines[0].includes("abc"), lines[0]);
  const line = JSON.parse(lines[0]);
  assert.equal(line.camera, "rtsp://u:***@10.0.0.1/x?token=***");
  assert.equal(line.uri, "rtmp://h/live/s?key=***");
  assert.equal(line.msg, "pull of rtsp://u:***@10.0.0.1/x started");
  assert.equal(line.err, "Error: camera rtsp://u:***@10.0.0.1/x: refused");
});
