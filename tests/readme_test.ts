/** README.md stays true: its configuration table, its test command and its feature table. */
import assert from "node:assert/strict";
import { operations } from "../routes/mod.ts";
import { withConfigTable } from "../scripts/config_table.ts";

const root = new URL("..", import.meta.url);
const readme = Deno.readTextFileSync(new URL("README.md", root));

Deno.test("the configuration table matches config.ts (regenerate: deno run -A scripts/config_table.ts --write)", () => {
  assert.equal(withConfigTable(readme), readme);
});

Deno.test(".ci/run runs exactly the test command the README gives", () => {
  const ci = Deno.readTextFileSync(new URL(".ci/run", root));
  const command = "npx -y deno@2 task test";
  assert.ok(readme.includes("```sh\nnpx -y deno@2 task start"), "README shows the start command");
  assert.ok(readme.includes(command), "README shows the test command");
  const commands = ci.split("\n").filter((l) =>
    l.trim() && !l.startsWith("#") && !/^(set|cd) /.test(l)
  );
  assert.deepEqual(commands, [command]);
});

Deno.test("the feature table has a row for every REST group", () => {
  const table =
    readme.split("<!-- feature-table:start -->")[1].split("<!-- feature-table:end -->")[0];
  for (const group of new Set(operations.map((op) => op.group))) {
    assert.match(
      table,
      new RegExp(`\\| \`/${group.replace("/", "\\/")}\``),
      `no row for /${group}`,
    );
  }
});
