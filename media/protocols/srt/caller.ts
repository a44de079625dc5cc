/**
 * SRT caller mode (draft-sharabayko-srt §4.3.1.1): connects to a remote listener from its own
 * UDP socket with induction then conclusion (HSREQ, KMREQ, stream id), repeating each request
 * until answered, and returns the established connection. Used for pull and in tests.
 */
import { ParseError } from "../../../core/errors.ts";
import { ControlType, parsePacket, serializeControl } from "./packet.ts";
import {
  conclusionRequest,
  type Handshake,
  HandshakeType,
  inductionRequest,
  parseHandshake,
  readConclusion,
  RejectReason,
  rejectReasonOf,
  serializeHandshake,
  srtMagic,
} from "./handshake.ts";
import { defaultPeerIdleTimeoutMs, SrtConnection } from "./connection.ts";
import { defaultBufferPackets, defaultLatencyMs } from "./listener.ts";
import { SrtCipher } from "./crypto.ts";
import { randomSeq } from "./seq.ts";
import { SrtError, SrtRejectedError, SrtTimeoutError } from "./errors.ts";
import { DatagramSocket, type DatagramSource } from "./datagram_socket.ts";

/** Interval between repeated handshake requests, ms (libsrt's). */
const handshakeRepeatMs = 250;
/** Default time allowed for the handshake, ms (libsrt's SRTO_CONNTIMEO). */
export const defaultConnectTimeoutMs = 3000;

/** Options of a caller connection. */
export interface SrtCallerOptions {
  /** Listener address (IPv4 or IPv6 literal). */
  hostname: string;
  port: number;
  streamId?: string;
  latencyMs?: number;
  /** Encrypt with this passphrase (10 to 79 characters). */
  passphrase?: string;
  /** Key length when encrypting: 16, 24 or 32 bytes. */
  keyLengthBytes?: 16 | 24 | 32;
  connectTimeoutMs?: number;
  peerIdleTimeoutMs?: number;
  bufferPackets?: number;
  /** Packets encrypted with one key before a fresh one (libsrt's kmrefreshrate). */
  keyRefreshPackets?: number;
  /** Packets both keys are announced around a switch (libsrt's kmpreannounce). */
  keyPreAnnouncePackets?: number;
  /** First sequence number (random by default, as libsrt's; set by tests of wraparound). */
  initialSeq?: number;
  /** Local address to bind (default: loopback for a loopback listener, else any). */
  localHostname?: string;
}

/** Connects to an SRT listener; throws SrtRejectedError or SrtTimeoutError. */
export async function connectSrt(o: SrtCallerOptions): Promise<SrtConnection> {
  let onDatagram: (data: Uint8Array, source: DatagramSource) => void = () => {};
  const socket = await DatagramSocket.bind(
    o.localHostname ?? localAddressFor(o.hostname),
    0,
    (data, source) => onDatagram(data, source),
  );
  try {
    return await handshake(socket, o, (handler) => onDatagram = handler);
  } catch (e) {
    await socket.close();
    throw e;
  }
}

/** Loopback targets are called from loopback; others from every interface. */
function localAddressFor(hostname: string): string {
  if (hostname.startsWith("127.")) return "127.0.0.1";
  if (hostname === "::1") return "::1";
  return hostname.includes(":") ? "::" : "0.0.0.0";
}

async function handshake(
  socket: DatagramSocket,
  o: SrtCallerOptions,
  listen: (handler: (data: Uint8Array, source: DatagramSource) => void) => void,
): Promise<SrtConnection> {
  const startMs = performance.now();
  const socketId = (crypto.getRandomValues(new Uint32Array(1))[0] & 0x3fffffff) || 1;
  const latencyMs = o.latencyMs ?? defaultLatencyMs;
  const bufferPackets = o.bufferPackets ?? defaultBufferPackets;
  const base = {
    socketId,
    initialSeq: o.initialSeq ?? randomSeq(),
    listenerAddress: o.hostname,
    flowWindow: bufferPackets,
  };
  const cipher = o.passphrase
    ? await SrtCipher.create(o.passphrase, o.keyLengthBytes ?? 16)
    : undefined;
  const send = (hs: Handshake) =>
    socket.send(
      serializeControl({
        type: ControlType.handshake,
        subtype: 0,
        typeInfo: 0,
        timestamp: Math.round((performance.now() - startMs) * 1000) >>> 0,
        destSocketId: 0,
        body: serializeHandshake(hs),
      }),
      o.port,
      o.hostname,
    );

  let request = inductionRequest(base);
  const answer = await new Promise<{ hs: Handshake; timestamp: number; arrivalMs: number }>(
    (resolve, reject) => {
      const timeoutMs = o.connectTimeoutMs ?? defaultConnectTimeoutMs;
      const deadline = setTimeout(() => {
        finish();
        reject(
          new SrtTimeoutError(
            `no SRT handshake answer from ${o.hostname}:${o.port} in ${timeoutMs} ms`,
          ),
        );
      }, timeoutMs);
      const repeat = setInterval(() => send(request), handshakeRepeatMs);
      const finish = () => {
        clearTimeout(deadline);
        clearInterval(repeat);
        listen(() => {});
      };
      const onMessage = (msg: Uint8Array) => {
        let hs: Handshake;
        let timestamp: number;
        try {
          const p = parsePacket(msg);
          if (p.kind !== "control" || p.type !== ControlType.handshake) return;
          if (p.destSocketId !== socketId) return;
          hs = parseHandshake(p.body);
          timestamp = p.timestamp;
        } catch (e) {
          if (e instanceof ParseError) return;
          throw e;
        }
        const reason = rejectReasonOf(hs.type);
        if (reason !== undefined) {
          finish();
          reject(
            new SrtRejectedError(reason, `SRT listener refused the connection: code ${reason}`),
          );
        } else if (
          hs.type === HandshakeType.induction && request.type === HandshakeType.induction
        ) {
          if (hs.version !== 5 || hs.extensionField !== srtMagic) {
            finish();
            reject(new SrtRejectedError(RejectReason.version, "listener does not speak HSv5"));
            return;
          }
          request = conclusionRequest({
            ...base,
            cookie: hs.cookie,
            latencyMs,
            streamId: o.streamId,
            keyMaterial: cipher?.keyMaterial(),
            keyLengthBytes: cipher?.keyLength,
          });
          send(request);
        } else if (
          hs.type === HandshakeType.conclusion && request.type === HandshakeType.conclusion
        ) {
          finish();
          resolve({ hs, timestamp, arrivalMs: performance.now() });
        }
      };
      listen(onMessage);
      send(request);
    },
  );

  const response = readConclusion(answer.hs);
  if (!response.srt) throw new SrtError("listener answered without HSRSP");
  if (cipher && (!response.keyMaterial || response.keyMaterial.length <= 4)) {
    throw new SrtRejectedError(RejectReason.badSecret, "listener did not take our key material");
  }
  const connection = new SrtConnection({
    socketId,
    peerSocketId: answer.hs.socketId,
    peer: { hostname: o.hostname, port: o.port },
    streamId: o.streamId ?? "",
    latencyMs: Math.max(latencyMs, response.srt.senderLatencyMs),
    senderLatencyMs: Math.max(latencyMs, response.srt.receiverLatencyMs),
    initialSeq: base.initialSeq,
    peerStartMs: answer.arrivalMs - answer.timestamp / 1000,
    startMs,
    peerFlowWindow: answer.hs.flowWindow,
    bufferPackets,
    cipher,
    keyRefreshPackets: o.keyRefreshPackets,
    keyPreAnnouncePackets: o.keyPreAnnouncePackets,
    peerIdleTimeoutMs: o.peerIdleTimeoutMs ?? defaultPeerIdleTimeoutMs,
    sendDatagram: (bytes) => socket.send(bytes, o.port, o.hostname),
    onEnded: () => socket.close(),
  });
  listen((msg, source) => {
    if (source.port !== o.port) return;
    try {
      const p = parsePacket(msg);
      if (p.destSocketId === socketId) connection.handlePacket(p);
    } catch (e) {
      if (!(e instanceof ParseError)) throw e;
      connection.countMalformed();
    }
  });
  return connection;
}
