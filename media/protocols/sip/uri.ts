/**
 * SIP and SIPS URIs (RFC 3261 §19.1, §25.1) and the name-addr / addr-spec values of From, To,
 * Contact, Route, Refer-To (RFC 3261 §20.10, §20.20, §20.39): parsed into parts with the
 * escapes decoded, and written back with what must be escaped escaped.
 */
import { ParseError } from "../../../core/errors.ts";

/** A sip: or sips: URI. */
export interface SipUri {
  scheme: "sip" | "sips";
  /** The user part, percent-decoded. */
  user?: string;
  /** The password of the userinfo, percent-decoded (deprecated, RFC 3261 §19.1.1). */
  password?: string;
  /** Host name, IPv4 address, or IPv6 address without its brackets. */
  host: string;
  port?: number;
  /** URI parameters by lower-case name, values decoded; a flag ("lr", "rport") maps to "". */
  params: Map<string, string>;
  /** The `?name=value&...` headers of the URI, decoded. */
  headers: Map<string, string>;
}

/** A From/To/Contact/Route/Refer-To value: an optional display name, the URI, header params. */
export interface NameAddr {
  displayName?: string;
  uri: SipUri;
  /**
   * Header parameters (tag, expires, q, +sip.instance...) by lower-case name; a flag maps to
   * "", a quoted value keeps its quotes so it is written back unchanged.
   */
  params: Map<string, string>;
}

const unreserved = String.raw`A-Za-z0-9\-_.!~*'()`;
/** Characters a user part holds unescaped (RFC 3261 §25.1 user-unreserved). */
const userChars = new RegExp(`^(?:[${unreserved}&=+$,;?/]|%[0-9A-Fa-f]{2})+$`);
const userSafe = new RegExp(`[${unreserved}&=+$,;?/]`);
const passwordChars = new RegExp(`^(?:[${unreserved}&=+$,]|%[0-9A-Fa-f]{2})*$`);
const passwordSafe = new RegExp(`[${unreserved}&=+$,]`);
/** Characters of URI parameter names and values (paramchar). */
const paramChars = new RegExp(`^(?:[${unreserved}\\[\\]/:&+$]|%[0-9A-Fa-f]{2})+$`);
const paramSafe = new RegExp(`[${unreserved}\\[\\]/:&+$]`);
/** Characters of URI header names and values (hnv-unreserved). */
const headerChars = new RegExp(`^(?:[${unreserved}\\[\\]/?:+$]|%[0-9A-Fa-f]{2})*$`);
const headerSafe = new RegExp(`[${unreserved}\\[\\]/?:+$]`);
const hostnamePattern = /^[A-Za-z0-9_](?:[A-Za-z0-9_.-]*)$/;
/** RFC 3261 §25.1 token. */
export const tokenPattern = /^[A-Za-z0-9\-.!%*_+`'~]+$/;

/** Whether `text` holds a control character (below 0x20, or DEL). */
function hasControl(text: string): boolean {
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c < 0x20 || c === 0x7f) return true;
  }
  return false;
}

/** Whether `text` holds CR or LF, which would break a header line apart. */
export function breaksLine(text: string): boolean {
  return text.includes("\r") || text.includes("\n");
}

const utf8 = new TextDecoder("utf-8", { fatal: true });
const encoder = new TextEncoder();

function percentDecode(text: string, what: string): string {
  if (!text.includes("%")) return text;
  const bytes: number[] = [];
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x25) {
      const hex = text.slice(i + 1, i + 3);
      if (!/^[0-9A-Fa-f]{2}$/.test(hex)) throw new ParseError(`bad escape in SIP URI ${what}`);
      bytes.push(parseInt(hex, 16));
      i += 2;
    } else {
      bytes.push(...encoder.encode(text[i]));
    }
  }
  try {
    return utf8.decode(new Uint8Array(bytes));
  } catch {
    throw new ParseError(`SIP URI ${what} is not UTF-8 once decoded`);
  }
}

function percentEncode(text: string, safe: RegExp): string {
  let out = "";
  for (const ch of text) {
    if (safe.test(ch)) out += ch;
    else {for (const b of encoder.encode(ch)) {
        out += `%${b.toString(16).toUpperCase().padStart(2, "0")}`;
      }}
  }
  return out;
}

/** Whether `text` is an IPv6 address (RFC 4291 §2.2 text forms, an IPv4 tail included). */
function isIpv6(text: string): boolean {
  const halves = text.split("::");
  if (halves.length > 2) return false;
  const groups = halves.map((h) => (h === "" ? [] : h.split(":")));
  const all = groups.flat();
  let count = all.length;
  const last = all.at(-1);
  if (last !== undefined && last.includes(".")) {
    if (!text.endsWith(last)) return false;
    if (
      !/^(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)$/.test(
        last,
      )
    ) {
      return false;
    }
    all.pop();
    count++;
  }
  if (!all.every((g) => /^[0-9A-Fa-f]{1,4}$/.test(g))) return false;
  return halves.length === 2 ? count <= 7 : count === 8;
}

/** Checks a host (name, IPv4, or IPv6 without brackets) and returns it. */
function checkHost(host: string, what: string): string {
  if (host.includes(":") ? !isIpv6(host) : !hostnamePattern.test(host)) {
    throw new ParseError(`bad host in ${what}: ${JSON.stringify(host.slice(0, 64))}`);
  }
  return host;
}

/** Parses a port number (0-65535) written in decimal. */
export function parsePort(text: string, what: string): number {
  if (!/^\d{1,5}$/.test(text)) throw new ParseError(`bad port in ${what}`);
  const port = Number(text);
  if (port > 65535) throw new ParseError(`port ${port} in ${what} is out of range`);
  return port;
}

/**
 * Splits `host[:port]` (host an IPv6 reference in brackets, or a name or IPv4 address) as
 * written in a URI or a Via sent-by.
 */
export function parseHostPort(text: string, what: string): { host: string; port?: number } {
  let host: string;
  let rest: string;
  if (text.startsWith("[")) {
    const close = text.indexOf("]");
    if (close < 0) throw new ParseError(`unclosed IPv6 reference in ${what}`);
    host = text.slice(1, close);
    if (!host.includes(":")) throw new ParseError(`bad IPv6 reference in ${what}`);
    rest = text.slice(close + 1);
  } else {
    const colon = text.indexOf(":");
    host = colon < 0 ? text : text.slice(0, colon);
    rest = colon < 0 ? "" : text.slice(colon);
  }
  checkHost(host, what);
  if (rest === "") return { host };
  if (!rest.startsWith(":")) throw new ParseError(`bad host:port in ${what}`);
  return { host, port: parsePort(rest.slice(1), what) };
}

/** Parses a sip: or sips: URI; anything malformed is a ParseError. */
export function parseSipUri(text: string): SipUri {
  const value = text.trim();
  if (/[\s"<>]/.test(value) || hasControl(value)) {
    throw new ParseError("SIP URI holds a forbidden character");
  }
  const m = /^(sips?):(.+)$/i.exec(value);
  if (!m) throw new ParseError(`not a sip: or sips: URI: ${JSON.stringify(value.slice(0, 64))}`);
  const scheme = m[1].toLowerCase() as "sip" | "sips";
  let rest = m[2];
  const uri: SipUri = { scheme, host: "", params: new Map(), headers: new Map() };
  const at = rest.indexOf("@");
  if (at >= 0) {
    if (rest.indexOf("@", at + 1) >= 0) throw new ParseError("SIP URI holds more than one @");
    const userinfo = rest.slice(0, at);
    rest = rest.slice(at + 1);
    const colon = userinfo.indexOf(":");
    const user = colon < 0 ? userinfo : userinfo.slice(0, colon);
    if (!userChars.test(user)) throw new ParseError("bad user part in SIP URI");
    uri.user = percentDecode(user, "user");
    if (colon >= 0) {
      const password = userinfo.slice(colon + 1);
      if (!passwordChars.test(password)) throw new ParseError("bad password in SIP URI");
      uri.password = percentDecode(password, "password");
    }
  }
  const question = rest.indexOf("?");
  const headersText = question < 0 ? undefined : rest.slice(question + 1);
  if (question >= 0) rest = rest.slice(0, question);
  const semi = rest.indexOf(";");
  const { host, port } = parseHostPort(semi < 0 ? rest : rest.slice(0, semi), "SIP URI");
  uri.host = host;
  if (port !== undefined) uri.port = port;
  if (semi >= 0) {
    for (const param of rest.slice(semi + 1).split(";")) {
      const eq = param.indexOf("=");
      const name = eq < 0 ? param : param.slice(0, eq);
      const raw = eq < 0 ? "" : param.slice(eq + 1);
      if (!paramChars.test(name) || (raw !== "" && !paramChars.test(raw))) {
        throw new ParseError("bad parameter in SIP URI");
      }
      const key = percentDecode(name, "parameter").toLowerCase();
      // RFC 3261 §19.1.1: a parameter appears at most once; the first one counts.
      if (!uri.params.has(key)) uri.params.set(key, percentDecode(raw, "parameter"));
    }
  }
  if (headersText !== undefined) {
    for (const header of headersText.split("&")) {
      const eq = header.indexOf("=");
      if (eq <= 0) throw new ParseError("bad header in SIP URI");
      const name = header.slice(0, eq);
      const raw = header.slice(eq + 1);
      if (!headerChars.test(name) || !headerChars.test(raw)) {
        throw new ParseError("bad header in SIP URI");
      }
      uri.headers.set(percentDecode(name, "header"), percentDecode(raw, "header"));
    }
  }
  return uri;
}

/** Writes a SIP URI, escaping what its part does not allow plain. */
export function formatSipUri(uri: SipUri): string {
  let out = `${uri.scheme}:`;
  if (uri.user !== undefined) {
    if (uri.user === "") throw new ParseError("empty user part in SIP URI");
    out += percentEncode(uri.user, userSafe);
    if (uri.password !== undefined) out += `:${percentEncode(uri.password, passwordSafe)}`;
    out += "@";
  }
  const host = checkHost(uri.host, "SIP URI");
  out += host.includes(":") ? `[${host}]` : host;
  if (uri.port !== undefined) {
    if (!Number.isInteger(uri.port) || uri.port < 0 || uri.port > 65535) {
      throw new ParseError(`port ${uri.port} in SIP URI is out of range`);
    }
    out += `:${uri.port}`;
  }
  for (const [name, value] of uri.params) {
    if (name === "") throw new ParseError("empty parameter name in SIP URI");
    out += `;${percentEncode(name, paramSafe)}`;
    if (value !== "") out += `=${percentEncode(value, paramSafe)}`;
  }
  let sep = "?";
  for (const [name, value] of uri.headers) {
    if (name === "") throw new ParseError("empty header name in SIP URI");
    out += `${sep}${percentEncode(name, headerSafe)}=${percentEncode(value, headerSafe)}`;
    sep = "&";
  }
  return out;
}

/** One `;name[=value]` of a header, value a token, host or quoted string (RFC 3261 §25.1). */
const headerParamPattern =
  /[ \t]*;[ \t]*([A-Za-z0-9\-.!%*_+`'~]+)(?:[ \t]*=[ \t]*("(?:[^"\\\r\n]|\\[^\r\n])*"|[^\s;,"]+))?[ \t]*/y;

/**
 * Parses the `;name=value` parameters that follow a header value (`text` starts at the first
 * semicolon, or is empty). Names are lower-cased, a flag maps to "", a quoted value keeps its
 * quotes; the first of repeated names counts.
 */
export function parseHeaderParams(text: string, what: string): Map<string, string> {
  const params = new Map<string, string>();
  if (text.trim() === "") return params;
  headerParamPattern.lastIndex = 0;
  while (headerParamPattern.lastIndex < text.length) {
    const m = headerParamPattern.exec(text);
    if (!m) throw new ParseError(`bad parameter in ${what}`);
    const key = m[1].toLowerCase();
    if (!params.has(key)) params.set(key, m[2] ?? "");
  }
  return params;
}

/** Writes `;name[=value]` header parameters; a value that is not a token or host is refused. */
export function formatHeaderParams(params: Map<string, string>, what: string): string {
  let out = "";
  for (const [name, value] of params) {
    if (!tokenPattern.test(name)) throw new ParseError(`bad parameter name in ${what}`);
    if (value === "") {
      out += `;${name}`;
      continue;
    }
    if (!/^(?:"(?:[^"\\\r\n]|\\[^\r\n])*"|[^\s;,"]+)$/.test(value)) {
      throw new ParseError(`bad value of parameter ${name} in ${what}`);
    }
    out += `;${name}=${value}`;
  }
  return out;
}

/** Reads a quoted string starting at `text[from]` (a `"`): its unescaped text and end. */
function readQuoted(text: string, from: number): { value: string; end: number } {
  let value = "";
  for (let i = from + 1; i < text.length; i++) {
    const ch = text[i];
    if (ch === "\\") {
      if (i + 1 >= text.length) break;
      value += text[++i];
    } else if (ch === '"') {
      return { value, end: i + 1 };
    } else {
      value += ch;
    }
  }
  throw new ParseError("unterminated quoted string");
}

/** A name-addr split into its parts, the URI still as text (any scheme). */
export interface NameAddrParts {
  displayName?: string;
  /** The URI as written, without the angle brackets. */
  uriText: string;
  params: Map<string, string>;
}

/** An unquoted display name: tokens (non-ASCII letters tolerated) apart by white space. */
const unquotedDisplayName =
  /^(?:[A-Za-z0-9\-.!%*_+`'~]|[\u0080-\uffff])+(?:[ \t]+(?:[A-Za-z0-9\-.!%*_+`'~]|[\u0080-\uffff])+)*$/;
/** An absolute URI of any scheme (RFC 3261 §25.1 absoluteURI), as a name-addr holds it. */
const absoluteUri = /^[A-Za-z][A-Za-z0-9+.\-]*:[^\s"<>]+$/;

/**
 * Splits a name-addr (`"Bob" <sip:bob@h>;tag=x`, `Bob <tel:+1>`) or an addr-spec
 * (`sip:bob@h;tag=x`, whose parameters belong to the header, RFC 3261 §20.10) without
 * parsing the URI beyond checking it is an absolute URI. Malformed is a ParseError.
 */
export function splitNameAddr(text: string): NameAddrParts {
  const value = text.trim();
  if (breaksLine(value)) throw new ParseError("name-addr holds a line break");
  let displayName: string | undefined;
  let uriText: string;
  let rest: string;
  let at = 0;
  if (value.startsWith('"')) {
    const quoted = readQuoted(value, 0);
    displayName = quoted.value;
    at = quoted.end;
    while (value[at] === " " || value[at] === "\t") at++;
    if (value[at] !== "<") throw new ParseError("display name without <URI>");
  }
  const lt = value.indexOf("<", at);
  if (lt >= 0) {
    if (displayName === undefined) {
      const name = value.slice(0, lt).trim();
      if (name !== "" && !unquotedDisplayName.test(name)) throw new ParseError("bad display name");
      if (name !== "") displayName = name.replace(/[ \t]+/g, " ");
    }
    const gt = value.indexOf(">", lt);
    if (gt < 0) throw new ParseError("unclosed <URI>");
    uriText = value.slice(lt + 1, gt).trim();
    rest = value.slice(gt + 1);
  } else {
    const semi = value.indexOf(";");
    uriText = (semi < 0 ? value : value.slice(0, semi)).trim();
    rest = semi < 0 ? "" : value.slice(semi);
  }
  if (!absoluteUri.test(uriText)) throw new ParseError("name-addr without an absolute URI");
  const params = parseHeaderParams(rest, "name-addr");
  return displayName === undefined ? { uriText, params } : { displayName, uriText, params };
}

/**
 * Parses a name-addr (`"Bob" <sip:bob@h>;tag=x`, `Bob <sip:bob@h>`) or an addr-spec
 * (`sip:bob@h;tag=x`, whose parameters belong to the header, RFC 3261 §20.10) whose URI is a
 * sip: or sips: one.
 */
export function parseNameAddr(text: string): NameAddr {
  const { displayName, uriText, params } = splitNameAddr(text);
  const uri = parseSipUri(uriText);
  return displayName === undefined ? { uri, params } : { displayName, uri, params };
}

/** Writes a name-addr, always with the URI in <> and a display name quoted. */
export function formatNameAddr(value: NameAddr): string {
  let out = "";
  if (value.displayName !== undefined && value.displayName !== "") {
    if (breaksLine(value.displayName)) {
      throw new ParseError("display name holds a line break");
    }
    out += `"${value.displayName.replace(/["\\]/g, "\\$&")}" `;
  }
  return `${out}<${formatSipUri(value.uri)}>${formatHeaderParams(value.params, "name-addr")}`;
}
