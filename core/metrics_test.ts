import assert from "node:assert/strict";
import client from "prom-client";
import { CountingHistogram } from "./metrics.ts";

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
