/**
 * An SRT listener on one UDP socket accepting many callers (draft-sharabayko-srt §4.3.1):
 * stateless induction with a SYN cookie, then a conclusion the application accepts or refuses
 * (stream id, address, passphrase) before a connection exists. Established connections are
 * found by the destination socket id of each packet and must come from the caller's address.
 */
import { ParseError } from "../../../core/errors.ts";
import { ControlType, parsePacket, serializeControl, type SrtPacket } from "./packet.ts";
import {
  conclusionResponse,
  type Handshake,
  HandshakeType,
  inductionResponse,
  negotiateLatencyMs,
  parseHandshake,
  readConclusion,
  rejection,
  RejectReason,
  serializeHandshake,
} from "./handshake.ts";
import { defaultPeerIdleTimeoutMs, SrtConnection, type SrtPeer } from "./connection.ts";
import { SrtCipher } from "./crypto.ts";
import { parseKeyMaterial } from "./key_material.ts";
import { DatagramSocket, type DatagramSource } from "./datagram_socket.ts";

/** Default receive latency, ms (libsrt's live default). */
export const defaultLatencyMs = 120;
/** Default receive buffer, packets (libsrt's flow window default). */
export const defaultBufferPackets = 8192;
/** SYN cookies stay valid for this long (the current and the previous period), ms. */
const cookiePeriodMs = 60_000;

/** What the accept hook learns about a caller at its conclusion handshake. */
export interface SrtAcceptInfo {
  /** Stream id the caller sent, "" when none. */
  streamId: string;
  peer: SrtPeer;
  /** Whether the caller encrypts (sent key material). */
  passphraseNeeded: boolean;
}

/** The accept hook's answer. */
export type SrtAcceptDecision =
  /** Accept; `passphrase` overrides the listener's for this caller. */
  | { accept: true; passphrase?: string }
  /** Refuse with a libsrt reject code (RejectReason, e.g. 1403 forbidden) and a log text. */
  | { accept: false; reason: number; message?: string };

/** Options of an SrtListener. */
export interface SrtListenerOptions {
  hostname: string;
  /** 0 picks a free port. */
  port: number;
  /** Receive latency, ms. */
  latencyMs?: number;
  /** Callers must encrypt with this passphrase (10 to 79 characters). */
  passphrase?: string;
  /** Receive buffer / flow window, packets. */
  bufferPackets?: number;
  /** Packets encrypted with one key before a fresh one (libsrt's kmrefreshrate). */
  keyRefreshPackets?: number;
  /** Packets both keys are announced around a switch (libsrt's kmpreannounce). */
  keyPreAnnouncePackets?: number;
  peerIdleTimeoutMs?: number;
  /** Decides on each caller before a connection exists; absent accepts every caller. */
  accept?: (info: SrtAcceptInfo) => SrtAcceptDecision | Promise<SrtAcceptDecision>;
  /** Called with each established connection. */
  onConnection: (connection: SrtConnection) => void;
  /** Called with each refusal, for logging. */
  onReject?: (info: SrtAcceptInfo, reason: number, message: string) => void;
}

/** Counters of a listener. */
export interface SrtListenerStats {
  /** Connections established. */
  accepted: number;
  /** Handshakes refused, by libsrt reject code. */
  rejected: Record<number, number>;
  /** Datagrams that did not parse, or named no connection, dropped. */
  malformed: number;
  /** Conclusions with a stale or forged SYN cookie, ignored. */
  badCookies: number;
}

interface Pending {
  /** The answer sent, repeated when the caller repeats its conclusion. */
  answer?: Uint8Array;
  connection?: SrtConnection;
  /** For a refusal: when it is forgotten, so the caller may try again (performance.now()). */
  forgetAtMs?: number;
}

/** A refusal is repeated to the caller's repeated conclusions for this long, ms. */
const refusalMemoryMs = 3000;

/** An SRT listener socket. */
export class SrtListener {
  /** The bound port. */
  readonly port: number;
  readonly stats: SrtListenerStats = { accepted: 0, rejected: {}, malformed: 0, badCookies: 0 };
  #socket: DatagramSocket;
  #o: SrtListenerOptions;
  #bySocketId = new Map<number, SrtConnection>();
  /** Handshakes in progress or answered, by caller address and socket id. */
  #byCaller = new Map<string, Pending>();
  /** Keys of refused callers in #byCaller, oldest first. */
  #refusals: string[] = [];
  #secret = crypto.getRandomValues(new Uint32Array(1))[0];
  #closed = false;

  private constructor(socket: DatagramSocket, options: SrtListenerOptions) {
    this.#socket = socket;
    this.#o = options;
    this.port = socket.port;
  }

  /** Binds the listener. */
  static async listen(options: SrtListenerOptions): Promise<SrtListener> {
    // The socket delivers to the listener made with it: bound first, so `port` is known.
    const made: { listener?: SrtListener } = {};
    const socket = await DatagramSocket.bind(
      options.hostname,
      options.port,
      (data, source) => made.listener?.onDatagram(data, source),
    );
    made.listener = new SrtListener(socket, options);
    return made.listener;
  }

  /** Established connections. */
  connections(): SrtConnection[] {
    return [...this.#bySocketId.values()];
  }

  /** Ends every connection (each peer gets a shutdown) and closes the socket. Idempotent. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await Promise.all(this.connections().map((c) => c.close()));
    await this.#socket.close();
  }

  /** Handles one datagram from the socket (internal). */
  private onDatagram(msg: Uint8Array, peer: DatagramSource): void {
    if (this.#closed) return;
    let packet: SrtPacket;
    try {
      packet = parsePacket(msg);
    } catch (e) {
      if (!(e instanceof ParseError)) throw e;
      this.stats.malformed++;
      return;
    }
    if (packet.destSocketId !== 0) {
      const connection = this.#bySocketId.get(packet.destSocketId);
      if (
        connection && connection.peer.port === peer.port &&
        connection.peer.hostname === peer.hostname
      ) {
        if (packet.kind === "control" && packet.type === ControlType.handshake) {
          this.#onHandshake(packet.body, packet.timestamp, peer);
        } else connection.handlePacket(packet);
      } else this.stats.malformed++;
      return;
    }
    if (packet.kind === "control" && packet.type === ControlType.handshake) {
      this.#onHandshake(packet.body, packet.timestamp, peer);
    } else this.stats.malformed++;
  }

  #onHandshake(body: Uint8Array, timestamp: number, peer: SrtPeer): void {
    let hs: Handshake;
    try {
      hs = parseHandshake(body);
    } catch (e) {
      if (!(e instanceof ParseError)) throw e;
      this.stats.malformed++;
      return;
    }
    if (hs.type === HandshakeType.induction) {
      this.#answer(inductionResponse(hs, this.#cookie(peer, 0)), hs.socketId, peer);
      return;
    }
    if (hs.type !== HandshakeType.conclusion) return;
    if (hs.cookie !== this.#cookie(peer, 0) && hs.cookie !== this.#cookie(peer, -1)) {
      this.stats.badCookies++;
      return;
    }
    this.#forgetRefusals();
    const key = `${peer.hostname}|${peer.port}|${hs.socketId}`;
    const pending = this.#byCaller.get(key);
    if (pending) {
      // The caller repeats its conclusion until it hears our answer.
      if (pending.answer) this.#socket.send(pending.answer, peer.port, peer.hostname);
      return;
    }
    const entry: Pending = {};
    this.#byCaller.set(key, entry);
    const arrivalMs = performance.now();
    this.#conclude(hs, timestamp, arrivalMs, peer).then((outcome) => {
      if (this.#closed) {
        outcome.connection?.close();
        return;
      }
      entry.answer = outcome.answer;
      entry.connection = outcome.connection;
      this.#socket.send(outcome.answer, peer.port, peer.hostname);
      if (!outcome.connection) {
        entry.forgetAtMs = performance.now() + refusalMemoryMs;
        this.#refusals.push(key);
        return;
      }
      this.#bySocketId.set(outcome.connection.socketId, outcome.connection);
      this.stats.accepted++;
      this.#o.onConnection(outcome.connection);
    });
  }

  /** Drops the refusals old enough: those callers may try again with other settings. */
  #forgetRefusals(): void {
    const now = performance.now();
    while (this.#refusals.length > 0) {
      const key = this.#refusals[0];
      const entry = this.#byCaller.get(key);
      if (entry && (entry.forgetAtMs ?? 0) > now) return;
      this.#refusals.shift();
      this.#byCaller.delete(key);
    }
  }

  async #conclude(
    hs: Handshake,
    timestamp: number,
    arrivalMs: number,
    peer: SrtPeer,
  ): Promise<{ answer: Uint8Array; connection?: SrtConnection }> {
    const request = readConclusion(hs);
    const info: SrtAcceptInfo = {
      streamId: request.streamId,
      peer,
      passphraseNeeded: request.keyMaterial !== undefined,
    };
    const refuse = (reason: number, message: string) => {
      this.stats.rejected[reason] = (this.stats.rejected[reason] ?? 0) + 1;
      this.#o.onReject?.(info, reason, message);
      return { answer: this.#control(serializeHandshake(rejection(hs, reason)), hs.socketId) };
    };
    if (hs.version !== 5 || !request.srt) {
      return refuse(RejectReason.version, "handshake v5 with HSREQ required");
    }
    let passphrase = this.#o.passphrase;
    if (this.#o.accept) {
      let decision: SrtAcceptDecision;
      try {
        decision = await this.#o.accept(info);
      } catch (e) {
        return refuse(RejectReason.system, `accept hook failed: ${e}`);
      }
      if (!decision.accept) {
        return refuse(decision.reason, decision.message ?? "refused by the accept hook");
      }
      passphrase = decision.passphrase ?? passphrase;
    }
    let cipher: SrtCipher | undefined;
    if (passphrase && !request.keyMaterial) {
      return refuse(RejectReason.unsecure, "caller does not encrypt, a passphrase is required");
    }
    if (request.keyMaterial && !passphrase) {
      return refuse(RejectReason.unsecure, "caller encrypts, this listener has no passphrase");
    }
    if (request.keyMaterial && passphrase) {
      try {
        cipher = await SrtCipher.fromKeyMaterial(parseKeyMaterial(request.keyMaterial), passphrase);
      } catch (e) {
        return refuse(RejectReason.badSecret, `wrong passphrase (${(e as Error).message})`);
      }
    }
    const ownLatencyMs = this.#o.latencyMs ?? defaultLatencyMs;
    const receiverLatencyMs = negotiateLatencyMs(ownLatencyMs, request.srt.senderLatencyMs);
    const senderLatencyMs = negotiateLatencyMs(ownLatencyMs, request.srt.receiverLatencyMs);
    const bufferPackets = this.#o.bufferPackets ?? defaultBufferPackets;
    const socketId = this.#newSocketId();
    // Stamped 0 on the connection's clock: libsrt derives its delivery base for our data from it.
    const answer = this.#control(
      serializeHandshake(conclusionResponse(hs, {
        socketId,
        receiverLatencyMs,
        senderLatencyMs,
        flowWindow: bufferPackets,
        keyMaterial: cipher?.keyMaterial(),
      })),
      hs.socketId,
      0,
    );
    const connection = new SrtConnection({
      socketId,
      peerSocketId: hs.socketId,
      peer,
      streamId: request.streamId,
      latencyMs: receiverLatencyMs,
      senderLatencyMs,
      initialSeq: hs.initialSeq,
      peerStartMs: arrivalMs - timestamp / 1000,
      startMs: arrivalMs,
      peerFlowWindow: hs.flowWindow,
      bufferPackets,
      cipher,
      keyRefreshPackets: this.#o.keyRefreshPackets,
      keyPreAnnouncePackets: this.#o.keyPreAnnouncePackets,
      peerIdleTimeoutMs: this.#o.peerIdleTimeoutMs ?? defaultPeerIdleTimeoutMs,
      sendDatagram: (bytes) => this.#socket.send(bytes, peer.port, peer.hostname),
      onEnded: (c) => {
        this.#bySocketId.delete(c.socketId);
        this.#byCaller.delete(`${peer.hostname}|${peer.port}|${hs.socketId}`);
      },
    });
    return { answer, connection };
  }

  #answer(hs: Handshake, destSocketId: number, peer: SrtPeer): void {
    this.#socket.send(
      this.#control(serializeHandshake(hs), destSocketId),
      peer.port,
      peer.hostname,
    );
  }

  #control(body: Uint8Array, destSocketId: number, timestamp = 0): Uint8Array {
    return serializeControl({
      type: ControlType.handshake,
      subtype: 0,
      typeInfo: 0,
      timestamp,
      destSocketId,
      body,
    });
  }

  #newSocketId(): number {
    let id: number;
    do {
      id = crypto.getRandomValues(new Uint32Array(1))[0] & 0x3fffffff;
    } while (id === 0 || this.#bySocketId.has(id));
    return id;
  }

  /** A SYN cookie: the caller's address hashed with a secret and the current period. */
  #cookie(peer: SrtPeer, periodOffset: number): number {
    const period = Math.floor(Date.now() / cookiePeriodMs) + periodOffset;
    let h = 0x811c9dc5 ^ this.#secret;
    for (const c of `${peer.hostname}:${peer.port}:${period}`) {
      h = Math.imul(h ^ c.charCodeAt(0), 0x01000193);
    }
    return h >>> 0;
  }
}
