import assert from "node:assert/strict";
import client from "prom-client";
import {
  CountingHistogram,
  EventLoopDelay,
  registerEventLoopDelay,
  sampleEventLoopDelay,
} from "./metrics.ts";

/** The same histogram twice: ours and prom-client's, each in its own registry. */
function pair() {
  const config = {
    name: "t_duration_seconds",
    help: "Durations.",
    labelNames: ["group", "status"] as const,
    buckets: [0.001, 0.01, 0.1, 1],
  };
  const oursRegistry = new client.Registry();
  const theirsRegistry = new client.Registry();
  const ours = new CountingHistogram({ ...config, registers: [oursRegistry] });
  const theirs = new client.Histogram({ ...config, registers: [theirsRegistry] });
  return { ours, theirs, oursRegistry, theirsRegistry };
}

Deno.test("CountingHistogram: the registry's text and JSON are prom-client's for the same observations", async () => {
  const { ours, theirs, oursRegistry, theirsRegistry } = pair();
  assert.equal(await oursRegistry.metrics(), await theirsRegistry.metrics(), "empty");
  const observations: [string, string, number][] = [
    ["stream", "200", 0.0002],
    ["stream", "200", 0.001], // on a bound: that bucket
    ["none", "404", 0.05],
    ["stream", "200", 3], // above every bound: +Inf only
    ["stream", "500", 0.1],
    ["none", "404", 0.0105],
  ];
  for (const [group, status, seconds] of observations) {
    ours.series({ group, status }).observe(seconds);
    theirs.labels({ group, status }).observe(seconds);
  }
  const text = await oursRegistry.metrics();
  assert.equal(text, await theirsRegistry.metrics());
  assert.match(text, /t_duration_seconds_bucket\{le="0.001",group="stream",status="200"\} 2/);
  assert.match(text, /t_duration_seconds_bucket\{le="\+Inf",group="stream",status="200"\} 3/);
  assert.deepEqual(await oursRegistry.getMetricsAsJSON(), await theirsRegistry.getMetricsAsJSON());
});

Deno.test("CountingHistogram: a reset hides every series until it is observed again; bad input throws", async () => {
  const { ours, theirs, oursRegistry, theirsRegistry } = pair();
  const a = ours.series({ group: "a", status: "200" });
  const b = ours.series({ group: "b", status: "200" });
  a.observe(0.5);
  b.observe(0.002);
  theirs.labels({ group: "a", status: "200" }).observe(0.5);
  theirs.labels({ group: "b", status: "200" }).observe(0.002);
  ours.reset();
  theirs.reset();
  b.observe(0.02);
  theirs.labels({ group: "b", status: "200" }).observe(0.02);
  const text = await oursRegistry.metrics();
  assert.equal(text, await theirsRegistry.metrics());
  assert.doesNotMatch(text, /group="a"/);
  assert.throws(() => a.observe(NaN), TypeError);
  assert.throws(() => ours.series({ group: "a" } as never), /labels must be group, status/);
});

Deno.test("EventLoopDelay: min, max, mean, stddev exact; percentiles within a bucket (19%) and never above the max; reset forgets", () => {
  const delay = new EventLoopDelay();
  assert.deepEqual([delay.count, delay.minMs, delay.maxMs, delay.percentileMs(99)], [0, 0, 0, 0]);
  const delaysMs = [...Array(98).fill(1), 40, 2000];
  for (const ms of delaysMs) delay.record(ms);
  delay.record(-3); // a timer early by clock jitter counts as on time
  assert.equal(delay.count, 101);
  assert.equal(delay.minMs, 0);
  assert.equal(delay.maxMs, 2000);
  assert.equal(delay.lastMs, 0);
  const mean = (98 + 40 + 2000) / 101;
  assert.ok(Math.abs(delay.meanMs - mean) < 1e-9);
  const variance = (98 + 1600 + 4_000_000) / 101 - mean * mean;
  assert.ok(Math.abs(delay.stddevMs - Math.sqrt(variance)) < 1e-6);
  for (const [percent, ms] of [[50, 1], [90, 1], [99, 40]]) {
    const got = delay.percentileMs(percent);
    assert.ok(got >= ms && got <= ms * 2 ** 0.25, `p${percent}: ${got} for ${ms}`);
  }
  assert.equal(delay.percentileMs(100), 2000);
  delay.reset();
  assert.deepEqual([delay.count, delay.maxMs, delay.meanMs, delay.percentileMs(50)], [0, 0, 0, 0]);
});

Deno.test("event-loop metrics: a stalled loop shows in the nodejs_eventloop_lag gauges, which reset after each scrape", async () => {
  const registry = new client.Registry();
  const delay = new EventLoopDelay();
  registerEventLoopDelay(registry, delay);
  const stop = sampleEventLoopDelay(delay, 5);
  try {
    await new Promise((r) => setTimeout(r, 50));
    const stalled = performance.now();
    while (performance.now() - stalled < 120) {
      // The loop is busy: the sampler's next tick is late by about this long.
    }
    await new Promise((r) => setTimeout(r, 30));
    const text = await registry.metrics();
    const value = (name: string) =>
      Number(text.match(new RegExp(`^nodejs_eventloop_lag_${name}_seconds (\\S+)$`, "m"))?.[1]);
    assert.ok(value("max") >= 0.1, text);
    assert.ok(value("p50") < 0.05, text);
    assert.ok(value("min") <= value("mean") && value("mean") <= value("max"), text);
    assert.match(text, /^nodejs_eventloop_lag_seconds \d/m);
    const next = await registry.metrics();
    assert.ok(
      Number(next.match(/^nodejs_eventloop_lag_max_seconds (\S+)$/m)?.[1]) < 0.1,
      "reset after the scrape",
    );
  } finally {
    stop();
  }
});

Deno.test("process metrics: event-loop stalls leave no block of native memory behind (the native delay histogram prom-client's defaults started)", async () => {
  // A process of its own, which imports the metrics, scrapes them, and stalls its event loop
  // 0.1, 0.5 and 2 s, scraping after each, as Prometheus would. With prom-client's defaults
  // as they were, Deno's native monitorEventLoopDelay() histogram then took a block of
  // 6-8 MiB there (16 MiB in the server after the soak bench's load) and kept it. Counted: resident KiB of anonymous
  // read-write mappings of 3-64 MiB, less the threads' stacks (8 MiB each).
  const code = `
    const { processRegistry } = await import(${
    JSON.stringify(new URL("./metrics.ts", import.meta.url).href)
  });
    const blocksKiB = () => {
      let kib = 0, size = 0, anon = false;
      for (const line of Deno.readTextFileSync("/proc/self/smaps").split("\\n")) {
        const range = line.match(/^([0-9a-f]+)-([0-9a-f]+) rw-p 00000000 00:00 0\\s*$/);
        if (range) { size = (parseInt(range[2], 16) - parseInt(range[1], 16)) / 1024; anon = true; continue; }
        if (/^[0-9a-f]+-[0-9a-f]+ /.test(line)) { anon = false; continue; }
        const rss = line.match(/^Rss:\\s+(\\d+) kB/);
        if (rss && anon && size >= 3072 && size <= 65536 && size !== 8192) kib += Number(rss[1]);
      }
      return kib;
    };
    await processRegistry.metrics();
    await new Promise((r) => setTimeout(r, 200));
    const before = blocksKiB();
    const maxima = [];
    for (const ms of [100, 500, 2000]) {
      const t = performance.now();
      while (performance.now() - t < ms) {}
      await new Promise((r) => setTimeout(r, 50));
      const text = await processRegistry.metrics();
      maxima.push(Number(text.match(/^nodejs_eventloop_lag_max_seconds (\\S+)$/m)[1]));
    }
    console.log(JSON.stringify({ before, after: blocksKiB(), maxima }));
  `;
  // A file run as the server is (`deno run`, the project's config): under `deno eval` the
  // native histogram did not take its block.
  const script = await Deno.makeTempFile({ suffix: ".ts" });
  await Deno.writeTextFile(script, code);
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", `--config=${new URL("../deno.json", import.meta.url).pathname}`, script],
    cwd: new URL("..", import.meta.url).pathname,
    stdout: "piped",
    stderr: "piped",
  }).output().finally(() => Deno.remove(script));
  assert.ok(out.success, new TextDecoder().decode(out.stderr));
  const { before, after, maxima } = JSON.parse(new TextDecoder().decode(out.stdout));
  assert.ok(after - before < 2048, `blocks of native memory: ${before} -> ${after} KiB`);
  // Each scrape shows the stall before it (the native histogram showed 0.01 s for 2 s).
  const stallsS = [0.1, 0.5, 2];
  assert.ok(
    maxima.every((s: number, i: number) => s >= stallsS[i] * 0.9),
    `maxima ${maxima} s; blocks ${before} -> ${after} KiB`,
  );
});
