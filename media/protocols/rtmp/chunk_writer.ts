/**
 * Chunk stream multiplexer (RTMP 1.0 §5.3.1): one message out as chunk bytes. Every message
 * starts with a format 0 header (absolute timestamp) and continues with format 3 chunks, so
 * the bytes depend only on the message and the chunk size: a media frame is serialized once
 * and the same bytes are written to every player.
 */
import { ParseError } from "../../../core/errors.ts";
import { extendedTimestampMarker, maxMessageBytes } from "./chunk_reader.ts";
import type { RtmpMessage } from "./message.ts";

/** Chunk size this server sends with, in bytes (what nginx-rtmp and OBS use). */
export const outChunkBytes = 4096;

function basicHeaderBytes(csid: number): number {
  return csid < 64 ? 1 : csid < 320 ? 2 : 3;
}

function writeBasicHeader(out: Uint8Array, pos: number, fmt: number, csid: number): number {
  if (csid < 64) {
    out[pos] = (fmt << 6) | csid;
    return pos + 1;
  }
  if (csid < 320) {
    out[pos] = fmt << 6;
    out[pos + 1] = csid - 64;
    return pos + 2;
  }
  out[pos] = (fmt << 6) | 1;
  out[pos + 1] = (csid - 64) & 0xff;
  out[pos + 2] = (csid - 64) >> 8;
  return pos + 3;
}

/**
 * Chunk bytes of `message` on chunk stream `csid` (2..65599) with chunks of `chunkBytes`,
 * after the bytes of `lead` (chunks of earlier messages to send in the same write).
 */
export function writeChunks(
  csid: number,
  message: RtmpMessage,
  chunkBytes: number,
  lead: readonly Uint8Array[] = [],
): Uint8Array {
  const { payload, type, streamId } = message;
  if (csid < 2 || csid > 65599) throw new ParseError(`RTMP chunk stream id ${csid} out of range`);
  if (payload.length > maxMessageBytes) throw new ParseError("RTMP message too large to send");
  const timestamp = message.timestamp >>> 0;
  const extended = timestamp >= extendedTimestampMarker;
  const chunks = Math.max(1, Math.ceil(payload.length / chunkBytes));
  const basic = basicHeaderBytes(csid);
  const ext = extended ? 4 : 0;
  let pos = 0;
  for (const part of lead) pos += part.length;
  const out = new Uint8Array(
    pos + basic + 11 + ext + (chunks - 1) * (basic + ext) + payload.length,
  );
  pos = 0;
  for (const part of lead) {
    out.set(part, pos);
    pos += part.length;
  }
  pos = writeBasicHeader(out, pos, 0, csid);
  const ts = extended ? extendedTimestampMarker : timestamp;
  out[pos++] = ts >> 16;
  out[pos++] = (ts >> 8) & 0xff;
  out[pos++] = ts & 0xff;
  out[pos++] = payload.length >> 16;
  out[pos++] = (payload.length >> 8) & 0xff;
  out[pos++] = payload.length & 0xff;
  out[pos++] = type;
  out[pos++] = streamId & 0xff; // the message stream id is little-endian
  out[pos++] = (streamId >> 8) & 0xff;
  out[pos++] = (streamId >> 16) & 0xff;
  out[pos++] = (streamId >>> 24) & 0xff;
  for (let offset = 0; offset < payload.length || offset === 0; offset += chunkBytes) {
    if (offset > 0) pos = writeBasicHeader(out, pos, 3, csid);
    if (extended) {
      out[pos++] = timestamp >>> 24;
      out[pos++] = (timestamp >> 16) & 0xff;
      out[pos++] = (timestamp >> 8) & 0xff;
      out[pos++] = timestamp & 0xff;
    }
    const end = Math.min(payload.length, offset + chunkBytes);
    out.set(payload.subarray(offset, end), pos);
    pos += end - offset;
    if (payload.length === 0) break;
  }
  return out;
}

/** Chunk bytes of several messages as one buffer, to send them with one write. */
export function joinChunkBytes(parts: readonly Uint8Array[]): Uint8Array {
  let size = 0;
  for (const p of parts) size += p.length;
  const out = new Uint8Array(size);
  let offset = 0;
  for (const p of parts) {
    out.set(p, offset);
    offset += p.length;
  }
  return out;
}
