/**
 * scripts/peers.sh, run by `deno task test` and `deno task bench` before anything starts:
 * nothing to do when every peer is there; otherwise (not root) it exits 1 naming the
 * programs and the Debian packages.
 */
import assert from "node:assert/strict";

const script = new URL("../scripts/peers.sh", import.meta.url).pathname;

/** Runs the script on a list with `lines`, as `user` (root when undefined). */
async function runPeers(lines: string[], user?: string) {
  const list = await Deno.makeTempFile({ suffix: ".txt" });
  try {
    await Deno.writeTextFile(list, lines.join("\n") + "\n");
    await Deno.chmod(list, 0o644);
    const command = user
      ? ["setpriv", "--reuid", user, "--regid", user, "--clear-groups", "bash", script, list]
      : ["bash", script, list];
    const out = await new Deno.Command(command[0], {
      args: command.slice(1),
      stdout: "piped",
      stderr: "piped",
    }).output();
    const decode = (b: Uint8Array) => new TextDecoder().decode(b);
    return { code: out.code, stdout: decode(out.stdout), stderr: decode(out.stderr) };
  } finally {
    await Deno.remove(list);
  }
}

Deno.test("peers.sh: a list of installed programs passes quietly", async () => {
  const result = await runPeers(["# comment", "bash bash", "- bash", ""]);
  assert.deepEqual(result, { code: 0, stdout: "", stderr: "" });
});

Deno.test("peers.sh: a missing program is named with its package, exit 1, when not root", async () => {
  const result = await runPeers(
    ["bash bash", "no-such-program-x1 no-such-package-x1", "- no-such-package-x2"],
    "65534",
  );
  assert.equal(result.code, 1);
  assert.match(
    result.stderr,
    /missing programs: no-such-program-x1 no-such-package-x2; install the Debian packages: no-such-package-x1 no-such-package-x2/,
  );
});
