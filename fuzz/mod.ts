/**
 * `deno task fuzz`: every wire parser on mutated inputs of its seed corpus (fuzz/corpus/),
 * reporting crashes (an error other than ParseError), hangs (> 1 s) and slow inputs
 * (> 50 ms), their inputs saved under fuzz/findings/. Exits 1 on a crash or a hang.
 *
 *   deno task fuzz                       1,000,000 inputs in all, split over the targets
 *   deno task fuzz --short               2,000 inputs per target (what CI runs)
 *   deno task fuzz --inputs 200000 --target mp4,flv --seed 7
 *   deno task fuzz --target mp4 --replay fuzz/findings/mp4/crash-1-123.bin
 */
import { parseArgs } from "node:util";
import { isTypedError, targets } from "./targets.ts";
import { runFuzz } from "./runner.ts";
import { defaultTotalInputs, shortInputsPerTarget } from "./short.ts";

const { values } = parseArgs({
  args: Deno.args,
  options: {
    short: { type: "boolean", default: false },
    inputs: { type: "string" },
    target: { type: "string" },
    seed: { type: "string", default: "1" },
    replay: { type: "string" },
  },
});
const only = values.target?.split(",").map((s) => s.trim()).filter(Boolean);
for (const name of only ?? []) {
  if (!targets.some((t) => t.name === name)) {
    console.error(`unknown target ${name}; targets: ${targets.map((t) => t.name).join(", ")}`);
    Deno.exit(2);
  }
}

if (values.replay) {
  const target = targets.find((t) => t.name === only?.[0]);
  if (!target || only?.length !== 1) {
    console.error("--replay needs one --target");
    Deno.exit(2);
  }
  const input = await Deno.readFile(values.replay);
  const t0 = performance.now();
  try {
    await target.run(input);
    console.log(`${target.name}: accepted in ${(performance.now() - t0).toFixed(1)} ms`);
  } catch (err) {
    const ms = (performance.now() - t0).toFixed(1);
    console.log(`${target.name}: ${isTypedError(target, err) ? "refused" : "CRASH"} in ${ms} ms`);
    console.log(err);
    if (!isTypedError(target, err)) Deno.exit(1);
  }
  Deno.exit(0);
}

const count = only?.length ?? targets.length;
const inputsPerTarget = values.short
  ? shortInputsPerTarget
  : Math.ceil(Number(values.inputs ?? defaultTotalInputs) / count);
const seed = Number(values.seed);
const findingsDir = new URL("./findings", import.meta.url).pathname;
console.log(`fuzz: ${inputsPerTarget} inputs per target, seed ${seed}, findings in ${findingsDir}`);
const started = performance.now();
const reports = await runFuzz({
  inputsPerTarget,
  seed,
  only,
  findingsDir,
  log: (line) => console.log(line),
});
console.log("target          inputs  refused   secs  inputs/s  crashes (distinct)  hangs  slow");
for (const r of reports) {
  console.log(
    `${r.name.padEnd(14)} ${String(r.inputs).padStart(7)} ${
      ((r.rejected / Math.max(1, r.inputs)) * 100).toFixed(0).padStart(7)
    }% ${(r.ms / 1000).toFixed(1).padStart(6)} ${
      String(Math.round(r.inputs / (r.ms / 1000))).padStart(9)
    } ${String(r.crashes.length).padStart(8)} (${r.distinctCrashes}) ${
      String(r.hangs.length).padStart(10)
    } ${String(r.slow.length).padStart(5)}`,
  );
}
const total = reports.reduce((n, r) => n + r.inputs, 0);
const crashes = reports.reduce((n, r) => n + r.crashes.length, 0);
const hangs = reports.reduce((n, r) => n + r.hangs.length, 0);
const slow = reports.reduce((n, r) => n + r.slow.length, 0);
console.log(
  `${total} inputs in ${((performance.now() - started) / 1000).toFixed(0)} s: ` +
    `${crashes} crashes, ${hangs} hangs, ${slow} slow inputs`,
);
if (crashes > 0 || hangs > 0) Deno.exit(1);
