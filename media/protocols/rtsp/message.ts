/**
 * RTSP 1.0 messages on the wire (RFC 2326 §4, §6, §7, §10.12): requests the client writes,
 * and the byte stream it reads back, which mixes responses, requests of the server and
 * interleaved binary frames (`$`, channel, 16-bit length, data).
 */
import { ParseError } from "../../../core/errors.ts";

/** Most bytes of a start line plus headers; a longer header block is refused. */
export const maxHeaderBytes = 16 * 1024;
/** Largest message body accepted (an SDP), in bytes. */
export const maxBodyBytes = 256 * 1024;
/** Bytes the parser may hold: one largest message plus one read of the socket. */
export const parserCapacityBytes = maxHeaderBytes + maxBodyBytes + 64 * 1024;

/** Header fields by lower-case name; a repeated field keeps every value in order. */
export class RtspHeaders {
  #fields = new Map<string, string[]>();

  /** Adds a value (repeated names keep all values). */
  add(name: string, value: string): void {
    const key = name.toLowerCase();
    const values = this.#fields.get(key);
    if (values) values.push(value);
    else this.#fields.set(key, [value]);
  }

  /** The first value of a field, if present. */
  get(name: string): string | undefined {
    return this.#fields.get(name.toLowerCase())?.[0];
  }

  /** Every value of a field. */
  getAll(name: string): readonly string[] {
    return this.#fields.get(name.toLowerCase()) ?? [];
  }
}

/** A response of the server. */
export interface RtspResponse {
  kind: "response";
  status: number;
  reason: string;
  headers: RtspHeaders;
  body: Uint8Array;
}

/** A request sent by the server (e.g. GET_PARAMETER or ANNOUNCE); clients may ignore it. */
export interface RtspServerRequest {
  kind: "request";
  method: string;
  url: string;
  headers: RtspHeaders;
  body: Uint8Array;
}

/** An interleaved binary frame (RFC 2326 §10.12): an RTP or RTCP packet on `channel`. */
export interface InterleavedFrame {
  kind: "interleaved";
  channel: number;
  /** The packet, in its own memory (safe to keep). */
  data: Uint8Array;
}

/** Anything read from an RTSP connection. */
export type RtspIncoming = RtspResponse | RtspServerRequest | InterleavedFrame;

/** A request to write. */
export interface RtspRequest {
  method: string;
  url: string;
  /** Header fields in order; CSeq is among them. */
  headers: [string, string][];
  body?: Uint8Array;
}

const encoder = new TextEncoder();
const latin1 = new TextDecoder("latin1");

/** The bytes of a request. */
export function writeRequest(req: RtspRequest): Uint8Array {
  if (/[\s]/.test(req.method) || /[\r\n ]/.test(req.url)) {
    throw new ParseError("RTSP method and URL must not hold white space");
  }
  return writeMessage(`${req.method} ${req.url} RTSP/1.0`, req.headers, req.body);
}

/**
 * The bytes of an RTSP message (request or response): its first line, header fields, a
 * Content-Length when there is a body, and the body.
 */
export function writeMessage(
  firstLine: string,
  headers: Iterable<[string, string]>,
  body: Uint8Array = new Uint8Array(0),
): Uint8Array {
  let head = `${firstLine}\r\n`;
  for (const [name, value] of headers) {
    if (/[\r\n]/.test(name) || /[\r\n]/.test(value)) {
      throw new ParseError(`RTSP header ${name} holds a line break`);
    }
    head += `${name}: ${value}\r\n`;
  }
  if (body.length > 0) head += `Content-Length: ${body.length}\r\n`;
  head += "\r\n";
  const headBytes = encoder.encode(head);
  if (body.length === 0) return headBytes;
  const out = new Uint8Array(headBytes.length + body.length);
  out.set(headBytes);
  out.set(body, headBytes.length);
  return out;
}

/** Bytes a parser starts with; it grows, up to `parserCapacityBytes`, when a message needs it. */
export const parserInitialBytes = 2 * 1024;

/**
 * Splits the byte stream of an RTSP connection into messages and interleaved frames. Bytes
 * are copied into one buffer that grows up to `parserCapacityBytes` and no further, so a
 * peer cannot make it grow beyond that (an idle connection holds `parserInitialBytes`); a
 * malformed stream is a ParseError (the connection cannot be resynchronised after one).
 */
export class RtspStreamParser {
  #buf = new Uint8Array(parserInitialBytes);
  #start = 0;
  #end = 0;

  /** Bytes held, not yet returned. */
  get buffered(): number {
    return this.#end - this.#start;
  }

  /** Appends bytes read from the connection. */
  push(chunk: Uint8Array): void {
    if (this.#end + chunk.length > this.#buf.length) {
      this.#buf.copyWithin(0, this.#start, this.#end);
      this.#end -= this.#start;
      this.#start = 0;
      const needed = this.#end + chunk.length;
      if (needed > parserCapacityBytes) {
        throw new ParseError("RTSP message larger than the parser's capacity");
      }
      if (needed > this.#buf.length) {
        const grown = new Uint8Array(
          Math.min(parserCapacityBytes, Math.max(needed, this.#buf.length * 2)),
        );
        grown.set(this.#buf.subarray(0, this.#end));
        this.#buf = grown;
      }
    }
    this.#buf.set(chunk, this.#end);
    this.#end += chunk.length;
  }

  /** The next complete message or frame, or undefined when more bytes are needed. */
  next(): RtspIncoming | undefined {
    const buf = this.#buf;
    // Some servers send bare line ends between messages.
    while (this.#start < this.#end && (buf[this.#start] === 13 || buf[this.#start] === 10)) {
      this.#advance(1);
    }
    const available = this.#end - this.#start;
    if (available === 0) return undefined;
    const s = this.#start;
    if (buf[s] === 0x24) {
      if (available < 4) return undefined;
      const length = (buf[s + 2] << 8) | buf[s + 3];
      if (available < 4 + length) return undefined;
      const frame: InterleavedFrame = {
        kind: "interleaved",
        channel: buf[s + 1],
        data: buf.slice(s + 4, s + 4 + length),
      };
      this.#advance(4 + length);
      return frame;
    }
    const headEnd = this.#findHeaderEnd();
    if (headEnd < 0) {
      if (available > maxHeaderBytes) throw new ParseError("RTSP header block too long");
      if (!this.#plausibleStart()) throw new ParseError("bytes that start no RTSP message");
      return undefined;
    }
    if (headEnd - s > maxHeaderBytes) throw new ParseError("RTSP header block too long");
    const lines = latin1.decode(buf.subarray(s, headEnd)).split("\r\n");
    const headers = new RtspHeaders();
    for (let i = 1; i < lines.length; i++) {
      const line = lines[i];
      if (line === "") continue;
      const colon = line.indexOf(":");
      if (colon <= 0) throw new ParseError(`malformed RTSP header line: ${line.slice(0, 64)}`);
      headers.add(line.slice(0, colon).trim(), line.slice(colon + 1).trim());
    }
    const lengthText = headers.get("content-length");
    let bodyLength = 0;
    if (lengthText !== undefined) {
      if (!/^\d{1,9}$/.test(lengthText)) throw new ParseError("bad RTSP Content-Length");
      bodyLength = Number(lengthText);
      if (bodyLength > maxBodyBytes) throw new ParseError("RTSP body too large");
    }
    const bodyStart = headEnd + 4;
    if (this.#end < bodyStart + bodyLength) return undefined;
    const body = buf.slice(bodyStart, bodyStart + bodyLength);
    const startLine = lines[0];
    this.#advance(bodyStart + bodyLength - s);
    const status = /^RTSP\/1\.\d (\d{3})(?: (.*))?$/.exec(startLine);
    if (status) {
      return {
        kind: "response",
        status: Number(status[1]),
        reason: status[2] ?? "",
        headers,
        body,
      };
    }
    const request = /^([A-Z_]+) (\S+) RTSP\/1\.\d$/.exec(startLine);
    if (request) {
      return { kind: "request", method: request[1], url: request[2], headers, body };
    }
    throw new ParseError(`malformed RTSP start line: ${startLine.slice(0, 64)}`);
  }

  #advance(n: number): void {
    this.#start += n;
    if (this.#start === this.#end) this.#start = this.#end = 0;
  }

  /** Index of the CRLFCRLF ending the header block, or -1. */
  #findHeaderEnd(): number {
    const buf = this.#buf;
    const limit = Math.min(this.#end, this.#start + maxHeaderBytes + 4) - 3;
    for (let i = this.#start; i < limit; i++) {
      if (buf[i] === 13 && buf[i + 1] === 10 && buf[i + 2] === 13 && buf[i + 3] === 10) return i;
    }
    return -1;
  }

  /** False when the held bytes cannot begin a message: fail now rather than wait forever. */
  #plausibleStart(): boolean {
    const n = Math.min(this.#end - this.#start, 5);
    for (let i = 0; i < n; i++) {
      const c = this.#buf[this.#start + i];
      // Start lines begin with "RTSP/" or an upper-case method name.
      if (!((c >= 0x41 && c <= 0x5a) || c === 0x5f || (i === 4 && c === 0x2f))) return false;
    }
    return true;
  }
}
