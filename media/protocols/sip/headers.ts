/**
 * Values of the SIP header fields the transaction layer reads and writes itself: Via
 * (RFC 3261 §20.42, §18.2.1, RFC 3581 rport), CSeq (§20.16), and the random identifiers
 * of branches, tags and Call-IDs (§8.1.1.4, §8.1.1.7, §19.3).
 */
import { ParseError } from "../../../core/errors.ts";
import { formatHeaderParams, parseHeaderParams, parseHostPort, tokenPattern } from "./uri.ts";

/** One Via element: `SIP/2.0/UDP host:port;branch=...;rport`. */
export interface Via {
  /** The transport, upper-case ("UDP", "TCP", "TLS", "WS", ...). */
  transport: string;
  /** Host name or address of the sent-by, an IPv6 address without brackets. */
  host: string;
  port?: number;
  /** Parameters by lower-case name: branch, received, rport ("" when a flag, or the port)... */
  params: Map<string, string>;
}

/** The prefix of every RFC 3261 branch (§8.1.1.7). */
export const branchMagicCookie = "z9hG4bK";

/** Largest CSeq number (RFC 3261 §8.1.1.5: below 2**31). */
export const maxCSeq = 2 ** 31 - 1;

const viaPattern =
  /^[ \t]*SIP[ \t]*\/[ \t]*2\.0[ \t]*\/[ \t]*([A-Za-z0-9\-.!%*_+`'~]+)[ \t]+(\[[^\]]*\]|[^\s:;\[]+)(?:[ \t]*:[ \t]*([^\s;]*))?(.*)$/is;

/** Parses one Via element (a comma-joined Via line is split first by SipHeaders.getAll). */
export function parseVia(value: string): Via {
  const m = viaPattern.exec(value);
  if (!m) throw new ParseError(`malformed Via: ${JSON.stringify(value.slice(0, 80))}`);
  const sentBy = m[3] === undefined ? m[2] : `${m[2]}:${m[3]}`;
  const { host, port } = parseHostPort(sentBy, "Via");
  const rest = m[4].trimEnd();
  if (rest !== "" && !/^[ \t]*;/.test(rest)) throw new ParseError("malformed Via parameters");
  const params = parseHeaderParams(rest, "Via");
  const via: Via = { transport: m[1].toUpperCase(), host, params };
  if (port !== undefined) via.port = port;
  return via;
}

/** Writes a Via element: `SIP/2.0/UDP host:port;branch=...;rport`. */
export function formatVia(via: Via): string {
  if (!tokenPattern.test(via.transport)) throw new ParseError("bad Via transport");
  const { host } = parseHostPort(via.host.includes(":") ? `[${via.host}]` : via.host, "Via");
  let out = `SIP/2.0/${via.transport.toUpperCase()} ${host.includes(":") ? `[${host}]` : host}`;
  if (via.port !== undefined) {
    if (!Number.isInteger(via.port) || via.port < 0 || via.port > 65535) {
      throw new ParseError(`Via port ${via.port} is out of range`);
    }
    out += `:${via.port}`;
  }
  return out + formatHeaderParams(via.params, "Via");
}

/** Parses a CSeq value: the sequence number and the method. */
export function parseCSeq(value: string): { seq: number; method: string } {
  const m = /^[ \t]*(\d{1,10})[ \t]+([A-Za-z0-9\-.!%*_+`'~]+)[ \t]*$/.exec(value);
  if (!m) throw new ParseError(`malformed CSeq: ${JSON.stringify(value.slice(0, 80))}`);
  const seq = Number(m[1]);
  if (seq > maxCSeq) throw new ParseError(`CSeq ${seq} is out of range`);
  return { seq, method: m[2] };
}

/** A token of `bytes` random bytes (crypto), in hex. */
export function randomToken(bytes: number): string {
  const data = crypto.getRandomValues(new Uint8Array(bytes));
  return Array.from(data, (b) => b.toString(16).padStart(2, "0")).join("");
}

/** A new branch: the magic cookie and 64 random bits (unique per transaction, §8.1.1.7). */
export function newBranch(): string {
  return branchMagicCookie + randomToken(8);
}

/** A new From/To tag: 64 random bits (§19.3). */
export function newTag(): string {
  return randomToken(8);
}

/** A new Call-ID: 128 random bits at `host` (§8.1.1.4). */
export function newCallId(host: string): string {
  return `${randomToken(16)}@${host}`;
}
