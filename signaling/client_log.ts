/**
 * The per-session client log that `/logger/enable_client_log` switches on: the session's
 * signaling (frames in and out, its events) and the lines the SDK pushes with `pushLogs`,
 * filtered by the level asked for, appended to `<logs folder>/client-<sessionId>.log`.
 */
import { type ClientLogLevel, clientLogLevels } from "../core/session_registry.ts";

const encoder = new TextEncoder();

/** A file name made of the sessionId, which holds '/' and ':'. */
export function clientLogFileName(sessionId: string): string {
  return `client-${sessionId.replace(/[^A-Za-z0-9._-]+/g, "_").replace(/^_+/, "")}.log`;
}

/** The level word of an SDK pushLogs line (`<time> <LEVEL> <module> - <text>`), if any. */
function pushedLineLevel(line: string): ClientLogLevel | undefined {
  const word = line.split(" ", 3)[1];
  return (clientLogLevels as readonly string[]).includes(word) ? word as ClientLogLevel : undefined;
}

/** One session's client log; off until enabled. */
export class ClientLog {
  readonly #folder: string;
  readonly #sessionId: string;
  #level?: ClientLogLevel;
  #file?: Promise<Deno.FsFile>;
  /** Writes in order, one at a time, off the message path. */
  #tail: Promise<void> = Promise.resolve();

  constructor(folder: string, sessionId: string) {
    this.#folder = folder;
    this.#sessionId = sessionId;
  }

  /** Path of the log file. */
  get path(): string {
    return `${this.#folder}/${clientLogFileName(this.#sessionId)}`;
  }

  /** True when a line of `level` would be written. */
  enabled(level: ClientLogLevel): boolean {
    return this.#level !== undefined &&
      clientLogLevels.indexOf(level) <= clientLogLevels.indexOf(this.#level);
  }

  /** Starts logging at `level` (or changes the level); resolves once the file is open. */
  async enable(level: ClientLogLevel): Promise<void> {
    this.#level = level;
    this.#file ??= (async () => {
      await Deno.mkdir(this.#folder, { recursive: true });
      return await Deno.open(this.path, { append: true, create: true });
    })();
    try {
      await this.#file;
    } catch (err) {
      this.#level = undefined;
      this.#file = undefined;
      throw err;
    }
    this.write("INFO", `client log enabled at ${level}`);
  }

  /** Appends a line of the server's view of the session when `level` is enabled. */
  write(level: ClientLogLevel, text: string): void {
    if (!this.enabled(level)) return;
    this.#append(`${new Date().toISOString()} ${level} server - ${text}\n`);
  }

  /** Appends a line pushed by the SDK when its own level word is enabled (INFO if it has none). */
  writePushed(line: string): void {
    if (!this.enabled(pushedLineLevel(line) ?? "INFO")) return;
    this.#append(`${new Date().toISOString()} client ${line.endsWith("\n") ? line : line + "\n"}`);
  }

  /** Stops logging and closes the file once pending lines are written. */
  async disable(): Promise<void> {
    const file = this.#file;
    if (!file) return;
    this.write("INFO", "client log disabled");
    this.#level = undefined;
    this.#file = undefined;
    await this.#tail;
    (await file).close();
  }

  #append(line: string): void {
    const file = this.#file!;
    const bytes = encoder.encode(line);
    this.#tail = this.#tail.then(async () => {
      const f = await file;
      let written = 0;
      while (written < bytes.length) written += await f.write(bytes.subarray(written));
    }).catch(() => {
      // A failed write (disk full) must not stop the session; the line is lost.
    });
  }
}
