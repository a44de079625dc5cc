/**
 * The short fuzz pass CI runs (2,000 inputs per wire parser: no crash, no hang), and the
 * runner itself on targets that crash, hang and run slow on purpose.
 */
import assert from "node:assert/strict";
import { shortInputsPerTarget } from "./short.ts";
import { runFuzz, type TargetReport } from "./runner.ts";
import { targets } from "./targets.ts";

Deno.test("fuzz --short: every wire parser takes 2,000 mutated inputs without a crash or hang", async () => {
  const reports = await runFuzz({ inputsPerTarget: shortInputsPerTarget, seed: 1 });
  assert.deepEqual(reports.map((r) => r.name), targets.map((t) => t.name));
  for (const r of reports) {
    const found = [...r.crashes, ...r.hangs].map((f) => `${f.kind} ${f.index}: ${f.error}`);
    assert.deepEqual(found, [], r.name);
    assert.equal(r.inputs, shortInputsPerTarget, r.name);
    // Most inputs must get past the first check, or the mutations only test a magic number.
    assert.ok(r.rejected < 0.95 * r.inputs, `${r.name}: ${r.rejected} of ${r.inputs} refused`);
  }
});

/** Runs the runner on targets that crash, hang and run slow on purpose, and prints the reports. */
const runnerTargets = new URL("./testdata/run_runner_targets.ts", import.meta.url).pathname;

Deno.test("fuzz runner: crashes, hangs and slow inputs are found, saved and replayable", async () => {
  const findingsDir = await Deno.makeTempDir({ prefix: "fuzz-findings-" });
  try {
    // In a child process: the hanging target's Workers spin on after they are ended.
    const child = await new Deno.Command(Deno.execPath(), {
      args: ["run", "-A", runnerTargets, findingsDir],
      stdin: "null",
    }).output();
    const stderr = new TextDecoder().decode(child.stderr);
    assert.equal(child.code, 0, stderr);
    const reports: TargetReport[] = JSON.parse(new TextDecoder().decode(child.stdout));
    const [crashes, hangs, slow] = reports;
    assert.ok(crashes.crashes.length > 0);
    assert.equal(crashes.distinctCrashes, 1);
    assert.match(crashes.crashes[0].error, /TypeError: 0xff seen/);
    assert.ok(crashes.rejected > 0, "ParseErrors are refusals, not crashes");
    const saved = await Deno.readFile(crashes.crashes[0].file!);
    assert.ok(saved.includes(0xff), "the saved input is the one that crashed");
    assert.match(
      await Deno.readTextFile(crashes.crashes[0].file!.replace(/\.bin$/, ".txt")),
      /replay: deno task fuzz --target crashes --replay /,
    );

    assert.ok(hangs.hangs.length > 0, "an endless loop is a hang");
    assert.equal(hangs.inputs, 300, "the run goes on after a hang");
    assert.equal((await Deno.readFile(hangs.hangs[0].file!))[0], 0);

    assert.ok(slow.slow.length > 0);
    assert.ok(slow.slow.every((f) => f.ms > 50));
    assert.deepEqual([slow.crashes.length, slow.hangs.length], [0, 0]);
  } finally {
    await Deno.remove(findingsDir, { recursive: true });
  }
});
