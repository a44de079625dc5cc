/**
 * Structured logging: one JSON object a line, with a level, a message and fields. Components
 * take a child logger carrying their context (`{component: "rest"}`) so lines stay greppable.
 */

/** Log levels, most severe first. */
export const logLevels = ["error", "warn", "info", "debug", "trace"] as const;
/** A log level. */
export type LogLevel = typeof logLevels[number];

/** Extra fields of a log line. */
export type LogFields = Record<string, unknown>;

/** Writes log lines at or above its level. */
export interface Logger {
  readonly level: LogLevel;
  error(msg: string, fields?: LogFields): void;
  warn(msg: string, fields?: LogFields): void;
  info(msg: string, fields?: LogFields): void;
  debug(msg: string, fields?: LogFields): void;
  trace(msg: string, fields?: LogFields): void;
  /** True when a line of this level would be written; guards costly field building. */
  enabled(level: LogLevel): boolean;
  /** A logger that adds `fields` to every line. */
  child(fields: LogFields): Logger;
}

/** Options of createLogger. */
export interface LoggerOptions {
  /** Lowest level written. */
  level: LogLevel;
  /** Receives each formatted line (without newline); defaults to stdout. */
  write?: (line: string) => void;
  /** Fields added to every line. */
  fields?: LogFields;
}

const encoder = new TextEncoder();

function writeStdout(line: string): void {
  Deno.stdout.writeSync(encoder.encode(line + "\n"));
}

/** Creates a logger writing JSON lines. */
export function createLogger(options: LoggerOptions): Logger {
  const threshold = logLevels.indexOf(options.level);
  const write = options.write ?? writeStdout;
  const base = options.fields ?? {};
  const emit = (level: LogLevel, msg: string, fields?: LogFields) => {
    if (logLevels.indexOf(level) > threshold) return;
    const line: LogFields = { time: new Date().toISOString(), level, msg, ...base, ...fields };
    write(JSON.stringify(line, errorReplacer));
  };
  return {
    level: options.level,
    error: (msg, fields) => emit("error", msg, fields),
    warn: (msg, fields) => emit("warn", msg, fields),
    info: (msg, fields) => emit("info", msg, fields),
    debug: (msg, fields) => emit("debug", msg, fields),
    trace: (msg, fields) => emit("trace", msg, fields),
    enabled: (level) => logLevels.indexOf(level) <= threshold,
    child: (fields) => createLogger({ ...options, fields: { ...base, ...fields } }),
  };
}

/** Errors have no enumerable fields; log their name and message instead of `{}`. */
function errorReplacer(_key: string, value: unknown): unknown {
  if (value instanceof Error) return `${value.name}: ${value.message}`;
  if (typeof value === "bigint") return value.toString();
  return value;
}

/** A logger that writes nothing, for tests and tools. */
export const silentLogger: Logger = createLogger({ level: "error", write: () => {} });
