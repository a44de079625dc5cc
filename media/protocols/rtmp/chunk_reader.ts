/**
 * Chunk stream demultiplexer (RTMP 1.0 §5.3): bytes in, complete messages out. Handles the
 * four header formats, 1-3 byte chunk stream ids, extended timestamps (also on format 3
 * chunks, as ffmpeg and nginx-rtmp send them), Set Chunk Size and Abort.
 *
 * Memory is bounded: input is kept only up to one incomplete chunk, a message may not declare
 * more than `maxMessageBytes`, and partial messages together may not hold more than that.
 */
import { ParseError, TruncatedError } from "../../../core/errors.ts";
import { MessageType, parseSetChunkSize, type RtmpMessage } from "./message.ts";

/** Chunk size both sides start with, in bytes. */
export const defaultChunkBytes = 128;
/** Largest chunk size accepted from a peer, in bytes; bounds the input kept for one chunk. */
export const maxChunkBytes = 1 << 20;
/** Largest message accepted, in bytes (a keyframe of a high-rate stream fits many times). */
export const maxMessageBytes = 8 << 20;
/** Most chunk streams a peer may use at once. */
export const maxChunkStreams = 64;
/** Longest chunk header: 3-byte basic header, 11-byte message header, 4-byte extended time. */
export const maxChunkHeaderBytes = 18;

/** The timestamp field value that says an extended timestamp follows. */
export const extendedTimestampMarker = 0xffffff;

interface ChunkStream {
  timestamp: number;
  /** Last timestamp field (delta for formats 1-2, 0 after format 0), reapplied by format 3. */
  delta: number;
  length: number;
  type: number;
  streamId: number;
  /** The last format 0-2 header carried an extended timestamp. */
  extended: boolean;
  /** Payload pieces of the message being assembled. */
  pieces: Uint8Array[];
  received: number;
}

/** What a reader keeps between pushes when they end on a chunk boundary: one shared empty view. */
const noBytes = new Uint8Array(0);

/** Reassembles RTMP messages from the bytes of a connection. */
export class ChunkReader {
  #chunkBytes = defaultChunkBytes;
  #streams = new Map<number, ChunkStream>();
  #rest: Uint8Array = noBytes;
  #pendingBytes = 0;
  /** Bytes consumed since the start, for acknowledgements (grows past 2^32; callers wrap). */
  bytesReceived = 0;

  /** The chunk size in force for incoming chunks, in bytes. */
  get chunkBytes(): number {
    return this.#chunkBytes;
  }

  /**
   * Feeds bytes; returns the messages they complete. Set Chunk Size and Abort are applied
   * here and also returned. Malformed input throws ParseError; the reader is then unusable.
   */
  push(data: Uint8Array): RtmpMessage[] {
    this.bytesReceived += data.length;
    let input = data;
    if (this.#rest.length > 0) {
      input = new Uint8Array(this.#rest.length + data.length);
      input.set(this.#rest);
      input.set(data, this.#rest.length);
    }
    const out: RtmpMessage[] = [];
    let pos = 0;
    for (;;) {
      const used = this.#readChunk(input, pos, out);
      if (used === 0) break;
      pos += used;
    }
    // Kept as a copy: the caller reuses its read buffer.
    this.#rest = pos === input.length ? noBytes : input.slice(pos);
    return out;
  }

  /** Checks that the input ended between messages; a partial chunk or message is a TruncatedError. */
  end(): void {
    if (this.#rest.length > 0 || this.#pendingBytes > 0) {
      throw new TruncatedError("RTMP connection ended inside a chunk or message");
    }
  }

  /** Reads one chunk at `pos`; returns the bytes used, or 0 when it is not all there yet. */
  #readChunk(input: Uint8Array, pos: number, out: RtmpMessage[]): number {
    const start = pos;
    const avail = input.length - pos;
    if (avail < 1) return 0;
    const fmt = input[pos] >> 6;
    let csid = input[pos] & 0x3f;
    pos++;
    if (csid === 0) {
      if (avail < 2) return 0;
      csid = 64 + input[pos++];
    } else if (csid === 1) {
      if (avail < 3) return 0;
      csid = 64 + input[pos] + (input[pos + 1] << 8);
      pos += 2;
    }
    let cs = this.#streams.get(csid);
    if (!cs && fmt !== 0) {
      throw new ParseError(`RTMP chunk stream ${csid} starts without a full header`);
    }
    const headerBytes = fmt === 0 ? 11 : fmt === 1 ? 7 : fmt === 2 ? 3 : 0;
    if (input.length - pos < headerBytes) return 0;
    if (!cs) {
      if (this.#streams.size >= maxChunkStreams) {
        throw new ParseError(`RTMP peer uses more than ${maxChunkStreams} chunk streams`);
      }
      cs = {
        timestamp: 0,
        delta: 0,
        length: 0,
        type: 0,
        streamId: 0,
        extended: false,
        pieces: [],
        received: 0,
      };
    }
    const newMessage = cs.received === 0;
    if (!newMessage && fmt !== 3) {
      throw new ParseError(`RTMP chunk stream ${csid}: new header inside a message`);
    }
    let tsField = 0;
    let length = cs.length;
    let type = cs.type;
    let streamId = cs.streamId;
    if (fmt <= 2) {
      tsField = (input[pos] << 16) | (input[pos + 1] << 8) | input[pos + 2];
      if (fmt <= 1) {
        length = (input[pos + 3] << 16) | (input[pos + 4] << 8) | input[pos + 5];
        type = input[pos + 6];
      }
      if (fmt === 0) {
        streamId = input[pos + 7] | (input[pos + 8] << 8) | (input[pos + 9] << 16) |
          ((input[pos + 10] << 24) >>> 0);
      }
    }
    pos += headerBytes;
    const extended = fmt <= 2 ? tsField === extendedTimestampMarker : cs.extended;
    if (extended) {
      if (input.length - pos < 4) return 0;
      if (fmt <= 2) {
        tsField = ((input[pos] << 24) >>> 0) + (input[pos + 1] << 16) + (input[pos + 2] << 8) +
          input[pos + 3];
      }
      pos += 4;
    }
    if (length > maxMessageBytes) {
      throw new ParseError(`RTMP message of ${length} bytes exceeds ${maxMessageBytes}`);
    }
    const take = Math.min(this.#chunkBytes, length - cs.received);
    if (input.length - pos < take) return 0;

    // The chunk is complete: commit its header.
    if (!this.#streams.has(csid)) this.#streams.set(csid, cs);
    if (newMessage) {
      if (fmt === 0) {
        cs.timestamp = tsField;
        cs.delta = 0;
      } else if (fmt <= 2) {
        cs.delta = tsField;
        cs.timestamp = (cs.timestamp + tsField) >>> 0;
      } else {
        cs.timestamp = (cs.timestamp + cs.delta) >>> 0;
      }
      if (fmt <= 2) cs.extended = extended;
      cs.length = length;
      cs.type = type;
      cs.streamId = streamId;
    }
    if (take > 0) {
      if (this.#pendingBytes + take > maxMessageBytes) {
        throw new ParseError("RTMP partial messages exceed the buffer limit");
      }
      cs.pieces.push(input.slice(pos, pos + take));
      cs.received += take;
      this.#pendingBytes += take;
    }
    pos += take;
    if (cs.received === cs.length) this.#complete(cs, out);
    return pos - start;
  }

  #complete(cs: ChunkStream, out: RtmpMessage[]): void {
    let payload: Uint8Array;
    if (cs.pieces.length === 1) payload = cs.pieces[0];
    else {
      payload = new Uint8Array(cs.length);
      let offset = 0;
      for (const piece of cs.pieces) {
        payload.set(piece, offset);
        offset += piece.length;
      }
    }
    this.#pendingBytes -= cs.received;
    cs.pieces = [];
    cs.received = 0;
    const message = { type: cs.type, streamId: cs.streamId, timestamp: cs.timestamp, payload };
    if (message.type === MessageType.setChunkSize) {
      const size = parseSetChunkSize(payload);
      if (size > maxChunkBytes) {
        throw new ParseError(`RTMP chunk size ${size} exceeds ${maxChunkBytes}`);
      }
      this.#chunkBytes = size;
    } else if (message.type === MessageType.abort && payload.length >= 4) {
      const target = this.#streams.get(
        new DataView(payload.buffer, payload.byteOffset).getUint32(0),
      );
      if (target && target !== cs) {
        this.#pendingBytes -= target.received;
        target.pieces = [];
        target.received = 0;
      }
    }
    out.push(message);
  }
}
