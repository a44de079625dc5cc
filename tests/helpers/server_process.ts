/**
 * A server process of a test or a bench, run as `deno task start` runs it, so that it has
 * its own CPU time, memory and signals (a CDN node, a server killed mid-stream).
 */
import { type Config, configSchema, envName } from "../../config.ts";
import { freePort, spawnDeno, startPermissions, waitForHttp } from "./process.ts";

/** Time a server process may take to answer /health, in ms (a cold start checks types). */
const startTimeoutMs = 30_000;
/** Time a stopped process gets to exit after SIGTERM before SIGKILL, in ms. */
const stopTimeoutMs = 5_000;

/** The names of the server's listening ports (`rest`, `ws`, ...). */
export type PortName = keyof Config["ports"];

/** Config fields to set, by section (`{ cdn: { role: "edge" } }`); the rest keep defaults. */
export type ConfigPatch = { [Section in keyof Config]?: Partial<Config[Section]> };

const portNames = Object.keys(configSchema.parse({}).ports) as PortName[];

/**
 * Every listening port of the server free a moment before, and the MEDIASERVER_PORTS_*
 * variables that set them: a port left at its default could be held by another server of the
 * run, and a listener that cannot open ends the start.
 */
export function freePortsEnv(): { ports: Record<PortName, number>; env: Record<string, string> } {
  const ports = Object.fromEntries(portNames.map((port) => [port, freePort()])) as Record<
    PortName,
    number
  >;
  const env = Object.fromEntries(
    portNames.map((port) => [envName(["ports", port]), String(ports[port])]),
  );
  return { ports, env };
}

/**
 * `deno run <start permissions> main.ts` configured by MEDIASERVER_* variables from `config`,
 * with every port explicit and free a moment before, its folders under `<dir>/<name>/` and its
 * stdout and stderr appended to `<dir>/<name>.log` and `<dir>/<name>.err`. Killed, it starts
 * again on the same ports.
 */
export class ServerProcess {
  /** The name of its log files and folder, and of its errors. */
  readonly name: string;
  /** Its listening ports. */
  readonly ports: Record<PortName, number>;
  /** Its stdout (the JSON log lines). */
  readonly logPath: string;
  /** Its stderr. */
  readonly errPath: string;
  readonly #env: Record<string, string>;
  #child?: Deno.ChildProcess;
  #piping: Promise<unknown> = Promise.resolve();

  constructor(name: string, dir: string, config: ConfigPatch = {}) {
    this.name = name;
    const free = freePortsEnv();
    this.ports = free.ports;
    this.logPath = `${dir}/${name}.log`;
    this.errPath = `${dir}/${name}.err`;
    const env: Record<string, string> = {
      [envName(["folders", "media"])]: `${dir}/${name}/content`,
      [envName(["folders", "records"])]: `${dir}/${name}/records`,
      [envName(["folders", "logs"])]: `${dir}/${name}/logs`,
    };
    // A list becomes comma-separated (String of an array), as the environment takes it.
    for (const [section, fields] of Object.entries(config)) {
      if (typeof fields !== "object" || fields === null || Array.isArray(fields)) {
        env[envName([section])] = String(fields);
        continue;
      }
      for (const [field, value] of Object.entries(fields)) {
        env[envName([section, field])] = String(value);
      }
    }
    this.#env = { ...env, ...free.env };
  }

  /** Whether it was started and not killed or stopped since. */
  get running(): boolean {
    return this.#child !== undefined;
  }

  /** Its process id, for /proc/<pid>/stat CPU and memory reads. */
  get pid(): number {
    if (!this.#child) throw new Error(`${this.name} is not running`);
    return this.#child.pid;
  }

  /** e.g. http://127.0.0.1:40123 (its REST API is below /rest-api). */
  get restUrl(): string {
    return `http://127.0.0.1:${this.ports.rest}`;
  }

  /** Its Web SDK signaling URL. */
  get wsUrl(): string {
    return `ws://127.0.0.1:${this.ports.ws}`;
  }

  /** Its RTMP application URL; a stream is `${rtmpUrl}/<name>`. */
  get rtmpUrl(): string {
    return `rtmp://127.0.0.1:${this.ports.rtmp}/live`;
  }

  /**
   * Starts the process and resolves once /health answers; a process that does not is killed
   * and the error carries the end of its stderr.
   */
  async start(): Promise<void> {
    if (this.#child) throw new Error(`${this.name} is running`);
    const child = spawnDeno(["run", ...startPermissions, "main.ts"], this.#env);
    this.#child = child;
    this.#piping = Promise.allSettled([
      appendTo(this.logPath, child.stdout),
      appendTo(this.errPath, child.stderr),
    ]);
    try {
      await waitForHttp(`${this.restUrl}/health`, startTimeoutMs);
    } catch (error) {
      await this.kill();
      const stderr = await Deno.readTextFile(this.errPath).catch(() => "");
      throw new Error(
        `${this.name}: ${(error as Error).message}\n${
          stderr.trimEnd().split("\n").slice(-20).join("\n")
        }`,
      );
    }
  }

  /** Kills it with SIGKILL (a crash) and waits for the exit; nothing when not running. */
  kill(): Promise<void> {
    return this.#end("SIGKILL");
  }

  /**
   * Stops it with SIGTERM (it leaves as on a normal stop), SIGKILL after 5 s if it lingers,
   * and waits for the exit; nothing when not running.
   */
  stop(): Promise<void> {
    return this.#end("SIGTERM");
  }

  async #end(signal: Deno.Signal): Promise<void> {
    const child = this.#child;
    if (!child) return;
    this.#child = undefined;
    try {
      child.kill(signal);
    } catch {
      // Exited already.
    }
    const timer = setTimeout(() => {
      try {
        child.kill("SIGKILL");
      } catch {
        // Exited meanwhile.
      }
    }, stopTimeoutMs);
    await child.status;
    clearTimeout(timer);
    await this.#piping;
  }

  /** The last `lines` lines of its stdout and stderr (request log lines left out), for a report. */
  async tail(lines: number): Promise<string> {
    const parts = [];
    for (const path of [this.logPath, this.errPath]) {
      const text = await Deno.readTextFile(path).catch(() => "");
      // The caller's REST polling would hide the lines that matter.
      const kept = text.trimEnd().split("\n").filter((l) => !l.includes('"msg":"request"'));
      parts.push(`--- ${path.slice(path.lastIndexOf("/") + 1)}\n${kept.slice(-lines).join("\n")}`);
    }
    return parts.join("\n");
  }
}

/**
 * Appends each chunk of `stream` to the file at `path` as it comes, so that the file can be
 * read while the process runs (a pipeTo into the file's writable showed nothing until the end).
 */
async function appendTo(path: string, stream: ReadableStream<Uint8Array>): Promise<void> {
  using file = await Deno.open(path, { create: true, append: true, write: true });
  for await (const chunk of stream) {
    for (let written = 0; written < chunk.length;) {
      written += await file.write(chunk.subarray(written));
    }
  }
}
