/**
 * The small-VM install files tell the truth: every `MEDIASERVER_*` variable the systemd unit
 * and the Dockerfile set or document is a real configuration field, the container runs as a
 * non-root user with the same permissions as `deno task start`, and the unit runs under a
 * dedicated user with a raised descriptor limit.
 */
import assert from "node:assert/strict";
import { configTable } from "../scripts/config_table.ts";
import { startEnv } from "./helpers/process.ts";

const root = new URL("../", import.meta.url);
const unit = Deno.readTextFileSync(new URL("scripts/mediaserver.service", root));
const dockerfile = Deno.readTextFileSync(new URL("Dockerfile", root));
const configVariables = new Set(configTable().match(/MEDIASERVER_[A-Z0-9_]+/g));

/** The value of `key=` lines of the unit's [Service] section (comments left out). */
function directives(key: string): string[] {
  return unit.split("\n").filter((l) => l.startsWith(`${key}=`)).map((l) =>
    l.slice(key.length + 1)
  );
}

Deno.test("install: the unit and the Dockerfile name only real configuration variables", () => {
  for (const [name, text] of [["mediaserver.service", unit], ["Dockerfile", dockerfile]]) {
    const used = new Set(text.match(/MEDIASERVER_[A-Z0-9_]+/g));
    for (const variable of used) {
      assert.ok(configVariables.has(variable), `${name}: ${variable} is no configuration field`);
    }
    for (const needed of ["MEDIASERVER_BIND", "MEDIASERVER_MEDIA_ANNOUNCED_ADDRESS"]) {
      assert.ok(used.has(needed), `${name} does not mention ${needed}`);
    }
  }
});

Deno.test("install: the unit runs as a dedicated user with many descriptors and the low RTSP port", () => {
  assert.deepEqual(directives("User"), ["mediaserver"]);
  assert.ok(Number(directives("LimitNOFILE")[0]) >= 65536);
  assert.deepEqual(directives("AmbientCapabilities"), ["CAP_NET_BIND_SERVICE"]);
  assert.deepEqual(directives("KillSignal"), ["SIGTERM"]);
  assert.ok(directives("Environment").includes("MEDIASERVER_BIND=0.0.0.0"));
});

Deno.test("install: the container runs as a non-root user with the start task's permissions", () => {
  const users = [...dockerfile.matchAll(/^USER (\S+)/gm)].map((m) => m[1]);
  assert.deepEqual(users, ["mediaserver"]);
  const cmd = /^CMD (\[[\s\S]*?\])\s*$/m.exec(dockerfile.replaceAll("\\\n", ""));
  assert.ok(cmd, "no CMD");
  const args = JSON.parse(cmd[1]) as string[];
  const flags = (args: string[]) =>
    args.filter((a) => a.startsWith("--allow-") || a.startsWith("--v8-flags=")).sort();
  const tasks = JSON.parse(Deno.readTextFileSync(new URL("deno.json", root))).tasks;
  const start = (tasks.start as string).split("&&").map((c) => c.trim()).at(-1)!.split(/\s+/);
  assert.deepEqual(flags(args), flags(start));
  assert.equal(args.at(-1), start.at(-1));
});

Deno.test("install: the unit and the container set the start task's environment", () => {
  assert.ok(Object.keys(startEnv).length > 0, "the start task sets no environment");
  const containerEnv = [...dockerfile.matchAll(/^ENV (.+)$/gm)].flatMap((m) => m[1].split(/\s+/));
  for (const [name, value] of Object.entries(startEnv)) {
    assert.ok(directives("Environment").includes(`${name}=${value}`), `unit: no ${name}=${value}`);
    assert.ok(containerEnv.includes(`${name}=${value}`), `Dockerfile: no ${name}=${value}`);
  }
});
