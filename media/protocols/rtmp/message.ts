/**
 * RTMP messages (RTMP 1.0 §5.4, §6, §7): type ids, the protocol control messages and the
 * user control events, as pure builders and parsers over payload bytes.
 */
import { ParseError, TruncatedError } from "../../../core/errors.ts";

/** A complete RTMP message, reassembled from its chunks. */
export interface RtmpMessage {
  /** Message type id (`MessageType`). */
  type: number;
  /** Message stream id (0 for the connection's control messages). */
  streamId: number;
  /** Timestamp, in milliseconds (32-bit, wraps). */
  timestamp: number;
  payload: Uint8Array;
}

/** Message type ids. */
export const MessageType = {
  setChunkSize: 1,
  abort: 2,
  acknowledgement: 3,
  userControl: 4,
  windowAckSize: 5,
  setPeerBandwidth: 6,
  audio: 8,
  video: 9,
  dataAmf3: 15,
  commandAmf3: 17,
  dataAmf0: 18,
  commandAmf0: 20,
} as const;

/** User control event types (§7.1.7). */
export const UserControlEvent = {
  streamBegin: 0,
  streamEof: 1,
  streamDry: 2,
  setBufferLength: 3,
  streamIsRecorded: 4,
  pingRequest: 6,
  pingResponse: 7,
} as const;

/** Chunk stream ids this server sends on; fixed so serialized media is the same for every player. */
export const ChunkStreamId = {
  control: 2,
  command: 3,
  audio: 4,
  data: 5,
  video: 6,
} as const;

/** Limit type of Set Peer Bandwidth: dynamic. */
export const peerBandwidthDynamic = 2;

function u32(value: number): Uint8Array {
  const out = new Uint8Array(4);
  new DataView(out.buffer).setUint32(0, value >>> 0);
  return out;
}

function readU32(payload: Uint8Array, offset: number, what: string): number {
  if (payload.length < offset + 4) throw new TruncatedError(`RTMP ${what} cut`);
  return new DataView(payload.buffer, payload.byteOffset, payload.length).getUint32(offset);
}

/** Payload of Set Chunk Size; the size is in bytes (1..2^31-1). */
export function buildSetChunkSize(chunkBytes: number): Uint8Array {
  return u32(chunkBytes & 0x7fffffff);
}

/** Chunk size of a Set Chunk Size payload, in bytes; 0 or the top bit set is a ParseError. */
export function parseSetChunkSize(payload: Uint8Array): number {
  const value = readU32(payload, 0, "set chunk size");
  if (value === 0 || value > 0x7fffffff) throw new ParseError(`RTMP chunk size ${value} invalid`);
  return value;
}

/** Payload of Acknowledgement: bytes received so far (32-bit, wraps). */
export function buildAcknowledgement(bytesReceived: number): Uint8Array {
  return u32(bytesReceived);
}

/** Payload of Window Acknowledgement Size, in bytes. */
export function buildWindowAckSize(windowBytes: number): Uint8Array {
  return u32(windowBytes);
}

/** Window of a Window Acknowledgement Size payload, in bytes. */
export function parseWindowAckSize(payload: Uint8Array): number {
  return readU32(payload, 0, "window acknowledgement size");
}

/** Payload of Set Peer Bandwidth: window in bytes and limit type. */
export function buildSetPeerBandwidth(windowBytes: number, limitType = peerBandwidthDynamic) {
  const out = new Uint8Array(5);
  new DataView(out.buffer).setUint32(0, windowBytes >>> 0);
  out[4] = limitType;
  return out;
}

/** Payload of a user control event carrying one 32-bit value (stream id or ping time). */
export function buildUserControl(event: number, value: number): Uint8Array {
  const out = new Uint8Array(6);
  const view = new DataView(out.buffer);
  view.setUint16(0, event);
  view.setUint32(2, value >>> 0);
  return out;
}

/** A user control event: its type and first 32-bit value (0 when the event has none). */
export function parseUserControl(payload: Uint8Array): { event: number; value: number } {
  if (payload.length < 2) throw new TruncatedError("RTMP user control event cut");
  const event = (payload[0] << 8) | payload[1];
  return { event, value: payload.length >= 6 ? readU32(payload, 2, "user control") : 0 };
}
