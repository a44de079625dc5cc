/**
 * Structured logging: one JSON object a line, with a level, a message and fields. Components
 * take a child logger carrying their context (`{component: "rest"}`) so lines stay greppable.
 * Secrets of URIs in the message, string fields and errors are redacted (core/redact.ts).
 */
import type { LogRing } from "./log_ring.ts";
import { redactText } from "./redact.ts";

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
  /** The recent lines written (the web console shows them), when the logger keeps them. */
  readonly recent?: LogRing;
  /** This logger without the recent ring, for lines so frequent they would push all others out. */
  unkept(): Logger;
  /**
   * A writer of `level` lines saying `msg` whose fields the caller writes as JSON members
   * itself (`"a":1,"b":"x"`, keys in the order of `keys`): the text `logger[level](msg, fields)`
   * would write, without building the object, for lines written so often (one per REST
   * request) that the object and its stringify cost more than the rest of the line. The
   * caller writes only plain values and redacts nothing (no URI in them). Undefined when the
   * level is off or a key would collide with the line's or the logger's own; the ordinary
   * methods then write the line.
   */
  memberWriter(level: LogLevel, msg: string, keys: readonly string[]): MemberWriter | undefined;
}

/** Writes one line whose fields are the JSON members given (see `Logger.memberWriter`). */
export type MemberWriter = (members: string) => void;

/** Options of createLogger. */
export interface LoggerOptions {
  /** Lowest level written. */
  level: LogLevel;
  /** Receives each formatted line (without newline); defaults to buffered stdout. */
  write?: (line: string, level: LogLevel) => void;
  /** Fields added to every line. */
  fields?: LogFields;
  /** Also keeps each written line here (children share it). */
  recent?: LogRing;
}

/** Longest a log line waits in the stdout buffer, in ms. */
const stdoutFlushIntervalMs = 50;
/** Buffered characters that force a flush before the interval. */
const stdoutFlushChars = 32 * 1024;

/**
 * Stdout sink that batches lines: one write per batch instead of one per line keeps the
 * request log from costing a syscall per request. Errors flush at once, and so does exit.
 */
class StdoutSink {
  #lines: string[] = [];
  #chars = 0;
  #timer?: ReturnType<typeof setTimeout>;
  #encoder = new TextEncoder();

  constructor() {
    globalThis.addEventListener("unload", () => this.flush());
  }

  write(line: string, urgent: boolean): void {
    this.#lines.push(line);
    this.#chars += line.length + 1;
    if (urgent || this.#chars >= stdoutFlushChars) {
      this.flush();
    } else if (this.#timer === undefined) {
      this.#timer = setTimeout(() => this.flush(), stdoutFlushIntervalMs);
      Deno.unrefTimer(this.#timer as unknown as number);
    }
  }

  flush(): void {
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = undefined;
    if (this.#lines.length === 0) return;
    const text = this.#lines.join("\n") + "\n";
    this.#lines = [];
    this.#chars = 0;
    const bytes = this.#encoder.encode(text);
    for (let written = 0; written < bytes.length;) {
      written += Deno.stdout.writeSync(bytes.subarray(written));
    }
  }
}

let stdoutSink: StdoutSink | undefined;

/** Writes out buffered stdout log lines; call before exiting outside the normal path. */
export function flushLogs(): void {
  stdoutSink?.flush();
}

let isoMs = NaN;
let isoText = "";

/**
 * The current time as ISO 8601 text: formatting a Date costs more than the rest of a line,
 * and lines logged within the same millisecond share one text.
 */
function isoNow(): string {
  const now = Date.now();
  if (now !== isoMs) {
    isoMs = now;
    isoText = new Date(now).toISOString();
  }
  return isoText;
}

/** Rank of each level, for the threshold test of every call. */
const levelRanks: Readonly<Record<LogLevel, number>> = {
  error: 0,
  warn: 1,
  info: 2,
  debug: 3,
  trace: 4,
};

/** Keys a line's fields may not take for the fast format (see `formatLine`). */
const lineKeys = ["time", "level", "msg", "toJSON"];

/** Creates a logger writing JSON lines. */
export function createLogger(options: LoggerOptions): Logger {
  const threshold = levelRanks[options.level];
  const write = options.write ??
    ((line: string, level: LogLevel) =>
      (stdoutSink ??= new StdoutSink()).write(line, level === "error"));
  const base = redactFields(options.fields ?? {});
  const format = lineFormatter(base);
  const emit = (level: LogLevel, msg: string, fields?: LogFields) => {
    if (levelRanks[level] > threshold) return;
    const text = format(level, msg, fields && redactFields(fields));
    options.recent?.add(text);
    write(text, level);
  };
  return {
    level: options.level,
    recent: options.recent,
    error: (msg, fields) => emit("error", msg, fields),
    warn: (msg, fields) => emit("warn", msg, fields),
    info: (msg, fields) => emit("info", msg, fields),
    debug: (msg, fields) => emit("debug", msg, fields),
    trace: (msg, fields) => emit("trace", msg, fields),
    enabled: (level) => levelRanks[level] <= threshold,
    child: (fields) => createLogger({ ...options, fields: { ...base, ...fields } }),
    unkept: () => createLogger({ ...options, recent: undefined }),
    memberWriter: (level, msg, keys) => {
      if (levelRanks[level] > threshold || redactText(msg) !== msg) return undefined;
      const head = format.head?.(level, msg, keys);
      if (head === undefined) return undefined;
      return (members) => {
        const text = `{"time":"${isoNow()}${head}${members === "" ? "" : ","}${members}}`;
        options.recent?.add(text);
        write(text, level);
      };
    },
  };
}

/** Formats a line; `head` (when the base fields are plain) gives a line's text after its time. */
interface LineFormat {
  (level: LogLevel, msg: string, fields: LogFields | undefined): string;
  /**
   * The text between the time and the fields' members of a line with fields `keys`:
   * `","level":..,"msg":..` and the base's members; undefined when a key is taken.
   */
  head?: (level: LogLevel, msg: string, keys: readonly string[]) => string | undefined;
}

/**
 * The line formatter of a logger with fixed `base` fields: the JSON of
 * `{time, level, msg, ...base, ...fields}`. Stringifying that merged object cost most of a
 * request's log line (REST writes one per request); when the base fields are plain values
 * (their JSON cannot change) and no field takes a key of the line's own or of the base
 * (which would move its value to that key's place), the line is the base's JSON, kept, joined
 * to the fields' own: the same text. Other lines take the merged object as before.
 */
function lineFormatter(base: LogFields): LineFormat {
  const merged = (level: LogLevel, msg: string, fields: LogFields | undefined) => {
    const line: LogFields = { time: isoNow(), level, msg: redactText(msg), ...base, ...fields };
    return JSON.stringify(line, needsReplacer(fields) ? errorReplacer : undefined);
  };
  const baseKeys = Object.keys(base);
  if (!baseKeys.every((key) => isPlainValue(base[key]) && !isIndexLike(key))) return merged;
  const taken = new Set([...lineKeys, ...baseKeys]);
  const baseJson = baseKeys.length > 0 ? "," + JSON.stringify(base).slice(1, -1) : "";
  const format: LineFormat = (level, msg, fields) => {
    if (typeof msg !== "string") return merged(level, msg, fields);
    let fieldsJson = "}";
    if (fields) {
      for (const key in fields) {
        if (taken.has(key) || isIndexLike(key) || !isPlainValue(fields[key])) {
          return merged(level, msg, fields);
        }
      }
      const json = JSON.stringify(fields);
      if (json.length > 2) fieldsJson = "," + json.slice(1);
    }
    return `{"time":"${isoNow()}","level":"${level}","msg":${
      JSON.stringify(redactText(msg))
    }${baseJson}${fieldsJson}`;
  };
  format.head = (level, msg, keys) =>
    keys.some((key) => taken.has(key) || isIndexLike(key))
      ? undefined
      : `","level":"${level}","msg":${JSON.stringify(redactText(msg))}${baseJson}`;
  return format;
}

/** A key starting with a digit: integer-like keys come first in an object, whatever their place. */
function isIndexLike(key: string): boolean {
  const first = key.charCodeAt(0);
  return first >= 48 && first <= 57;
}

/** A string, number, boolean, null or undefined: a value whose JSON needs no replacer. */
function isPlainValue(value: unknown): boolean {
  return value === null || (typeof value !== "object" && typeof value !== "function" &&
    typeof value !== "bigint" && typeof value !== "symbol");
}

/**
 * `fields` with the secrets of URIs in string values redacted (a camera's password, a token
 * in a query); the same object when no value holds a URI, which is the common case.
 */
function redactFields(fields: LogFields): LogFields {
  let out: LogFields | undefined;
  for (const key in fields) {
    const value = fields[key];
    if (typeof value === "string" && value.includes("://")) {
      out ??= { ...fields };
      out[key] = redactText(value);
    }
  }
  return out ?? fields;
}

/** A replacer function slows JSON.stringify down; only fields holding errors or bigints need it. */
function needsReplacer(fields: LogFields | undefined): boolean {
  if (!fields) return false;
  for (const key in fields) {
    const value = fields[key];
    if (value instanceof Error || typeof value === "bigint") return true;
  }
  return false;
}

/** Errors have no enumerable fields; log their name and message instead of `{}`. */
function errorReplacer(_key: string, value: unknown): unknown {
  if (value instanceof Error) return redactText(`${value.name}: ${value.message}`);
  if (typeof value === "bigint") return value.toString();
  return value;
}

/** A logger that writes nothing, for tests and tools. */
export const silentLogger: Logger = createLogger({ level: "error", write: () => {} });
