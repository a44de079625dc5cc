/**
 * The sending half of an SRT connection in live mode (draft-sharabayko-srt §4.5-4.6): each
 * payload becomes solo messages of at most `payloadBytes`, kept in a send buffer until
 * acknowledged, retransmitted with the R flag on a NAK, and dropped (with a drop request) once
 * older than the receiver could still play. Full ACKs are answered with an ACKACK.
 * Packets leave as the application hands them over, unpaced: libsrt's live default
 * (SRTO_MAXBW 1 Gbit/s, 11 µs between packets) spreads a keyframe burst no further.
 * No sockets: datagrams leave through `sendDatagram`, time comes through `tick`.
 */
import {
  type AckInfo,
  ControlType,
  type LossRange,
  PacketPosition,
  retransmitFlagBit,
  serializeData,
  serializeDropRequest,
} from "./packet.ts";
import { nextMessageNumber, seqAdd, seqDiff } from "./seq.ts";

/** libsrt's floor of the sender drop threshold, ms (SRT_TLPKTDROP_MINTHRESHOLD_MS). */
const minDropThresholdMs = 1000;
/** Two ACK periods added to the drop threshold, ms (as libsrt does). */
const dropSlackMs = 20;

/** Largest payload of a live SRT packet carrying 7 TS packets, bytes. */
export const defaultPayloadBytes = 1316;

/** Options of a Sender. */
export interface SenderOptions {
  /** Sequence number of the first data packet (from the handshake). */
  initialSeq: number;
  /** Socket id of the peer, the destination of every packet. */
  peerSocketId: number;
  /** Latency the peer's receiver plays at, ms. */
  latencyMs: number;
  /** Packets the peer can buffer (its flow window). */
  flowWindow: number;
  /** Local time (ms) this side's clock started: packet timestamps count from it. */
  startMs: number;
  /** Largest payload of one packet, bytes. */
  payloadBytes?: number;
  sendDatagram: (bytes: Uint8Array) => void;
  sendControl: (type: number, typeInfo: number, body: Uint8Array) => void;
  /** Encrypts a payload when the connection has a passphrase. */
  encrypt?: (seq: number, payload: Uint8Array) => Promise<{ kk: number; payload: Uint8Array }>;
  /**
   * Runs before the encryption of the n-th packet (1-based), in packet order: key refresh
   * switches keys here so each packet is sealed with the key its turn calls for.
   */
  beforeEncrypt?: (packetCount: number) => Promise<void> | void;
  /** Current time, ms (performance.now() by default). */
  now?: () => number;
}

/** Counters of a Sender. */
export interface SenderStats {
  /** Data packets sent, first transmissions. */
  packets: number;
  /** Payload bytes sent, first transmissions. */
  bytes: number;
  /** Packets sent again after a NAK. */
  retransmitted: number;
  /** Packets dropped unacknowledged: too old, or beyond the flow window. */
  dropped: number;
  /** Packets the peer reported lost (NAKed). */
  lossReported: number;
}

interface Entry {
  bytes: Uint8Array;
  sentMs: number;
  messageNumber: number;
}

/** Send state of one connection. */
export class Sender {
  readonly stats: SenderStats = {
    packets: 0,
    bytes: 0,
    retransmitted: 0,
    dropped: 0,
    lossReported: 0,
  };
  /** Round-trip time the peer measured, ms. */
  peerRttMs = 100;
  #o: SenderOptions;
  #buffer = new Map<number, Entry>();
  #nextSeq: number;
  #messageNumber = 0;
  #encrypting: Promise<void> = Promise.resolve();
  #queued = 0;
  #now: () => number;

  constructor(options: SenderOptions) {
    this.#o = options;
    this.#nextSeq = options.initialSeq;
    this.#now = options.now ?? (() => performance.now());
  }

  /** Packets sent and not yet acknowledged. */
  get unacknowledged(): number {
    return this.#buffer.size;
  }

  /** Sends `payload` as solo messages of at most `payloadBytes` each. */
  send(payload: Uint8Array): void {
    const max = this.#o.payloadBytes ?? defaultPayloadBytes;
    for (let off = 0; off < payload.length; off += max) {
      this.#sendMessage(payload.subarray(off, Math.min(payload.length, off + max)));
    }
  }

  /** Resolves when every payload given so far was encrypted and sent. */
  flushed(): Promise<void> {
    return this.#encrypting;
  }

  #sendMessage(payload: Uint8Array): void {
    const seq = this.#nextSeq;
    this.#nextSeq = seqAdd(seq, 1);
    this.#messageNumber = nextMessageNumber(this.#messageNumber);
    const messageNumber = this.#messageNumber;
    const sentMs = this.#now();
    const timestamp = Math.round((sentMs - this.#o.startMs) * 1000) >>> 0;
    const transmit = (keyFlag: number, body: Uint8Array) => {
      const bytes = serializeData({
        seq,
        position: PacketPosition.solo,
        inOrder: true, // libsrt live senders set O
        keyFlag,
        retransmitted: false,
        messageNumber,
        timestamp,
        destSocketId: this.#o.peerSocketId,
        payload: body,
      });
      this.#buffer.set(seq, { bytes, sentMs, messageNumber });
      this.stats.packets++;
      this.stats.bytes += body.length;
      this.#o.sendDatagram(bytes);
      if (this.#buffer.size > this.#o.flowWindow) this.#dropOldest(1);
    };
    const encrypt = this.#o.encrypt;
    if (!encrypt) {
      transmit(0, payload);
      return;
    }
    const copy = payload.slice();
    const count = ++this.#queued;
    this.#encrypting = this.#encrypting.then(async () => {
      await this.#o.beforeEncrypt?.(count);
      const sealed = await encrypt(seq, copy);
      transmit(sealed.kk, sealed.payload);
    }).catch(() => {
      this.stats.dropped++; // never sent: the receiver sees a gap and the stream goes on
    });
  }

  /** Takes an ACK: releases what it acknowledges; a full ACK is answered with an ACKACK. */
  onAck(ackNumber: number, ack: AckInfo): void {
    for (const seq of this.#buffer.keys()) {
      if (seqDiff(seq, ack.lastAckSeq) <= 0) break;
      this.#buffer.delete(seq);
    }
    if (ack.rttUs !== undefined) {
      this.peerRttMs = ack.rttUs / 1000;
      this.#o.sendControl(ControlType.ackAck, ackNumber, new Uint8Array(4));
    }
  }

  /** Takes a NAK: sends the listed packets again with the retransmitted flag. */
  onNak(ranges: LossRange[]): void {
    for (const r of ranges) {
      const n = Math.min(seqDiff(r.from, r.to), this.#o.flowWindow);
      for (let i = 0; i <= n; i++) {
        this.stats.lossReported++;
        const entry = this.#buffer.get(seqAdd(r.from, i));
        if (!entry) continue;
        entry.bytes[4] |= retransmitFlagBit >>> 24;
        this.stats.retransmitted++;
        this.#o.sendDatagram(entry.bytes);
      }
    }
  }

  /** Drops packets too old for the receiver to play, telling it with a drop request. */
  tick(nowMs: number): void {
    const thresholdMs = Math.max(this.#o.latencyMs, minDropThresholdMs) + dropSlackMs;
    let old = 0;
    for (const entry of this.#buffer.values()) {
      if (nowMs - entry.sentMs <= thresholdMs) break;
      old++;
    }
    if (old > 0) this.#dropOldest(old);
  }

  #dropOldest(count: number): void {
    let first: number | undefined;
    let last = 0;
    let messageNumber = 0;
    for (const [seq, entry] of this.#buffer) {
      if (count-- <= 0) break;
      if (first === undefined) {
        first = seq;
        messageNumber = entry.messageNumber;
      }
      last = seq;
      this.#buffer.delete(seq);
      this.stats.dropped++;
    }
    if (first === undefined) return;
    this.#o.sendControl(
      ControlType.dropRequest,
      messageNumber,
      serializeDropRequest({ firstSeq: first, lastSeq: last }),
    );
  }
}
