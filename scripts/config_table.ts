/**
 * Prints the configuration reference of README.md from the schema, so the README cannot
 * drift from config.ts: `deno run scripts/config_table.ts --write` rewrites the table between
 * its markers, and tests/readme_test.ts fails when they differ.
 */
import { z } from "zod";
import { configSchema, envName } from "../config.ts";

type Node = {
  type?: string;
  properties?: Record<string, Node>;
  enum?: unknown[];
  anyOf?: Node[];
  default?: unknown;
  description?: string;
};

/** The markdown table of every configuration field. */
export function configTable(): string {
  const rows = [
    "| field | type | default | environment variable | what it is |",
    "|---|---|---|---|---|",
  ];
  const walk = (node: Node, path: string[]) => {
    if (node.type === "object" && node.properties) {
      for (const [key, child] of Object.entries(node.properties)) walk(child, [...path, key]);
      return;
    }
    const type = node.enum ? node.enum.join(" \\| ") : node.anyOf ? "IP address" : node.type;
    const value = node.default === undefined ? "unset" : "`" + JSON.stringify(node.default) + "`";
    rows.push(
      `| \`${path.join(".")}\` | ${type} | ${value} | \`${envName(path)}\` | ${
        node.description ?? ""
      } |`,
    );
  };
  const json = z.toJSONSchema(configSchema, { io: "input", unrepresentable: "any" }) as Node;
  walk(json, []);
  return rows.join("\n");
}

/** README.md with the table between `<!-- config-table:start -->` and `:end -->` replaced. */
export function withConfigTable(readme: string): string {
  return readme.replace(
    /(<!-- config-table:start -->\n)[\s\S]*?(<!-- config-table:end -->)/,
    `$1${configTable()}\n$2`,
  );
}

if (import.meta.main) {
  const path = new URL("../README.md", import.meta.url);
  const readme = Deno.readTextFileSync(path);
  if (Deno.args.includes("--write")) Deno.writeTextFileSync(path, withConfigTable(readme));
  else console.log(configTable());
}
