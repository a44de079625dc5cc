/**
 * The I/O of the opening handshake: reading one request head from a fresh connection, and
 * writing a whole response.
 */
import { HandshakeError, headEnd, maxRequestHeadBytes, parseRequestHead } from "./handshake.ts";
import type { RequestHead } from "./handshake.ts";

/** Bytes read at a time while the head is incomplete. */
const headChunkBytes = 2048;

/** A request head and the bytes the client sent after it (early frames). */
export interface ReadHead {
  readonly head: RequestHead;
  readonly rest: Uint8Array;
}

/**
 * Reads until the end of the request head; undefined when the client closes first. Throws
 * HandshakeError: 431 past maxRequestHeadBytes, 400 for a malformed head.
 */
export async function readRequestHead(conn: Deno.Conn): Promise<ReadHead | undefined> {
  let buffer = new Uint8Array(headChunkBytes);
  let filled = 0;
  for (;;) {
    if (filled === buffer.length) {
      if (buffer.length >= maxRequestHeadBytes) {
        throw new HandshakeError(431, `request head over ${maxRequestHeadBytes} bytes`);
      }
      const grown = new Uint8Array(Math.min(buffer.length * 2, maxRequestHeadBytes));
      grown.set(buffer);
      buffer = grown;
    }
    const n = await conn.read(buffer.subarray(filled));
    if (n === null) return undefined;
    // The end marker may straddle two reads: look from 3 bytes before the new ones.
    const searchFrom = Math.max(0, filled - 3);
    filled += n;
    const end = headEnd(buffer.subarray(searchFrom, filled));
    if (end >= 0) {
      const at = searchFrom + end;
      return { head: parseRequestHead(buffer.subarray(0, at - 4)), rest: buffer.slice(at, filled) };
    }
  }
}

/** Writes all of `bytes`. */
export async function writeAll(conn: Deno.Conn, bytes: Uint8Array): Promise<void> {
  for (let at = 0; at < bytes.length;) at += await conn.write(bytes.subarray(at));
}
