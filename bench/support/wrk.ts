/** Runs wrk against a URL and reads its throughput and latency percentiles. */

/** What one wrk run measured. */
export interface WrkResult {
  requestsPerSecond: number;
  /** Latency percentiles, in ms. */
  p50Ms: number;
  p99Ms: number;
  /** Non-2xx/3xx answers and socket errors. */
  errors: number;
  /** Response bytes read per second. */
  bytesPerSecond: number;
}

/** Options of runWrk. */
export interface WrkOptions {
  url: string;
  /** Length of the run, in seconds. */
  durationSeconds: number;
  /** Open connections. */
  connections: number;
  /** HTTP method; POST sends an empty JSON object. */
  method: "GET" | "POST";
  /** A wrk Lua script to use instead of the method's (it chooses the requests itself). */
  script?: string;
  /** wrk threads, 1 by default. */
  threads?: number;
}

/** Fails with the Debian package to install when wrk is missing. */
export async function requireWrk(): Promise<void> {
  try {
    await new Deno.Command("wrk", { args: ["--version"], stdout: "null", stderr: "null" }).output();
  } catch {
    throw new Error("wrk is not installed: apt-get install wrk");
  }
}

/** Runs wrk once and parses its report. */
export async function runWrk(options: WrkOptions): Promise<WrkResult> {
  const script = await Deno.makeTempFile({ suffix: ".lua" });
  await Deno.writeTextFile(
    script,
    options.script ??
      (options.method === "POST"
        ? 'wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\nwrk.body = "{}"\n'
        : ""),
  );
  try {
    const out = await new Deno.Command("wrk", {
      args: [
        `-t${options.threads ?? 1}`,
        `-c${options.connections}`,
        `-d${options.durationSeconds}s`,
        "--latency",
        "-s",
        script,
        options.url,
      ],
      stdout: "piped",
      stderr: "piped",
    }).output();
    const text = new TextDecoder().decode(out.stdout);
    if (!out.success) throw new Error(`wrk failed: ${new TextDecoder().decode(out.stderr)}`);
    const rps = Number(text.match(/Requests\/sec:\s+([\d.]+)/)?.[1]);
    const errorsNon2xx = Number(text.match(/Non-2xx or 3xx responses: (\d+)/)?.[1] ?? 0);
    const socketErrors =
      text.match(/Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/)
        ?.slice(1).reduce((a, b) => a + Number(b), 0) ?? 0;
    return {
      requestsPerSecond: rps,
      p50Ms: latencyMs(text, "50%"),
      p99Ms: latencyMs(text, "99%"),
      errors: errorsNon2xx + socketErrors,
      bytesPerSecond: transferRate(text),
    };
  } finally {
    await Deno.remove(script);
  }
}

/** wrk's "Transfer/sec" in bytes per second. */
function transferRate(report: string): number {
  const m = report.match(/Transfer\/sec:\s+([\d.]+)(B|KB|MB|GB)/);
  if (!m) return NaN;
  return Number(m[1]) * { B: 1, KB: 1024, MB: 1024 ** 2, GB: 1024 ** 3 }[m[2] as "B"];
}

function latencyMs(report: string, percentile: string): number {
  const m = report.match(new RegExp(`^\\s+${percentile}\\s+([\\d.]+)(us|ms|s)\\s*$`, "m"));
  if (!m) return NaN;
  const value = Number(m[1]);
  return m[2] === "us" ? value / 1000 : m[2] === "s" ? value * 1000 : value;
}
