/**
 * SRT packets on the wire (draft-sharabayko-srt §3): the 16-byte header of data and control
 * packets and the bodies of the control packets, except the handshake (handshake.ts).
 * Malformed input throws the core ParseError (TruncatedError when bytes are missing), never
 * anything else.
 */
import { ParseError, TruncatedError } from "../../../core/errors.ts";

/** Bytes of the header every SRT packet starts with. */
export const srtHeaderBytes = 16;

/** Control packet types (draft §3.2). */
export const ControlType = {
  handshake: 0,
  keepalive: 1,
  ack: 2,
  nak: 3,
  congestionWarning: 4,
  shutdown: 5,
  ackAck: 6,
  dropRequest: 7,
  peerError: 8,
  /** Subtype says which: KMREQ 3 / KMRSP 4 for a key refresh. */
  userDefined: 0x7fff,
} as const;

/** Subtypes of a user-defined control packet libsrt uses after the handshake. */
export const UserDefinedSubtype = { kmRequest: 3, kmResponse: 4 } as const;

/** Where a packet sits in its message (PP bits). */
export const PacketPosition = { middle: 0, last: 1, first: 2, solo: 3 } as const;

/** A data packet (F = 0). */
export interface DataPacket {
  kind: "data";
  /** 31-bit packet sequence number. */
  seq: number;
  /** PP: 0 middle, 1 last, 2 first, 3 solo. */
  position: number;
  /** O: deliver in order. */
  inOrder: boolean;
  /** KK: 0 clear, 1 even key, 2 odd key. */
  keyFlag: number;
  /** R: this is a retransmission. */
  retransmitted: boolean;
  /** 26-bit message number. */
  messageNumber: number;
  /** Sender's clock in µs since its connection started, 32-bit wrapping. */
  timestamp: number;
  destSocketId: number;
  payload: Uint8Array;
}

/** A control packet (F = 1) with its body unparsed. */
export interface ControlPacket {
  kind: "control";
  type: number;
  subtype: number;
  /** Type-specific information: the ACK number of ACK and ACKACK, the message of a drop. */
  typeInfo: number;
  timestamp: number;
  destSocketId: number;
  body: Uint8Array;
}

/** Any SRT packet. */
export type SrtPacket = DataPacket | ControlPacket;

/** Reads one datagram as an SRT packet; the payload/body are views into `bytes`. */
export function parsePacket(bytes: Uint8Array): SrtPacket {
  if (bytes.length < srtHeaderBytes) {
    throw new TruncatedError(`SRT packet of ${bytes.length} bytes, header needs 16`);
  }
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const w0 = view.getUint32(0);
  const w1 = view.getUint32(4);
  const timestamp = view.getUint32(8);
  const destSocketId = view.getUint32(12);
  if ((w0 & 0x80000000) === 0) {
    return {
      kind: "data",
      seq: w0,
      position: w1 >>> 30,
      inOrder: (w1 & 0x20000000) !== 0,
      keyFlag: (w1 >>> 27) & 3,
      retransmitted: (w1 & 0x04000000) !== 0,
      messageNumber: w1 & 0x03ffffff,
      timestamp,
      destSocketId,
      payload: bytes.subarray(srtHeaderBytes),
    };
  }
  return {
    kind: "control",
    type: (w0 >>> 16) & 0x7fff,
    subtype: w0 & 0xffff,
    typeInfo: w1,
    timestamp,
    destSocketId,
    body: bytes.subarray(srtHeaderBytes),
  };
}

/** Bit of the message word that marks a retransmission (set in place on a stored packet). */
export const retransmitFlagBit = 0x04000000;

/** Serializes a data packet. */
export function serializeData(p: Omit<DataPacket, "kind">): Uint8Array {
  const out = new Uint8Array(srtHeaderBytes + p.payload.length);
  const view = new DataView(out.buffer);
  view.setUint32(0, p.seq & 0x7fffffff);
  view.setUint32(
    4,
    ((p.position & 3) << 30 | (p.inOrder ? 0x20000000 : 0) | (p.keyFlag & 3) << 27 |
      (p.retransmitted ? retransmitFlagBit : 0) | (p.messageNumber & 0x03ffffff)) >>> 0,
  );
  view.setUint32(8, p.timestamp >>> 0);
  view.setUint32(12, p.destSocketId >>> 0);
  out.set(p.payload, srtHeaderBytes);
  return out;
}

/** Serializes a control packet. */
export function serializeControl(p: Omit<ControlPacket, "kind">): Uint8Array {
  const out = new Uint8Array(srtHeaderBytes + p.body.length);
  const view = new DataView(out.buffer);
  view.setUint32(0, (0x80000000 | (p.type & 0x7fff) << 16 | (p.subtype & 0xffff)) >>> 0);
  view.setUint32(4, p.typeInfo >>> 0);
  view.setUint32(8, p.timestamp >>> 0);
  view.setUint32(12, p.destSocketId >>> 0);
  out.set(p.body, srtHeaderBytes);
  return out;
}

/** Body of an ACK: a light ACK has only `lastAckSeq`, a small one up to `rttVarUs`. */
export interface AckInfo {
  /** First sequence number not yet received (everything before it is). */
  lastAckSeq: number;
  rttUs?: number;
  rttVarUs?: number;
  /** Free space of the receiver's buffer, in packets. */
  availableBuffer?: number;
  /** Packets received per second. */
  packetRate?: number;
  /** Estimated link capacity, packets per second. */
  capacity?: number;
  /** Bytes received per second. */
  receiveRate?: number;
}

const ackFields = [
  "lastAckSeq",
  "rttUs",
  "rttVarUs",
  "availableBuffer",
  "packetRate",
  "capacity",
  "receiveRate",
] as const;

/** Reads an ACK body (light: 4 bytes, small: 16, full: 28 or more). */
export function parseAck(body: Uint8Array): AckInfo {
  if (body.length < 4) throw new TruncatedError(`ACK body of ${body.length} bytes`);
  const view = new DataView(body.buffer, body.byteOffset, body.byteLength);
  const info: AckInfo = { lastAckSeq: view.getUint32(0) & 0x7fffffff };
  const words = Math.min(ackFields.length, body.length >>> 2);
  for (let i = 1; i < words; i++) info[ackFields[i]] = view.getUint32(i * 4);
  return info;
}

/** Serializes an ACK body with the fields present (stops at the first missing one). */
export function serializeAck(info: AckInfo): Uint8Array {
  const values: number[] = [];
  for (const field of ackFields) {
    const v = info[field];
    if (v === undefined) break;
    values.push(v);
  }
  return words(values);
}

/** An inclusive range of lost sequence numbers. */
export interface LossRange {
  from: number;
  to: number;
}

/** Reads a NAK loss list: single numbers, or a range as a first word with the top bit set. */
export function parseNak(body: Uint8Array): LossRange[] {
  if (body.length < 4 || body.length % 4 !== 0) {
    throw new ParseError(`NAK body of ${body.length} bytes, not whole 32-bit words`);
  }
  const view = new DataView(body.buffer, body.byteOffset, body.byteLength);
  const ranges: LossRange[] = [];
  for (let off = 0; off < body.length; off += 4) {
    const w = view.getUint32(off);
    if (w & 0x80000000) {
      if (off + 8 > body.length) throw new TruncatedError("NAK range without its end");
      off += 4;
      ranges.push({ from: w & 0x7fffffff, to: view.getUint32(off) & 0x7fffffff });
    } else {
      ranges.push({ from: w, to: w });
    }
  }
  return ranges;
}

/** Serializes a NAK loss list. */
export function serializeNak(ranges: LossRange[]): Uint8Array {
  const values: number[] = [];
  for (const r of ranges) {
    if (r.from === r.to) values.push(r.from);
    else values.push((r.from | 0x80000000) >>> 0, r.to);
  }
  return words(values);
}

/** Body of a message drop request: the sequence numbers the sender will never send again. */
export interface DropRange {
  firstSeq: number;
  lastSeq: number;
}

/** Reads a drop request body. */
export function parseDropRequest(body: Uint8Array): DropRange {
  if (body.length < 8) throw new TruncatedError(`drop request body of ${body.length} bytes`);
  const view = new DataView(body.buffer, body.byteOffset, body.byteLength);
  return { firstSeq: view.getUint32(0) & 0x7fffffff, lastSeq: view.getUint32(4) & 0x7fffffff };
}

/** Serializes a drop request body. */
export function serializeDropRequest(range: DropRange): Uint8Array {
  return words([range.firstSeq, range.lastSeq]);
}

/** The 4 zero bytes libsrt puts in keepalive, shutdown and ACKACK bodies. */
export const emptyControlBody: Uint8Array = new Uint8Array(4);

function words(values: number[]): Uint8Array {
  const out = new Uint8Array(values.length * 4);
  const view = new DataView(out.buffer);
  values.forEach((v, i) => view.setUint32(i * 4, v >>> 0));
  return out;
}
