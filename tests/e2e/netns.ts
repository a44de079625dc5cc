/**
 * Runs a browser scenario file inside a network namespace that has only loopback, so neither
 * the server nor Chromium (nor the peers a scenario starts) can reach or leak to any other
 * interface. Needs root, /usr/bin/chromium, unshare and ip; a missing one fails the test by
 * name (scripts/test.sh installs them from scripts/peers.txt as root on Debian).
 */
import assert from "node:assert/strict";

/** Environment variable set for scenarios run inside the namespace. */
export const netnsEnv = "MEDIASERVER_E2E_NETNS";

/** Chromium flags of shared/peers/README.md §6: no traffic off loopback, fake media. */
export const chromiumArgs = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
  "--use-fake-device-for-media-stream",
  "--use-fake-ui-for-media-stream",
  "--allow-loopback-in-peer-connection",
  "--autoplay-policy=no-user-gesture-required",
  "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE localhost , EXCLUDE 127.0.0.1",
  "--disable-features=WebRtcHideLocalIpsWithMdns,MediaRouter,OptimizationHints,Translate",
];

const repoRoot = new URL("../..", import.meta.url).pathname;

function onPath(command: string): boolean {
  const dirs = (Deno.env.get("PATH") ?? "").split(":").concat(["/usr/sbin", "/sbin"]);
  return dirs.some((dir) => {
    try {
      return Deno.statSync(`${dir}/${command}`).isFile;
    } catch {
      return false;
    }
  });
}

/** What the run needs that this machine lacks, named so the failure says what to install. */
function missingPrerequisites(): string[] {
  const missing: string[] = [];
  if (Deno.uid() !== 0) missing.push("root (unshare -n needs it)");
  try {
    Deno.statSync("/usr/bin/chromium");
  } catch {
    missing.push("/usr/bin/chromium (Debian package chromium)");
  }
  if (!onPath("unshare")) missing.push("unshare (Debian package util-linux)");
  if (!onPath("ip")) missing.push("ip (Debian package iproute2)");
  return missing;
}

async function run(args: string[], env: Record<string, string> = {}) {
  const out = await new Deno.Command(args[0], {
    args: args.slice(1),
    cwd: repoRoot,
    env: { NO_COLOR: "1", ...env },
    stdin: "null",
  }).output();
  const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
  return { code: out.code, text };
}

/**
 * How long one scenario file may run in the namespace, in seconds: about twice the longest
 * but one (WebRTC, about 80 s idle); hls.js (about 130 s) passes its own. A page or server that
 * never answers then costs this much, not the whole CI's limit.
 */
export const scenarioDeadlineSec = 300;

/** How long fetching a scenario file's packages may take, in seconds. */
const cacheDeadlineSec = 300;

/** What one run of a scenario file in the namespace printed, and how it ended. */
interface ScenarioRun {
  code: number;
  text: string;
  /** Killed at its deadline, or a page call never settled: a stall, not a wrong answer. */
  stalled: boolean;
}

async function runScenariosOnce(scenarios: string, deadlineSec: number): Promise<ScenarioRun> {
  const { code, text } = await run([
    "timeout",
    "-k",
    "10",
    String(deadlineSec),
    // A PID namespace too: Chromium puts itself in a process group of its own, so only the
    // end of the namespace's first process (killed with unshare) is sure to end it.
    "unshare",
    "-n",
    "-p",
    "--mount-proc",
    "--kill-child",
    "--",
    "sh",
    "-c",
    // Types are checked by `deno check`; the namespace run only executes.
    'ip link set lo up && "$0" test -A --no-check "$1"',
    Deno.execPath(),
    scenarios,
  ], { [netnsEnv]: "1", PATH: Deno.env.get("PATH") ?? "/usr/bin:/bin" });
  const killed = code === 124 || code === 137;
  return { code, text, stalled: killed || (code !== 0 && /unsettled after \d+ ms/.test(text)) };
}

/**
 * Runs `scenarios` (a test file of one test with steps, path from the repository root) with
 * `deno test` inside the namespace and asserts it passed; prints its step lines. Past
 * `deadlineSec` every process of the run is killed. A run that stalled (killed, or a page call
 * that never settled) is printed whole and run once more, so a hang's place is on record while
 * one stall of Chromium does not fail the suite; a wrong answer fails at once.
 */
export async function runInNetns(
  scenarios: string,
  deadlineSec = scenarioDeadlineSec,
): Promise<void> {
  const missing = missingPrerequisites();
  assert.deepEqual(missing, [], `cannot run the browser suite, missing: ${missing.join(", ")}`);
  // npm packages are fetched here: inside the namespace there is no route to any registry. A
  // registry that stops answering must not hold the run either.
  const cached = await run([
    "timeout",
    String(cacheDeadlineSec),
    Deno.execPath(),
    "cache",
    scenarios,
  ]);
  assert.equal(cached.code, 0, `deno cache ${scenarios} failed:\n${cached.text}`);
  let inner = await runScenariosOnce(scenarios, deadlineSec);
  if (inner.stalled) {
    console.log(`warning: ${scenarios} stalled (exit ${inner.code}); its output:\n${inner.text}`);
    inner = await runScenariosOnce(scenarios, deadlineSec);
  }
  assert.ok(
    !inner.stalled,
    `browser scenarios stalled twice (exit ${inner.code}, deadline ${deadlineSec} s):\n${inner.text}`,
  );
  assert.equal(inner.code, 0, `browser scenarios failed:\n${inner.text}`);
  assert.match(inner.text, /ok \| 1 passed \(\d+ steps\) \| 0 failed/, inner.text);
  console.log(
    // Step results, and the figures scenarios print as `bench:` lines.
    inner.text.split("\n").filter((l) => /\.\.\. ok|\.\.\. FAILED|^\s*bench:/.test(l)).join("\n"),
  );
}

/**
 * Re-runs `deno run -A <script> <args>` (path from the repository root) inside the namespace, its
 * output shown as it comes, for programs (benchmarks) that drive Chromium; returns its exit
 * code. Without root it fails naming what is missing, like `runInNetns`.
 */
export async function runScriptInNetns(script: string, args: string[] = []): Promise<number> {
  const missing = missingPrerequisites();
  if (missing.length > 0) throw new Error(`cannot run ${script}, missing: ${missing.join(", ")}`);
  const cached = await run([Deno.execPath(), "cache", script]);
  if (cached.code !== 0) throw new Error(`deno cache ${script} failed:\n${cached.text}`);
  const { code } = await new Deno.Command("unshare", {
    args: [
      "-n",
      "--",
      "sh",
      "-c",
      'ip link set lo up && exec "$0" run -A "$@"',
      Deno.execPath(),
      script,
      ...args,
    ],
    cwd: repoRoot,
    env: { [netnsEnv]: "1", PATH: Deno.env.get("PATH") ?? "/usr/bin:/bin" },
    stdin: "null",
    stdout: "inherit",
    stderr: "inherit",
  }).spawn().status;
  return code;
}
