/**
 * Runs the misbehaving targets of runner_targets.ts for the runner's own test, in a process of
 * its own: a Worker spinning in an endless loop is not stopped by `terminate()` (its thread
 * keeps a core busy until the process ends), so the test process must not own it. Prints the
 * reports as JSON and exits, which ends every thread. Argument: the findings folder.
 */
import { runFuzz } from "../runner.ts";

const [findingsDir] = Deno.args;
const reports = await runFuzz({
  inputsPerTarget: 300,
  seed: 3,
  hangMs: 300,
  findingsDir,
  targetsModule: new URL("./runner_targets.ts", import.meta.url).href,
});
console.log(JSON.stringify(reports));
Deno.exit(0);
