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

Deno.test("each line carries the millisecond it was written, lines of one millisecond alike", async () => {
  const lines: string[] = [];
  const log = createLogger({ level: "info", write: (l) => lines.push(l) });
  const times: [number, number][] = [];
  for (let i = 0; i < 20; i++) {
    const before = Date.now();
    log.info("tick");
    times.push([before, Date.now()]);
    if (i % 5 === 0) await new Promise((r) => setTimeout(r, 3));
  }
  const written = lines.map((l) => JSON.parse(l).time as string);
  written.forEach((time, i) => {
    assert.match(time, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
    const ms = Date.parse(time);
    assert.ok(ms >= times[i][0] && ms <= times[i][1], `${time} outside its call`);
  });
  assert.ok(new Set(written).size > 1, "the time moves on");
});

Deno.test("a line is the JSON of {time, level, msg, ...base, ...fields}, whatever keys the fields take", () => {
  const base = { component: "rest", n: 1 };
  const cases: (Record<string, unknown> | undefined)[] = [
    undefined,
    {},
    { method: "POST", path: "/rest-api/stream/find_all", status: 200, ms: 0.12 },
    { path: 'quote " and \\ and \u2028 and é', ok: true, none: null, gone: undefined },
    { component: "override", extra: 1 }, // a base key keeps its place, with the new value
    { msg: "not the message", time: 0, level: "x" },
    { "7": "index keys go first", b: 2 },
    { nested: { a: [1, 2] }, when: new Date(0) },
    { toJSON: "a key like any other" },
  ];
  for (const fields of cases) {
    const lines: string[] = [];
    const log = createLogger({ level: "info", write: (l) => lines.push(l) }).child(base);
    log.info("request", fields);
    const time = JSON.parse(lines[0]).time;
    const expected = JSON.stringify({ time, level: "info", msg: "request", ...base, ...fields });
    assert.equal(lines[0], expected, JSON.stringify(fields));
  }
  const lines: string[] = [];
  const objectBase = { session: { id: "a" }, "3": "x" };
  createLogger({ level: "info", write: (l) => lines.push(l) }).child(objectBase).warn("w", {
    k: 1,
  });
  const time = JSON.parse(lines[0]).time;
  assert.equal(lines[0], JSON.stringify({ time, level: "warn", msg: "w", ...objectBase, k: 1 }));
});

/** Runs `code` (which may import `LOG`, this folder's log.ts) in a child with stdout piped. */
function logChild(code: string): Deno.ChildProcess {
  const logUrl = new URL("./log.ts", import.meta.url).href;
  return new Deno.Command(Deno.execPath(), {
    args: ["eval", code.replaceAll("LOG", logUrl)],
    stdin: "null",
    stdout: "piped",
    stderr: "null",
  }).spawn();
}

Deno.test("buffered stdout lines are all written when the process exits", async () => {
  const child = logChild(`
    import { createLogger } from "LOG";
    const log = createLogger({ level: "info" });
    for (let i = 0; i < 5000; i++) log.info("line", { i });
    Deno.exit(0);
  `);
  const out = new TextDecoder().decode((await child.output()).stdout).trimEnd().split("\n");
  assert.equal(out.length, 5000);
  assert.deepEqual(JSON.parse(out[4999]).i, 4999);
});

Deno.test("an error line is written at once, after the lines buffered before it", async () => {
  // The child never returns to its event loop after the error: only the error's own flush
  // can write the two lines.
  const child = logChild(`
    import { createLogger } from "LOG";
    const log = createLogger({ level: "info" });
    log.info("before");
    log.error("failed");
    while (true) {}
  `);
  const reader = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  let text = "";
  const timer = setTimeout(() => child.kill("SIGKILL"), 10_000);
  try {
    while (text.split("\n").length < 3) {
      const { value, done } = await reader.read();
      if (done) break;
      text += value;
    }
  } finally {
    clearTimeout(timer);
    child.kill("SIGKILL");
    await reader.cancel();
    await child.status;
  }
  assert.deepEqual(text.trimEnd().split("\n").map((l) => JSON.parse(l).msg), ["before", "failed"]);
});

Deno.test("a member writer's line is the line the ordinary method writes for the same fields", () => {
  const lines: string[] = [];
  const log = createLogger({ level: "info", write: (l) => lines.push(l) }).child({
    component: "rest",
  });
  const write = log.memberWriter("info", "request", ["method", "path", "status", "ms"]);
  assert.ok(write);
  const fields = { method: "POST", path: "/rest-api/stream/find_all", status: 200, ms: 0.12 };
  write(`"method":"POST","path":"/rest-api/stream/find_all","status":200,"ms":0.12`);
  log.info("request", fields);
  assert.equal(lines.length, 2);
  // The two lines may straddle a millisecond: compare them without their time.
  const withoutTime = (line: string) => line.replace(/^\{"time":"[^"]*"/, "");
  assert.equal(withoutTime(lines[0]), withoutTime(lines[1]));
  assert.deepEqual({ ...JSON.parse(lines[0]), time: 0 }, {
    time: 0,
    level: "info",
    msg: "request",
    component: "rest",
    ...fields,
  });
  // A key of the line or of the base, or a level that is off: no writer.
  assert.equal(log.memberWriter("info", "request", ["component"]), undefined);
  assert.equal(log.memberWriter("info", "request", ["time"]), undefined);
  assert.equal(log.memberWriter("debug", "request", ["method"]), undefined);
});
