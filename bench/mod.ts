/**
 * `deno task bench`: runs every benchmark of this folder in turn (each in its own process,
 * so one's load does not colour another's figures) and fails if one fails.
 */
const here = new URL(".", import.meta.url).pathname;
const files = [...Deno.readDirSync(here)]
  .filter((e) => e.isFile && e.name.endsWith(".ts") && e.name !== "mod.ts")
  .map((e) => e.name)
  .sort((a, b) => (a === "rest.ts" ? -1 : b === "rest.ts" ? 1 : a.localeCompare(b)));
const only = Deno.args;
let failed = 0;
for (const file of files) {
  if (only.length && !only.some((name) => file.startsWith(name))) continue;
  console.log(`\n== bench/${file}`);
  const status = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", `${here}${file}`],
    cwd: new URL("..", import.meta.url).pathname,
    stdout: "inherit",
    stderr: "inherit",
  }).spawn().status;
  if (!status.success) {
    console.log(`bench/${file} failed (exit ${status.code})`);
    failed++;
  }
}
if (failed) Deno.exit(1);
