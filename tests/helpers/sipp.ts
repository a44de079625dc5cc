/**
 * SIPp (Debian `sip-tester`) as the far end of SIP tests, on 127.0.0.1 with free ports.
 * Always `-i/-mi 127.0.0.1` (else sipp writes the host's address into Via and SDP) and
 * `-nostdin`; its statistics screen is thrown away, its errors kept for the failure message.
 */
import { bindUdp, freeUdpRange } from "./process.ts";

/** A running sipp. */
export interface Sipp {
  /** SIP port (UDP). */
  readonly port: number;
  /** RTP port (`-mp`): with `-rtp_echo`, what reaches it goes back to its sender. */
  readonly mediaPort: number;
  /** Resolves with sipp's exit code: 0 when every call of its scenario succeeded. */
  readonly exited: Promise<number>;
  /** sipp's error trace so far (for assertion messages). */
  errors(): string;
  /** Kills sipp (if running) and removes its folder. */
  stop(): Promise<void>;
}

/** What to run. */
export interface SippOptions {
  /**
   * A scenario file of tests/peers/sipp/ (e.g. "uas_echo.xml"), an absolute path to one, or
   * a `-sn` built-in name.
   */
  scenario: string;
  /** Echo RTP back to its sender (`-rtp_echo`). */
  rtpEcho?: boolean;
  /** More arguments (e.g. `-m 1`, a target `127.0.0.1:5060`). */
  args?: string[];
}

/** Folder of the project's scenario files. */
const scenarioFolder = new URL("../peers/sipp/", import.meta.url).pathname;

/** Starts sipp; resolves once it is listening on its SIP port. */
export async function startSipp(o: SippOptions): Promise<Sipp> {
  const port = await freeUdpRange(1);
  let mediaPort = await freeUdpRange(4);
  while (mediaPort <= port && port < mediaPort + 4) mediaPort = await freeUdpRange(4);
  const dir = await Deno.makeTempDir({ prefix: "sipp-" });
  const scenario = o.scenario.endsWith(".xml")
    ? ["-sf", o.scenario.startsWith("/") ? o.scenario : scenarioFolder + o.scenario]
    : ["-sn", o.scenario];
  let child: Deno.ChildProcess;
  try {
    child = new Deno.Command("sipp", {
      args: [
        ...scenario,
        ...["-i", "127.0.0.1", "-mi", "127.0.0.1", "-p", String(port), "-mp", String(mediaPort)],
        ...["-nostdin", "-trace_err", "-cp", String(await freeUdpRange(1))],
        ...(o.rtpEcho ? ["-rtp_echo"] : []),
        ...(o.args ?? []),
      ],
      cwd: dir,
      stdin: "null",
      stdout: "null",
      stderr: "piped",
    }).spawn();
  } catch (err) {
    await Deno.remove(dir, { recursive: true });
    if (err instanceof Deno.errors.NotFound) {
      throw new Error("sipp is missing: install the Debian package sip-tester");
    }
    throw err;
  }
  const stderr = child.stderr.pipeThrough(new TextDecoderStream());
  let stderrText = "";
  const drained = (async () => {
    for await (const chunk of stderr) stderrText += chunk;
  })();
  const exited = child.status.then(async (s) => {
    await drained;
    return s.code;
  });
  const errors = () => {
    let trace = "";
    try {
      for (const entry of Deno.readDirSync(dir)) {
        if (entry.name.endsWith("_errors.log")) {
          trace += Deno.readTextFileSync(`${dir}/${entry.name}`);
        }
      }
    } catch {
      // removed already
    }
    return `${stderrText}${trace}`.slice(-4000);
  };
  let stopped: Promise<void> | undefined;
  const sipp: Sipp = {
    port,
    mediaPort,
    exited,
    errors,
    stop() {
      stopped ??= (async () => {
        try {
          child.kill("SIGKILL");
        } catch {
          // exited already
        }
        await exited;
        await Deno.remove(dir, { recursive: true }).catch(() => {});
      })();
      return stopped;
    },
  };
  // Listening once its SIP port is taken.
  const deadline = performance.now() + 10_000;
  for (;;) {
    const socket = await bindUdp(port);
    if (!socket) return sipp;
    await new Promise<void>((r) => socket.close(() => r()));
    if (performance.now() > deadline) {
      await sipp.stop();
      throw new Error(`sipp did not bind 127.0.0.1:${port}: ${errors()}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}
