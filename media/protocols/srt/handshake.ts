/**
 * SRT handshake v5 (draft-sharabayko-srt §3.2.1, §4.3): the handshake control body, its
 * extensions (HSREQ/HSRSP, KMREQ/KMRSP, stream id), and the messages of both sides of the
 * caller-listener exchange: induction (SYN cookie, magic 0x4A17), then conclusion.
 * Pure functions: sockets, cookies and timers live in listener.ts and caller.ts.
 */
import { ParseError, TruncatedError } from "../../../core/errors.ts";

/** Handshake types; a rejection is `rejectionBase + reason`. */
export const HandshakeType = {
  done: 0xfffffffd,
  agreement: 0xfffffffe,
  conclusion: 0xffffffff,
  waveAHand: 0,
  induction: 1,
} as const;

/** Handshake type of a rejection is this plus the reason code. */
export const rejectionBase = 1000;

/** Reject reasons of libsrt (SRT_REJ_*), sent as `rejectionBase + code`. */
export const RejectReason = {
  unknown: 0,
  system: 1,
  peer: 2,
  resource: 3,
  rogue: 4,
  backlog: 5,
  ipe: 6,
  close: 7,
  version: 8,
  rendezvousCookie: 9,
  /** Wrong passphrase (the caller's keys do not unwrap). */
  badSecret: 10,
  /** One side encrypts, the other has no passphrase. */
  unsecure: 11,
  messageApi: 12,
  congestion: 13,
  filter: 14,
  group: 15,
  timeout: 16,
  /** Access control codes (SRT_REJX_*) a listener callback answers with. */
  badRequest: 1400,
  unauthorized: 1401,
  overload: 1402,
  forbidden: 1403,
  notFound: 1404,
  badMode: 1405,
  unacceptable: 1406,
  conflict: 1409,
} as const;

/** The magic a v5 listener puts in the extension field of its induction answer. */
export const srtMagic = 0x4a17;
/** UDT socket type DGRAM, the extension field of a caller's induction request. */
export const udtDgram = 2;
/** The libsrt version this stack announces (1.5.1, what Debian ships). */
export const srtVersion = 0x00010501;

/** Handshake extension types (draft §3.2.1.1). */
export const HsExtType = {
  hsReq: 1,
  hsRsp: 2,
  kmReq: 3,
  kmRsp: 4,
  streamId: 5,
  congestion: 6,
  filter: 7,
  group: 8,
} as const;

/** Bits of the extension field of a conclusion: which extensions follow. */
export const HsExtFlag = { hsReq: 1, kmReq: 2, config: 4 } as const;

/** SRT flags of HSREQ/HSRSP (draft §3.2.1.1.1). */
export const SrtFlag = {
  tsbpdSend: 0x01,
  tsbpdReceive: 0x02,
  crypt: 0x04,
  tooLatePacketDrop: 0x08,
  periodicNak: 0x10,
  retransmitFlag: 0x20,
  stream: 0x40,
  packetFilter: 0x80,
} as const;

/** Flags this stack announces: live mode both ways, no packet filter. */
export const ownSrtFlags = SrtFlag.tsbpdSend | SrtFlag.tsbpdReceive | SrtFlag.crypt |
  SrtFlag.tooLatePacketDrop | SrtFlag.periodicNak | SrtFlag.retransmitFlag;

/** One handshake extension: type and raw contents. */
export interface HsExtension {
  type: number;
  data: Uint8Array;
}

/** The handshake control body. */
export interface Handshake {
  version: number;
  /** Encryption field: 0 none, 2/3/4 AES-128/192/256 (the caller's PBKEYLEN / 8). */
  encryption: number;
  /** Extension field: `udtDgram` / `srtMagic` in induction, `HsExtFlag` bits in conclusion. */
  extensionField: number;
  initialSeq: number;
  mtu: number;
  flowWindow: number;
  type: number;
  socketId: number;
  cookie: number;
  /** Peer IP field, 16 bytes (IPv4 as libsrt writes it: its 4 bytes reversed). */
  peerIp: Uint8Array;
  extensions: HsExtension[];
}

const handshakeBytes = 48;

/** Reads a handshake body and its extensions. */
export function parseHandshake(body: Uint8Array): Handshake {
  if (body.length < handshakeBytes) {
    throw new TruncatedError(`handshake body of ${body.length} bytes, needs 48`);
  }
  const view = new DataView(body.buffer, body.byteOffset, body.byteLength);
  const extensions: HsExtension[] = [];
  let off = handshakeBytes;
  while (off + 4 <= body.length) {
    const type = view.getUint16(off);
    const len = view.getUint16(off + 2) * 4;
    if (off + 4 + len > body.length) {
      throw new TruncatedError(`handshake extension ${type} of ${len} bytes overruns the packet`);
    }
    extensions.push({ type, data: body.subarray(off + 4, off + 4 + len) });
    off += 4 + len;
  }
  return {
    version: view.getUint32(0),
    encryption: view.getUint16(4),
    extensionField: view.getUint16(6),
    initialSeq: view.getUint32(8) & 0x7fffffff,
    mtu: view.getUint32(12),
    flowWindow: view.getUint32(16),
    type: view.getUint32(20),
    socketId: view.getUint32(24),
    cookie: view.getUint32(28),
    peerIp: body.slice(32, 48),
    extensions,
  };
}

/** Serializes a handshake body with its extensions (each padded to 32-bit words). */
export function serializeHandshake(hs: Handshake): Uint8Array {
  const extBytes = hs.extensions.reduce((n, e) => n + 4 + padded(e.data.length), 0);
  const out = new Uint8Array(handshakeBytes + extBytes);
  const view = new DataView(out.buffer);
  view.setUint32(0, hs.version);
  view.setUint16(4, hs.encryption);
  view.setUint16(6, hs.extensionField);
  view.setUint32(8, hs.initialSeq);
  view.setUint32(12, hs.mtu);
  view.setUint32(16, hs.flowWindow);
  view.setUint32(20, hs.type >>> 0);
  view.setUint32(24, hs.socketId >>> 0);
  view.setUint32(28, hs.cookie >>> 0);
  out.set(hs.peerIp.subarray(0, 16), 32);
  let off = handshakeBytes;
  for (const e of hs.extensions) {
    view.setUint16(off, e.type);
    view.setUint16(off + 2, padded(e.data.length) / 4);
    out.set(e.data, off + 4);
    off += 4 + padded(e.data.length);
  }
  return out;
}

function padded(n: number): number {
  return (n + 3) & ~3;
}

/** Contents of HSREQ / HSRSP. */
export interface SrtHandshakeInfo {
  srtVersion: number;
  flags: number;
  /** Latency the sender of this extension uses as a receiver, ms. */
  receiverLatencyMs: number;
  /** Latency the sender of this extension asks its peer's receiver for, ms. */
  senderLatencyMs: number;
}

/** Reads HSREQ / HSRSP contents. */
export function parseSrtHandshakeInfo(data: Uint8Array): SrtHandshakeInfo {
  if (data.length < 12) throw new TruncatedError(`HSREQ/HSRSP of ${data.length} bytes`);
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  return {
    srtVersion: view.getUint32(0),
    flags: view.getUint32(4),
    receiverLatencyMs: view.getUint16(8),
    senderLatencyMs: view.getUint16(10),
  };
}

/** Serializes HSREQ / HSRSP contents. */
export function serializeSrtHandshakeInfo(info: SrtHandshakeInfo): Uint8Array {
  const out = new Uint8Array(12);
  const view = new DataView(out.buffer);
  view.setUint32(0, info.srtVersion);
  view.setUint32(4, info.flags);
  view.setUint16(8, info.receiverLatencyMs);
  view.setUint16(10, info.senderLatencyMs);
  return out;
}

/** Longest stream id libsrt accepts, in bytes. */
export const maxStreamIdBytes = 512;

/**
 * Encodes a stream id as libsrt does: UTF-8, zero-padded to 32-bit words, each word's bytes
 * reversed (libsrt copies the string into host-order words then swaps them to network order).
 */
export function encodeStreamId(streamId: string): Uint8Array {
  const text = new TextEncoder().encode(streamId);
  if (text.length > maxStreamIdBytes) {
    throw new ParseError(`stream id of ${text.length} bytes, at most ${maxStreamIdBytes}`);
  }
  const out = new Uint8Array(padded(text.length));
  for (let i = 0; i < text.length; i++) out[(i & ~3) + 3 - (i & 3)] = text[i];
  return out;
}

/** Decodes a stream id extension (see encodeStreamId); trailing zero padding is dropped. */
export function decodeStreamId(data: Uint8Array): string {
  if (data.length % 4 !== 0) throw new ParseError(`stream id of ${data.length} bytes`);
  const text = new Uint8Array(data.length);
  for (let i = 0; i < data.length; i++) text[i] = data[(i & ~3) + 3 - (i & 3)];
  let end = text.length;
  while (end > 0 && text[end - 1] === 0) end--;
  return new TextDecoder("utf-8", { fatal: false }).decode(text.subarray(0, end));
}

/** The 16-byte peer IP field for an address (IPv4 reversed as libsrt writes it; IPv6 as is). */
export function encodePeerIp(address: string): Uint8Array {
  const out = new Uint8Array(16);
  const v4 = address.match(/^(\d+)\.(\d+)\.(\d+)\.(\d+)$/);
  if (v4) {
    for (let i = 0; i < 4; i++) out[3 - i] = Number(v4[i + 1]) & 0xff;
  }
  return out;
}

/** What a listener reads from a caller's conclusion request. */
export interface ConclusionRequest {
  streamId: string;
  /** The caller's HSREQ; absent means a pre-1.3 peer this stack does not serve. */
  srt?: SrtHandshakeInfo;
  /** KMREQ contents (a Key Material message), when the caller encrypts. */
  keyMaterial?: Uint8Array;
}

/** Extracts the extensions of a conclusion (request or response). */
export function readConclusion(hs: Handshake): ConclusionRequest {
  const req: ConclusionRequest = { streamId: "" };
  for (const e of hs.extensions) {
    if (e.type === HsExtType.hsReq || e.type === HsExtType.hsRsp) {
      req.srt = parseSrtHandshakeInfo(e.data);
    } else if (e.type === HsExtType.kmReq || e.type === HsExtType.kmRsp) {
      req.keyMaterial = e.data;
    } else if (e.type === HsExtType.streamId) req.streamId = decodeStreamId(e.data);
  }
  return req;
}

/** Listener: the answer to an induction request, carrying the SYN cookie. */
export function inductionResponse(req: Handshake, cookie: number): Handshake {
  return {
    ...req,
    version: 5,
    encryption: 0,
    extensionField: srtMagic,
    type: HandshakeType.induction,
    cookie,
    extensions: [],
  };
}

/** Options of a listener's conclusion answer. */
export interface ConclusionResponseOptions {
  /** The listener's socket id for this connection. */
  socketId: number;
  /** Latency this side's receiver plays at, ms. */
  receiverLatencyMs: number;
  /** Latency the caller's receiver plays at, ms. */
  senderLatencyMs: number;
  /** Receive buffer in packets (the flow window announced). */
  flowWindow: number;
  /** KMRSP contents: the KM message echoed, or a one-word KM state on failure. */
  keyMaterial?: Uint8Array;
}

/** Listener: the conclusion answer that establishes the connection. */
export function conclusionResponse(req: Handshake, o: ConclusionResponseOptions): Handshake {
  const srt = serializeSrtHandshakeInfo({
    srtVersion,
    flags: ownSrtFlags,
    receiverLatencyMs: o.receiverLatencyMs,
    senderLatencyMs: o.senderLatencyMs,
  });
  const extensions: HsExtension[] = [{ type: HsExtType.hsRsp, data: srt }];
  if (o.keyMaterial) extensions.push({ type: HsExtType.kmRsp, data: o.keyMaterial });
  return {
    ...req,
    version: 5,
    encryption: 0,
    extensionField: HsExtFlag.hsReq | (o.keyMaterial ? HsExtFlag.kmReq : 0),
    mtu: Math.min(req.mtu, 1500),
    flowWindow: o.flowWindow,
    type: HandshakeType.conclusion,
    socketId: o.socketId,
    extensions,
  };
}

/** Listener: a rejection, the caller's conclusion echoed with the reason as its type. */
export function rejection(req: Handshake, reason: number): Handshake {
  return { ...req, type: rejectionBase + reason, extensions: [] };
}

/** The reject reason of a handshake type, or undefined when it is no rejection. */
export function rejectReasonOf(type: number): number | undefined {
  return type >= rejectionBase && type < 0xfffffffd ? type - rejectionBase : undefined;
}

/**
 * Latency a receiver uses: the larger of its own and what the sender asks (libsrt takes the
 * maximum of both sides' settings, so each side gets at least what it configured).
 */
export function negotiateLatencyMs(ownMs: number, peerMs: number): number {
  return Math.max(ownMs, peerMs);
}

/** Options of a caller's handshake requests. */
export interface CallerHandshakeOptions {
  socketId: number;
  initialSeq: number;
  /** Address of the listener, for the peer IP field. */
  listenerAddress: string;
  flowWindow: number;
}

/** Caller: the induction request (version 4, DGRAM, no cookie). */
export function inductionRequest(o: CallerHandshakeOptions): Handshake {
  return {
    version: 4,
    encryption: 0,
    extensionField: udtDgram,
    initialSeq: o.initialSeq,
    mtu: 1500,
    flowWindow: o.flowWindow,
    type: HandshakeType.induction,
    socketId: o.socketId,
    cookie: 0,
    peerIp: encodePeerIp(o.listenerAddress),
    extensions: [],
  };
}

/** Options of a caller's conclusion request. */
export interface CallerConclusionOptions extends CallerHandshakeOptions {
  cookie: number;
  latencyMs: number;
  streamId?: string;
  /** KMREQ contents when encrypting. */
  keyMaterial?: Uint8Array;
  /** Key length in bytes when encrypting (16, 24 or 32). */
  keyLengthBytes?: number;
}

/** Caller: the conclusion request with HSREQ, KMREQ and the stream id. */
export function conclusionRequest(o: CallerConclusionOptions): Handshake {
  const extensions: HsExtension[] = [{
    type: HsExtType.hsReq,
    data: serializeSrtHandshakeInfo({
      srtVersion,
      flags: ownSrtFlags,
      receiverLatencyMs: o.latencyMs,
      senderLatencyMs: o.latencyMs,
    }),
  }];
  let flags = HsExtFlag.hsReq;
  if (o.keyMaterial) {
    extensions.push({ type: HsExtType.kmReq, data: o.keyMaterial });
    flags |= HsExtFlag.kmReq;
  }
  if (o.streamId) {
    extensions.push({ type: HsExtType.streamId, data: encodeStreamId(o.streamId) });
    flags |= HsExtFlag.config;
  }
  return {
    ...inductionRequest(o),
    version: 5,
    encryption: o.keyMaterial ? (o.keyLengthBytes ?? 16) / 8 : 0,
    extensionField: flags,
    type: HandshakeType.conclusion,
    cookie: o.cookie,
    extensions,
  };
}
