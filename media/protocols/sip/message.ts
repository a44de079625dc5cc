/**
 * SIP messages on the wire (RFC 3261 §7, §18.3, §20): a datagram parsed into a request or a
 * response, a message written back as bytes, and the framing of a TCP byte stream by
 * Content-Length. Header names are case-insensitive and compact forms map to full names.
 */
import { ParseError } from "../../../core/errors.ts";
import { parseCSeq, parseVia } from "./headers.ts";
import { breaksLine, parseSipUri, splitNameAddr, tokenPattern } from "./uri.ts";

/** Largest message (a datagram, or a message of a stream), in bytes; a larger one is refused. */
export const maxSipMessageBytes = 64 * 1024;

/** Canonical spellings of the header names a SIP stack meets, by lower-case name. */
const canonicalNames = new Map(
  [
    "Accept",
    "Accept-Contact",
    "Accept-Encoding",
    "Accept-Language",
    "Alert-Info",
    "Allow",
    "Allow-Events",
    "Authentication-Info",
    "Authorization",
    "Call-ID",
    "Call-Info",
    "Contact",
    "Content-Disposition",
    "Content-Encoding",
    "Content-Language",
    "Content-Length",
    "Content-Type",
    "CSeq",
    "Date",
    "Error-Info",
    "Event",
    "Expires",
    "From",
    "History-Info",
    "Identity",
    "In-Reply-To",
    "Max-Forwards",
    "MIME-Version",
    "Min-Expires",
    "Min-SE",
    "Organization",
    "P-Asserted-Identity",
    "P-Preferred-Identity",
    "Path",
    "Priority",
    "Privacy",
    "Proxy-Authenticate",
    "Proxy-Authorization",
    "Proxy-Require",
    "RAck",
    "Reason",
    "Record-Route",
    "Refer-To",
    "Referred-By",
    "Reject-Contact",
    "Replaces",
    "Reply-To",
    "Request-Disposition",
    "Require",
    "Retry-After",
    "Route",
    "RSeq",
    "Server",
    "Service-Route",
    "Session-Expires",
    "Subject",
    "Subscription-State",
    "Supported",
    "Timestamp",
    "To",
    "Unsupported",
    "User-Agent",
    "Via",
    "Warning",
    "WWW-Authenticate",
  ].map((name) => [name.toLowerCase(), name]),
);

/** Compact forms (RFC 3261 §7.3.3 and the extensions that define one). */
const compactForms = new Map([
  ["i", "call-id"],
  ["f", "from"],
  ["t", "to"],
  ["v", "via"],
  ["m", "contact"],
  ["l", "content-length"],
  ["c", "content-type"],
  ["k", "supported"],
  ["s", "subject"],
  ["e", "content-encoding"],
  ["o", "event"],
  ["r", "refer-to"],
  ["b", "referred-by"],
  ["u", "allow-events"],
  ["x", "session-expires"],
  ["a", "accept-contact"],
  ["j", "reject-contact"],
  ["d", "request-disposition"],
  ["y", "identity"],
]);

/**
 * Headers whose value is a comma-separated list (RFC 3261 §7.3.1), so that one line may join
 * several elements. The auth headers and Date hold commas that do not separate elements.
 */
const listHeaders = new Set([
  "accept",
  "accept-contact",
  "accept-encoding",
  "accept-language",
  "alert-info",
  "allow",
  "allow-events",
  "call-info",
  "contact",
  "content-encoding",
  "content-language",
  "error-info",
  "history-info",
  "in-reply-to",
  "p-asserted-identity",
  "p-preferred-identity",
  "path",
  "proxy-require",
  "reason",
  "record-route",
  "reject-contact",
  "require",
  "route",
  "service-route",
  "supported",
  "unsupported",
  "via",
  "warning",
]);

/** `text` without leading and trailing SP and HT (String.trim would also take a BOM or NBSP). */
function trimLws(text: string): string {
  const blank = (i: number) => text[i] === " " || text[i] === "\t";
  let from = 0;
  let to = text.length;
  while (from < to && blank(from)) from++;
  while (to > from && blank(to - 1)) to--;
  return text.slice(from, to);
}

/** The lower-case full name of a header name (compact forms expanded). */
function headerKey(name: string): string {
  const lower = name.toLowerCase();
  return compactForms.get(lower) ?? lower;
}

/** Splits a list header's value at the commas outside quoted strings and <...>. */
function splitList(value: string): string[] {
  const out: string[] = [];
  let quoted = false;
  let angle = false;
  let from = 0;
  for (let i = 0; i < value.length; i++) {
    const ch = value[i];
    if (quoted) {
      if (ch === "\\") i++;
      else if (ch === '"') quoted = false;
    } else if (ch === '"') quoted = true;
    else if (ch === "<") angle = true;
    else if (ch === ">") angle = false;
    else if (ch === "," && !angle) {
      out.push(value.slice(from, i));
      from = i + 1;
    }
  }
  out.push(value.slice(from));
  return out.map(trimLws).filter((v) => v !== "");
}

interface HeaderEntry {
  key: string;
  name: string;
  value: string;
}

/**
 * The header fields of a SIP message in order. Names are case-insensitive, compact forms map
 * to the full names, and the list headers give their elements one by one.
 */
export class SipHeaders {
  #entries: HeaderEntry[] = [];

  static #entry(name: string, value: string): HeaderEntry {
    if (!tokenPattern.test(name)) {
      throw new ParseError(`bad SIP header name ${JSON.stringify(name)}`);
    }
    if (breaksLine(value)) throw new ParseError(`SIP header ${name} holds a line break`);
    const key = headerKey(name);
    // Compact forms all have a canonical full name; other names stay as written.
    return { key, name: canonicalNames.get(key) ?? name, value };
  }

  /** Appends a value (earlier values of the name stay, in order). */
  add(name: string, value: string): void {
    this.#entries.push(SipHeaders.#entry(name, value));
  }

  /** Replaces every value of the name by this one (at the place of the first). */
  set(name: string, value: string): void {
    const entry = SipHeaders.#entry(name, value);
    const first = this.#entries.findIndex((e) => e.key === entry.key);
    if (first < 0) {
      this.#entries.push(entry);
      return;
    }
    this.#entries = this.#entries.filter((e, i) => i === first || e.key !== entry.key);
    this.#entries[first] = entry;
  }

  /** The first value (the first element of a list header: the top Via, the first Route). */
  get(name: string): string | undefined {
    const key = headerKey(name);
    if (!listHeaders.has(key)) return this.#entries.find((e) => e.key === key)?.value;
    if (!this.has(name)) return undefined;
    return this.getAll(name)[0] ?? "";
  }

  /** Every value in order, a comma-joined line of a list header split into its elements. */
  getAll(name: string): string[] {
    const key = headerKey(name);
    const values = this.#entries.filter((e) => e.key === key).map((e) => e.value);
    return listHeaders.has(key) ? values.flatMap(splitList) : values;
  }

  /** Whether the message has the header. */
  has(name: string): boolean {
    const key = headerKey(name);
    return this.#entries.some((e) => e.key === key);
  }

  /** Removes every value of the name. */
  delete(name: string): void {
    const key = headerKey(name);
    this.#entries = this.#entries.filter((e) => e.key !== key);
  }

  /** A copy that changes apart from this one. */
  clone(): SipHeaders {
    const copy = new SipHeaders();
    copy.#entries = this.#entries.map((e) => ({ ...e }));
    return copy;
  }

  /** Number of header lines. */
  get size(): number {
    return this.#entries.length;
  }

  /** The header lines in order as [canonical name, value] (a joined line stays joined). */
  *[Symbol.iterator](): IterableIterator<[string, string]> {
    for (const e of this.#entries) yield [e.name, e.value];
  }
}

/** A SIP request. */
export interface SipRequest {
  kind: "request";
  method: string;
  /** The Request-URI as written (a sip:, sips:, tel: ... URI). */
  uri: string;
  headers: SipHeaders;
  body: Uint8Array;
}

/** A SIP response. */
export interface SipResponse {
  kind: "response";
  status: number;
  reason: string;
  headers: SipHeaders;
  body: Uint8Array;
}

/** A SIP request or response. */
export type SipMessage = SipRequest | SipResponse;

const sipVersion = "SIP/2.0";
const utf8 = new TextDecoder();
const encoder = new TextEncoder();
const requestLine = /^([A-Za-z0-9\-.!%*_+`'~]+) (\S+) (SIP\/\d+\.\d+)$/i;
const statusLine = /^(SIP\/\d+\.\d+) (\d{3})(?: (.*))?$/i;
/** Headers a message may carry once only. */
const singleHeaders = ["call-id", "cseq", "from", "to", "content-length", "max-forwards"];

/** A start line and headers, before the body is known. */
type Head = Omit<SipRequest, "body"> | Omit<SipResponse, "body">;

/**
 * The offset just past the empty line ending the header block of `bytes[from, to)` (CRLF or
 * bare LF line ends), or -1 when it is not there yet.
 */
function headEnd(bytes: Uint8Array, from: number, to: number): number {
  for (let i = bytes.indexOf(0x0a, from); i >= 0 && i < to; i = bytes.indexOf(0x0a, i + 1)) {
    if (i + 1 < to && bytes[i + 1] === 0x0a) return i + 2;
    if (i + 2 < to && bytes[i + 1] === 0x0d && bytes[i + 2] === 0x0a) return i + 3;
  }
  return -1;
}

/** Parses a start line and header block (without the empty line). */
function parseHead(text: string): Head {
  const lines = text.split(/\r?\n/);
  const start = lines[0];
  const headers = new SipHeaders();
  let name: string | undefined;
  let value = "";
  const flush = () => {
    if (name !== undefined) headers.add(name, trimLws(value));
  };
  for (let i = 1; i < lines.length; i++) {
    const line = lines[i];
    if (line === "") continue;
    if (line[0] === " " || line[0] === "\t") {
      // RFC 3261 §7.3.1: a line starting with white space continues the previous one.
      if (name === undefined) throw new ParseError("SIP header block starts with a continuation");
      value += ` ${trimLws(line)}`;
      continue;
    }
    flush();
    const colon = line.indexOf(":");
    if (colon <= 0) {
      throw new ParseError(`SIP header line without a name: ${JSON.stringify(line.slice(0, 60))}`);
    }
    name = trimLws(line.slice(0, colon));
    value = line.slice(colon + 1);
  }
  flush();

  let head: Head;
  const req = requestLine.exec(start);
  const res = req ? null : statusLine.exec(start);
  if (req) {
    checkVersion(req[3]);
    const uri = req[2];
    if (!/^[A-Za-z][A-Za-z0-9+.-]*:./.test(uri)) throw new ParseError("bad SIP Request-URI");
    if (/^sips?:/i.test(uri)) parseSipUri(uri);
    head = { kind: "request", method: req[1], uri, headers };
  } else if (res) {
    checkVersion(res[1]);
    const status = Number(res[2]);
    if (status < 100 || status > 699) throw new ParseError(`SIP status ${status} is out of range`);
    head = { kind: "response", status, reason: res[3] ?? "", headers };
  } else {
    throw new ParseError(`bad SIP start line: ${JSON.stringify(start.slice(0, 80))}`);
  }
  checkHeaders(head);
  return head;
}

function checkVersion(version: string): void {
  if (version.toUpperCase() !== sipVersion) {
    throw new ParseError(`SIP version ${version} is not supported`);
  }
}

/** The mandatory headers of RFC 3261 §8.1.1 and their forms. */
function checkHeaders(head: Head): void {
  const { headers } = head;
  for (const key of singleHeaders) {
    const n = headers.getAll(key).length;
    if (n > 1) throw new ParseError(`SIP message has ${n} ${key} headers`);
  }
  for (const key of ["from", "to", "call-id", "cseq"]) {
    if (!headers.has(key)) throw new ParseError(`SIP message without ${key}`);
  }
  const vias = headers.getAll("via");
  if (vias.length === 0) throw new ParseError("SIP message without via");
  for (const via of vias) parseVia(via);
  if (!/^\S+$/.test(headers.get("call-id")!)) throw new ParseError("malformed Call-ID");
  const cseq = parseCSeq(headers.get("cseq")!);
  if (head.kind === "request" && cseq.method !== head.method) {
    throw new ParseError(`CSeq method ${cseq.method} is not the request's ${head.method}`);
  }
  for (const key of ["from", "to"]) {
    const { uriText } = splitNameAddr(headers.get(key)!);
    if (/^sips?:/i.test(uriText)) parseSipUri(uriText);
  }
  const maxForwards = headers.get("max-forwards");
  // Leading zeros are allowed (RFC 4475 §3.1.1.1 sends "0068").
  if (
    maxForwards !== undefined && !(/^\d{1,10}$/.test(maxForwards) && Number(maxForwards) <= 255)
  ) {
    throw new ParseError("malformed Max-Forwards");
  }
}

/** The Content-Length of a head, undefined when absent. */
function contentLength(head: Head): number | undefined {
  const value = head.headers.get("content-length");
  if (value === undefined) return undefined;
  if (!/^\d{1,10}$/.test(value)) throw new ParseError("malformed Content-Length");
  return Number(value);
}

/** Bytes of `data` from `at` that are CR or LF (leading keep-alives and blank lines). */
function skipLineEnds(data: Uint8Array, at: number, to: number): number {
  while (at < to && (data[at] === 0x0d || data[at] === 0x0a)) at++;
  return at;
}

/**
 * Whether a datagram is only CR and LF bytes: a keep-alive (RFC 5626 §4.4.1 on streams, sent
 * on UDP too by some user agents) to ignore rather than a message to refuse.
 */
export function isSipKeepAlive(datagram: Uint8Array): boolean {
  return datagram.length > 0 && skipLineEnds(datagram, 0, datagram.length) === datagram.length;
}

/** Parses one datagram holding one SIP message; anything malformed is a ParseError. */
export function parseSipMessage(datagram: Uint8Array): SipMessage {
  if (datagram.length > maxSipMessageBytes) {
    throw new ParseError(`SIP message of ${datagram.length} bytes exceeds ${maxSipMessageBytes}`);
  }
  const start = skipLineEnds(datagram, 0, datagram.length);
  const end = headEnd(datagram, start, datagram.length);
  if (end < 0) throw new ParseError("SIP message without the empty line ending its headers");
  const head = parseHead(utf8.decode(datagram.subarray(start, end)));
  const available = datagram.length - end;
  const length = contentLength(head) ?? available;
  if (length > available) {
    throw new ParseError(`SIP Content-Length ${length} exceeds the ${available} bytes of the body`);
  }
  // RFC 3261 §18.3: bytes past Content-Length in a datagram are discarded.
  return { ...head, body: datagram.slice(end, end + length) } as SipMessage;
}

/** The bytes of a message, with Content-Length written from the body and CRLF line ends. */
export function serializeSipMessage(message: SipMessage): Uint8Array {
  let head: string;
  if (message.kind === "request") {
    if (!tokenPattern.test(message.method)) throw new ParseError("bad SIP method");
    if (!/^[A-Za-z][A-Za-z0-9+.-]*:\S+$/.test(message.uri)) {
      throw new ParseError("bad SIP Request-URI");
    }
    head = `${message.method} ${message.uri} ${sipVersion}\r\n`;
  } else {
    if (!Number.isInteger(message.status) || message.status < 100 || message.status > 699) {
      throw new ParseError(`SIP status ${message.status} is out of range`);
    }
    if (/[\r\n]/.test(message.reason)) throw new ParseError("SIP reason holds a line break");
    head = `${sipVersion} ${message.status} ${message.reason}\r\n`;
  }
  for (const [name, value] of message.headers) {
    if (name !== "Content-Length") head += `${name}: ${value}\r\n`;
  }
  head += `Content-Length: ${message.body.length}\r\n\r\n`;
  const headBytes = encoder.encode(head);
  const out = new Uint8Array(headBytes.length + message.body.length);
  out.set(headBytes);
  out.set(message.body, headBytes.length);
  return out;
}

/** The text of a message as serialised (for logs and the call record). */
export function sipMessageText(message: SipMessage): string {
  return utf8.decode(serializeSipMessage(message));
}

/** Bytes the stream parser starts with; it grows when a message needs more. */
const initialStreamBytes = 4 * 1024;

/**
 * Splits the byte stream of a SIP connection (TCP, TLS) into messages by their Content-Length,
 * which a stream must carry (RFC 3261 §18.3). CRLF keep-alives between messages (RFC 5626
 * §3.5.1) are skipped. It never holds more than `maxSipMessageBytes` plus one chunk; a
 * malformed stream is a ParseError, and so is every later push (a stream cannot be
 * resynchronised after one).
 */
export class SipStreamParser {
  #buf = new Uint8Array(initialStreamBytes);
  #start = 0;
  #end = 0;
  /** Where the search for the end of the header block goes on. */
  #scan = 0;
  /** The parsed head of the message whose body is awaited, and where its body starts. */
  #head?: { head: Head; bodyAt: number; length: number };
  #failure?: ParseError;

  /** Bytes held, not yet returned. */
  get buffered(): number {
    return this.#end - this.#start;
  }

  /** Adds bytes read from the connection; returns the messages they complete. */
  push(chunk: Uint8Array): SipMessage[] {
    if (this.#failure) throw this.#failure;
    try {
      this.#append(chunk);
      return this.#drain();
    } catch (err) {
      if (err instanceof ParseError) {
        this.#failure = err;
        this.#buf = new Uint8Array(0);
        this.#start = this.#end = this.#scan = 0;
      }
      throw err;
    }
  }

  #append(chunk: Uint8Array): void {
    if (this.#end + chunk.length > this.#buf.length) {
      const held = this.#end - this.#start;
      const needed = held + chunk.length;
      const buf = needed > this.#buf.length
        ? new Uint8Array(Math.max(needed, Math.min(this.#buf.length * 2, maxSipMessageBytes)))
        : this.#buf;
      buf.set(this.#buf.subarray(this.#start, this.#end));
      this.#scan -= this.#start;
      if (this.#head) this.#head.bodyAt -= this.#start;
      this.#buf = buf;
      this.#start = 0;
      this.#end = held;
    }
    this.#buf.set(chunk, this.#end);
    this.#end += chunk.length;
  }

  #drain(): SipMessage[] {
    const out: SipMessage[] = [];
    for (;;) {
      if (!this.#head) {
        this.#start = skipLineEnds(this.#buf, this.#start, this.#end);
        this.#scan = Math.max(this.#scan, this.#start);
        const end = headEnd(this.#buf, this.#scan, this.#end);
        if (end < 0) {
          // Resume a line end's length back: the empty line may straddle two chunks.
          this.#scan = Math.max(this.#start, this.#end - 2);
          if (this.buffered > maxSipMessageBytes) {
            throw new ParseError(`SIP header block exceeds ${maxSipMessageBytes} bytes`);
          }
          break;
        }
        const head = parseHead(utf8.decode(this.#buf.subarray(this.#start, end)));
        const length = contentLength(head);
        if (length === undefined) {
          throw new ParseError("SIP message on a stream without Content-Length");
        }
        if (end - this.#start + length > maxSipMessageBytes) {
          throw new ParseError(`SIP message exceeds ${maxSipMessageBytes} bytes`);
        }
        this.#head = { head, bodyAt: end, length };
      }
      const { head, bodyAt, length } = this.#head;
      if (this.#end - bodyAt < length) break;
      out.push({ ...head, body: this.#buf.slice(bodyAt, bodyAt + length) } as SipMessage);
      this.#head = undefined;
      this.#start = this.#scan = bodyAt + length;
    }
    if (this.#start === this.#end) this.#start = this.#end = this.#scan = 0;
    return out;
  }
}
