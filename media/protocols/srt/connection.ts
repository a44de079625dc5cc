/**
 * One established SRT connection, either side of the handshake: a Receiver and a Sender over
 * a datagram function, with the 10 ms timer, keepalive, peer idle timeout, shutdown and key
 * refresh from the peer. The listener or caller that made it feeds it the peer's packets.
 */
import { ParseError } from "../../../core/errors.ts";
import {
  ControlType,
  emptyControlBody,
  parseAck,
  parseDropRequest,
  parseNak,
  serializeControl,
  type SrtPacket,
  UserDefinedSubtype,
} from "./packet.ts";
import { Receiver, type ReceiverStats } from "./receiver.ts";
import { Sender, type SenderStats } from "./sender.ts";
import type { SrtCipher } from "./crypto.ts";
import { parseKeyMaterial } from "./key_material.ts";

/** Period of the connection's periodic work (ACK, NAK, delivery, drop), ms (libsrt's SYN). */
export const tickIntervalMs = 10;
/**
 * Period of the timer that does that work when no packet arrives. While packets flow, the
 * work runs on their arrival instead: each timer wake costs as much CPU as the packets of a
 * 5 Mbit/s stream's worth of protocol work, measured with bench/srt.ts.
 */
const idleTickIntervalMs = 30;
/** A keepalive goes out when nothing else did for this long, ms. */
const keepaliveIntervalMs = 1000;
/** Peer silence that ends a connection by default, ms (libsrt's SRTO_PEERIDLETIMEO). */
export const defaultPeerIdleTimeoutMs = 5000;
/** Packets sent with one key before the next, by default (libsrt's SRTO_KMREFRESHRATE). */
export const defaultKeyRefreshPackets = 0x1000000;
/** Packets before and after a switch both keys are announced (libsrt's SRTO_KMPREANNOUNCE). */
export const defaultKeyPreAnnouncePackets = 0x1000;
/** Interval at which an unanswered key announcement is repeated, ms. */
const keyAnnounceRepeatMs = 500;
/** Payloads queued for a reader that is not reading, before the oldest are dropped. */
const maxQueuedPayloads = 8192;

/** Why a connection ended. */
export type SrtCloseReason = "shutdown" | "timeout" | "closed";

/** Address of the peer. */
export interface SrtPeer {
  hostname: string;
  port: number;
}

/** What a listener or caller knows once the handshake is done. */
export interface SrtConnectionInit {
  socketId: number;
  peerSocketId: number;
  peer: SrtPeer;
  streamId: string;
  /** Negotiated TSBPD latency of this side's receiver, ms. */
  latencyMs: number;
  /** Latency the peer's receiver plays at, ms (defaults to `latencyMs`). */
  senderLatencyMs?: number;
  /** Initial sequence number of both directions (the caller's, in HSv5). */
  initialSeq: number;
  /** Local time (ms) at which the peer's packet clock read 0. */
  peerStartMs: number;
  /** Local time (ms) this side's packet clock starts from. */
  startMs: number;
  /** The peer's flow window, packets. */
  peerFlowWindow: number;
  /** Own receive buffer, packets. */
  bufferPackets: number;
  /** Present when the connection is encrypted. */
  cipher?: SrtCipher;
  peerIdleTimeoutMs?: number;
  /** Largest payload of one data packet, bytes. */
  payloadBytes?: number;
  /** Packets encrypted with one key before switching to a fresh one. */
  keyRefreshPackets?: number;
  /** Packets before (and after) a key switch during which both keys are announced. */
  keyPreAnnouncePackets?: number;
  sendDatagram: (bytes: Uint8Array) => void;
  /** Called once when the connection ends (the owner forgets it, a caller closes its socket). */
  onEnded?: (connection: SrtConnection) => void | Promise<void>;
}

/** Counters of a connection, both directions. */
export interface SrtConnectionStats {
  received: ReceiverStats;
  sent: SenderStats;
  /** Control and data packets that did not parse or made no sense, dropped. */
  malformed: number;
  /** Key material refreshes taken from the peer. */
  keyRefreshes: number;
  /** Key announcements (KMREQ) this side sent while sending, answered or not. */
  keyAnnouncements: number;
  /** Payloads the application did not read in time and that were discarded. */
  readerOverflow: number;
  /** Milliseconds since the handshake completed. */
  uptimeMs: number;
  /** Round-trip time, ms: measured by ACKACK when receiving, else as the receiving peer reports. */
  rttMs: number;
}

/** An established SRT connection: read payloads (MPEG-TS) from it, send payloads on it. */
export class SrtConnection {
  /** Local socket id. */
  readonly socketId: number;
  /** The peer's socket id. */
  readonly peerSocketId: number;
  readonly peer: SrtPeer;
  /** Stream id the caller sent (empty when none). */
  readonly streamId: string;
  /** Negotiated latency, ms. */
  readonly latencyMs: number;
  /** Whether payloads are encrypted. */
  readonly encrypted: boolean;
  /** Resolves with the reason once the connection ended. */
  readonly closed: Promise<SrtCloseReason>;
  #init: SrtConnectionInit;
  #receiver: Receiver;
  #sender: Sender;
  #timer: ReturnType<typeof setInterval>;
  #lastReceivedMs: number;
  #lastSentMs: number;
  #lastTickMs: number;
  #ended = false;
  #endedWork: void | Promise<void> = undefined;
  #resolveClosed!: (reason: SrtCloseReason) => void;
  #onPayload: ((payload: Uint8Array) => void) | undefined;
  #queue: Uint8Array[] = [];
  #wake: (() => void) | undefined;
  #malformed = 0;
  #keyRefreshes = 0;
  #keyAnnouncements = 0;
  /** A key announcement the peer did not answer yet, and when it was last sent. */
  #announcing: { km: Uint8Array; sentMs: number } | undefined;
  #readerOverflow = 0;

  constructor(init: SrtConnectionInit) {
    this.#init = init;
    this.socketId = init.socketId;
    this.peerSocketId = init.peerSocketId;
    this.peer = init.peer;
    this.streamId = init.streamId;
    this.latencyMs = init.latencyMs;
    this.encrypted = init.cipher !== undefined;
    this.closed = new Promise((resolve) => this.#resolveClosed = resolve);
    const now = performance.now();
    this.#lastReceivedMs = now;
    this.#lastSentMs = now;
    this.#lastTickMs = now;
    const sendControl = (type: number, typeInfo: number, body: Uint8Array) =>
      this.#sendControl(type, 0, typeInfo, body);
    const cipher = init.cipher;
    this.#receiver = new Receiver({
      initialSeq: init.initialSeq,
      latencyMs: init.latencyMs,
      peerStartMs: init.peerStartMs,
      bufferPackets: init.bufferPackets,
      sendControl,
      deliver: (payload) => this.#deliver(payload),
      decrypt: cipher && ((seq, kk, payload) => cipher.decrypt(seq, kk, payload)),
    });
    this.#sender = new Sender({
      initialSeq: init.initialSeq,
      peerSocketId: init.peerSocketId,
      latencyMs: init.senderLatencyMs ?? init.latencyMs,
      flowWindow: init.peerFlowWindow,
      startMs: init.startMs,
      payloadBytes: init.payloadBytes,
      sendDatagram: (bytes) => this.#send(bytes),
      sendControl,
      encrypt: cipher && ((seq, payload) => cipher.encrypt(seq, payload)),
      beforeEncrypt: cipher && ((count) => this.#rotateKey(cipher, count)),
    });
    this.#timer = setInterval(() => this.#tick(performance.now()), idleTickIntervalMs);
  }

  /**
   * Receives each delivered payload. Payloads that arrived before a handler was set are
   * handed to it at once, in order.
   */
  set onPayload(handler: ((payload: Uint8Array) => void) | undefined) {
    this.#onPayload = handler;
    if (!handler) return;
    const queued = this.#queue;
    this.#queue = [];
    for (const payload of queued) handler(payload);
  }

  /** The delivered payloads as an async iterator; it ends when the connection ends. */
  async *payloads(): AsyncGenerator<Uint8Array> {
    while (true) {
      const payload = this.#queue.shift();
      if (payload) {
        yield payload;
        continue;
      }
      if (this.#ended) return;
      await new Promise<void>((resolve) => this.#wake = resolve);
    }
  }

  /** Sends payload bytes (split into packets of at most 1316 bytes: 7 TS packets). */
  send(payload: Uint8Array): void {
    if (!this.#ended) this.#sender.send(payload);
  }

  /** Counters of both directions. */
  stats(): SrtConnectionStats {
    return {
      received: { ...this.#receiver.stats },
      sent: { ...this.#sender.stats },
      malformed: this.#malformed,
      keyRefreshes: this.#keyRefreshes,
      keyAnnouncements: this.#keyAnnouncements,
      readerOverflow: this.#readerOverflow,
      uptimeMs: Math.round(performance.now() - this.#init.startMs),
      rttMs: this.#receiver.rttMeasured ? this.#receiver.stats.rttMs : this.#sender.peerRttMs,
    };
  }

  /** Handles a packet addressed to this connection (called by its listener or caller). */
  handlePacket(packet: SrtPacket): void {
    if (this.#ended) return;
    const now = performance.now();
    this.#lastReceivedMs = now;
    if (now - this.#lastTickMs >= tickIntervalMs) this.#tick(now);
    if (packet.kind === "data") {
      this.#receiver.onData(packet, now);
      return;
    }
    try {
      switch (packet.type) {
        case ControlType.ack:
          this.#sender.onAck(packet.typeInfo, parseAck(packet.body));
          break;
        case ControlType.nak:
          this.#sender.onNak(parseNak(packet.body));
          break;
        case ControlType.ackAck:
          this.#receiver.onAckAck(packet.typeInfo, now);
          break;
        case ControlType.dropRequest:
          this.#receiver.onDropRequest(parseDropRequest(packet.body));
          break;
        case ControlType.shutdown:
          this.#receiver.flush();
          this.#end("shutdown");
          break;
        case ControlType.userDefined:
          if (packet.subtype === UserDefinedSubtype.kmRequest) this.#onKeyRefresh(packet.body);
          if (packet.subtype === UserDefinedSubtype.kmResponse) this.#announcing = undefined;
          break;
          // Keepalive only refreshes lastReceivedMs; a handshake repeated by a caller that
          // missed our answer is answered by the listener; congestion warnings are legacy.
      }
    } catch (e) {
      if (!(e instanceof ParseError)) throw e;
      this.#malformed++;
    }
  }

  /** Counts a datagram for this connection that did not parse. */
  countMalformed(): void {
    this.#malformed++;
  }

  /** Sends a shutdown to the peer and stops. Idempotent. */
  async close(): Promise<void> {
    if (!this.#ended) {
      await this.#sender.flushed();
      this.#sendControl(ControlType.shutdown, 0, 0, emptyControlBody);
      this.#end("closed");
    }
    await this.#receiver.settled();
    await this.#endedWork;
  }

  #onKeyRefresh(body: Uint8Array): void {
    const cipher = this.#init.cipher;
    if (!cipher) return;
    let km;
    try {
      km = parseKeyMaterial(body);
    } catch {
      this.#malformed++;
      return;
    }
    cipher.updateKeyMaterial(km).then(() => {
      this.#keyRefreshes++;
      this.#sendControl(
        ControlType.userDefined,
        UserDefinedSubtype.kmResponse,
        0,
        cipher.keyMaterial(),
      );
    }, () => this.#malformed++);
  }

  /**
   * Sender key refresh in libsrt's order: announce a fresh key `pre` packets before the
   * switch, switch at each multiple of `rate`, retire the old key `pre` packets after.
   */
  async #rotateKey(cipher: SrtCipher, count: number): Promise<void> {
    const rate = this.#init.keyRefreshPackets ?? defaultKeyRefreshPackets;
    const pre = Math.min(
      this.#init.keyPreAnnouncePackets ?? defaultKeyPreAnnouncePackets,
      rate / 2,
    );
    const phase = count % rate;
    if (phase === rate - pre) this.#announce(await cipher.refresh());
    else if (phase === 0) cipher.activateNewKey();
    else if (phase === pre && count > rate) this.#announce(await cipher.retireOldKey());
  }

  #announce(km: Uint8Array): void {
    this.#keyAnnouncements++;
    this.#announcing = { km, sentMs: performance.now() };
    this.#sendControl(ControlType.userDefined, UserDefinedSubtype.kmRequest, 0, km);
  }

  #deliver(payload: Uint8Array): void {
    if (this.#onPayload) {
      this.#onPayload(payload);
      return;
    }
    if (this.#queue.length >= maxQueuedPayloads) {
      this.#queue.shift();
      this.#readerOverflow++;
    }
    this.#queue.push(payload);
    this.#wake?.();
    this.#wake = undefined;
  }

  #tick(now: number): void {
    this.#lastTickMs = now;
    if (now - this.#lastReceivedMs > (this.#init.peerIdleTimeoutMs ?? defaultPeerIdleTimeoutMs)) {
      this.#end("timeout");
      return;
    }
    this.#receiver.tick(now);
    this.#sender.tick(now);
    const announcing = this.#announcing;
    if (announcing && now - announcing.sentMs >= keyAnnounceRepeatMs) {
      announcing.sentMs = now;
      this.#sendControl(ControlType.userDefined, UserDefinedSubtype.kmRequest, 0, announcing.km);
    }
    if (now - this.#lastSentMs >= keepaliveIntervalMs) {
      this.#sendControl(ControlType.keepalive, 0, 0, emptyControlBody);
    }
  }

  #sendControl(type: number, subtype: number, typeInfo: number, body: Uint8Array): void {
    this.#send(serializeControl({
      type,
      subtype,
      typeInfo,
      timestamp: this.#timestamp(),
      destSocketId: this.peerSocketId,
      body,
    }));
  }

  #timestamp(): number {
    return Math.round((performance.now() - this.#init.startMs) * 1000) >>> 0;
  }

  #send(bytes: Uint8Array): void {
    if (this.#ended) return;
    this.#lastSentMs = performance.now();
    this.#init.sendDatagram(bytes);
  }

  #end(reason: SrtCloseReason): void {
    if (this.#ended) return;
    this.#ended = true;
    clearInterval(this.#timer);
    this.#wake?.();
    this.#wake = undefined;
    this.#resolveClosed(reason);
    this.#endedWork = this.#init.onEnded?.(this);
  }
}
