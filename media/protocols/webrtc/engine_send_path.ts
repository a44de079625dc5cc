/**
 * Send paths on the FFI send engine (media/send_engine/): after a player's DTLS handshake its
 * SRTP keys and ICE-selected address move to the engine, which protects and sends its media
 * from the Workers. werift keeps ICE, DTLS and RTCP (sender reports go out through it). A
 * publisher track is one engine group: its packets go to the engine once, whatever the number
 * of players; `send` on a path is for that player only (a NACK's retransmission).
 */
import type { RTCRtpSender, RtpPacket } from "werift";
import { SendEngine, type SendEngineOptions } from "../../send_engine/send_engine.ts";
import type { TransportCcStamp } from "../../send_engine/send_messages.ts";
import { srtpProfileFromDtlsId } from "../../rtp/srtp/srtp_profile.ts";
import { writeAbsSendTime } from "../../rtp/abs_send_time.ts";
import { selectedTransportOf } from "./ice_tcp.ts";
import { type RtpSendPath, sendSenderReport } from "./send_path.ts";

/** How often per-player sent/dropped counts are read back from the Workers, in ms. */
export const engineStatsIntervalMs = 1000;

/**
 * Longest run of relayed sender reports sent in one event-loop turn, in ms. A publisher's SR
 * is relayed to every player, each through werift's SRTCP on this thread (about 50-70 us
 * apiece): sent all at once they held the publisher's next packets back by N x 70 us (7 ms at
 * 100 players, the p99 of the WebRTC bench's added latency); in slices, media is read and
 * handed to the Workers between them.
 */
export const senderReportSliceMs = 1;

/** A publisher track's group on the engine, with what was published to it. */
export class EngineGroup {
  /** Packets and payload bytes handed to the engine for this group. */
  packets = 0;
  octets = 0;

  /**
   * `name`: unique on the engine (the publisher's media session and track). `absSendTimeId`:
   * the negotiated id of abs-send-time, stamped into every packet of the group (a group whose
   * players negotiated it alike: an SFU subscriber's own); undefined writes no extension.
   * `solo`: the group has one player only (an SFU subscription, rewritten for it), so what
   * its path sends needs no list of whom to send it to. `transportCcId`: the negotiated id of
   * the transport-cc extension, whose element is written first (number 0): the Workers stamp
   * each player's transport-wide number into it (SubscriberSpec.transportCc).
   */
  constructor(
    readonly name: string,
    readonly absSendTimeId?: number,
    readonly solo = false,
    readonly transportCcId?: number,
  ) {}

  /** Sends `packet` to every player of the group: once, on every Worker that has one. */
  publish(engine: SendEngine, packet: RtpPacket): void {
    // Players still attached while the server stops: the engine is gone, nothing to send.
    if (engine.closed) return;
    engine.publish(this.name, rtpBytes(packet, this.absSendTimeId, this.transportCcId));
    this.packets++;
    this.octets += packet.payload.length;
  }
}

/** The server's send engine for WebRTC players: started at server start when chosen. */
export class EngineSendPaths {
  #engine?: SendEngine;
  readonly #paths = new Map<string, EngineSendPath>();
  #timer?: ReturnType<typeof setInterval>;
  #nextId = 1;
  #polling = false;
  /** Paths with a sender report to relay, in arrival order (each at most once). */
  #reportQueue: EngineSendPath[] = [];
  #reportTimer?: ReturnType<typeof setTimeout>;

  /** The engine, when started. */
  get engine(): SendEngine | undefined {
    return this.#engine;
  }

  /** Paths on the engine. */
  get size(): number {
    return this.#paths.size;
  }

  /** The paths on the engine now. */
  paths(): EngineSendPath[] {
    return [...this.#paths.values()];
  }

  /** Starts the engine's Workers (`options.socketFd`: the ICE mux's socket). */
  async start(options: SendEngineOptions): Promise<void> {
    if (this.#engine) return;
    this.#engine = await SendEngine.start(options);
  }

  /**
   * Moves `sender`'s media to the engine: its keys and the ICE-selected remote address, and
   * the publisher track `group` rewritten to the sender's SSRC and `payloadType`. Undefined
   * when the engine is not started, the transport has no keys or selected pair yet, or its
   * selected pair is not UDP (ICE-TCP: the engine only sends datagrams on the ICE mux's
   * socket); the caller keeps werift's path then. `affinity`: paths with the same key share
   * a Worker (SendEngine's SubscriberSpec.affinity). `transportCc`: the transport's
   * transport-wide numbering, stamped on the path's packets (SubscriberSpec.transportCc).
   */
  open(
    sender: RTCRtpSender,
    payloadType: number,
    group: EngineGroup,
    affinity?: string,
    transportCc?: TransportCcStamp,
  ): EngineSendPath | undefined {
    const engine = this.#engine;
    if (!engine) return undefined;
    const dtls = sender.dtlsTransport;
    const config = dtls.srtp?.config;
    const pair = dtls.iceTransport.connection.nominated;
    const profile = config && srtpProfileFromDtlsId(config.profile);
    if (!config || !pair || !profile) return undefined;
    if (selectedTransportOf(dtls.iceTransport.connection) !== "udp") return undefined;
    const id = `p${this.#nextId++}`;
    try {
      engine.addSubscriber({
        id,
        host: pair.remoteCandidate.host,
        port: pair.remoteCandidate.port,
        profile,
        keys: { masterKey: config.keys.localMasterKey, masterSalt: config.keys.localMasterSalt },
        groups: [{ group: group.name, ssrc: sender.ssrc, payloadType }],
        affinity,
        transportCc,
      });
    } catch {
      // An address the engine's socket cannot reach (another family): werift sends instead.
      return undefined;
    }
    const path = new EngineSendPath(this, engine, id, sender, group, payloadType);
    this.#paths.set(id, path);
    this.#timer ??= setInterval(() => void this.#poll(), engineStatsIntervalMs);
    return path;
  }

  /**
   * Relays `path`'s pending sender report (EngineSendPath.sendSenderReport) soon: reports go
   * out in slices of `senderReportSliceMs`, one event-loop turn apart.
   */
  queueSenderReport(path: EngineSendPath): void {
    this.#reportQueue.push(path);
    this.#reportTimer ??= setTimeout(this.#sendReports, 0);
  }

  readonly #sendReports = (): void => {
    this.#reportTimer = undefined;
    const queue = this.#reportQueue;
    const until = performance.now() + senderReportSliceMs;
    let done = 0;
    while (done < queue.length) {
      queue[done++].sendPendingReport();
      if (performance.now() >= until) break;
    }
    queue.splice(0, done);
    if (queue.length > 0) this.#reportTimer = setTimeout(this.#sendReports, 0);
  };

  /** Takes a path off the engine (its player left). */
  remove(path: EngineSendPath): void {
    if (!this.#paths.delete(path.id)) return;
    this.#engine?.removeSubscriber(path.id);
    if (this.#paths.size === 0) {
      clearInterval(this.#timer);
      this.#timer = undefined;
    }
  }

  /** Reads every path's sent and dropped counts from the Workers now. */
  async refresh(): Promise<void> {
    const engine = this.#engine;
    if (!engine || this.#paths.size === 0) return;
    const stats = await engine.stats();
    for (const [id, figures] of stats) {
      const path = this.#paths.get(id);
      if (path) {
        path.sent = figures.sent;
        path.dropped = figures.dropped;
      }
    }
  }

  /** Stops polling, removes every path and ends the Workers. */
  async close(): Promise<void> {
    clearInterval(this.#timer);
    this.#timer = undefined;
    clearTimeout(this.#reportTimer);
    this.#reportTimer = undefined;
    this.#reportQueue = [];
    this.#paths.clear();
    const engine = this.#engine;
    this.#engine = undefined;
    await engine?.close();
  }

  async #poll(): Promise<void> {
    if (this.#polling) return;
    this.#polling = true;
    try {
      await this.refresh();
    } catch {
      // The engine closed while asked; nothing to count.
    } finally {
      this.#polling = false;
    }
  }
}

/** One player track on the send engine. */
export class EngineSendPath implements RtpSendPath {
  readonly ssrc: number;
  /** The subscriber's id on the engine. */
  readonly id: string;
  /** The publisher track it plays. */
  readonly group: EngineGroup;
  readonly engine: SendEngine;
  /** Datagrams the engine sent and dropped (socket buffer full), as last read. */
  sent = 0;
  dropped = 0;
  readonly #owner: EngineSendPaths;
  readonly #sender: RTCRtpSender;
  readonly #payloadType: number;
  /** A group shared with other paths it is in besides its own, and that group's counts then. */
  #shared?: { group: EngineGroup; basePackets: number; baseOctets: number };
  /** The group's counts when the path joined it. */
  readonly #basePackets: number;
  readonly #baseOctets: number;
  #ownPackets = 0;
  #ownOctets = 0;
  /** The publisher's latest SR mapping, waiting in the owner's queue (undefined: none). */
  #reportNtp?: bigint;
  #reportRtp = 0;
  #closed = false;

  constructor(
    owner: EngineSendPaths,
    engine: SendEngine,
    id: string,
    sender: RTCRtpSender,
    group: EngineGroup,
    payloadType: number,
  ) {
    this.#owner = owner;
    this.#payloadType = payloadType;
    this.engine = engine;
    this.id = id;
    this.#sender = sender;
    this.ssrc = sender.ssrc;
    this.group = group;
    this.#basePackets = group.packets;
    this.#baseOctets = group.octets;
  }

  /** Packets sent to this player: the groups' since it joined them, plus its own. */
  get packets(): number {
    const shared = this.#shared;
    return this.group.packets - this.#basePackets + this.#ownPackets +
      (shared ? shared.group.packets - shared.basePackets : 0);
  }

  get octets(): number {
    const shared = this.#shared;
    return this.group.octets - this.#baseOctets + this.#ownOctets +
      (shared ? shared.group.octets - shared.baseOctets : 0);
  }

  /** The shared group this path is in besides its own, if any. */
  get sharedGroup(): EngineGroup | undefined {
    return this.#shared?.group;
  }

  /**
   * Puts this player into `group` (one that other players share, e.g. an SFU track's layer),
   * leaving the shared group it was in: packets published to `group` from now on reach it
   * under its SSRC and payload type, with `rewrite`'s offsets added to their sequence numbers
   * and timestamps; `rewrite.startSequence`: the group's sequence number of the first packet
   * it is to get (late packets from before it are not sent to it).
   */
  joinShared(
    group: EngineGroup,
    rewrite: { sequenceOffset: number; timestampOffset: number; startSequence?: number },
  ): void {
    if (this.engine.closed) return;
    if (this.#shared?.group !== group) this.leaveShared();
    this.engine.join(this.id, {
      group: group.name,
      ssrc: this.ssrc,
      payloadType: this.#payloadType,
      ...rewrite,
    });
    this.#shared ??= { group, basePackets: group.packets, baseOctets: group.octets };
  }

  /** Leaves the shared group: nothing more published to it reaches this player. */
  leaveShared(): void {
    const shared = this.#shared;
    if (!shared) return;
    this.#shared = undefined;
    this.#ownPackets += shared.group.packets - shared.basePackets;
    this.#ownOctets += shared.group.octets - shared.baseOctets;
    if (!this.engine.closed) this.engine.leave(this.id, shared.group.name);
  }

  /** Sends `packet` to this player only (a retransmission from the packet cache). */
  send(packet: RtpPacket): void {
    if (this.engine.closed) return;
    const { name, absSendTimeId, solo, transportCcId } = this.group;
    const bytes = rtpBytes(packet, absSendTimeId, transportCcId);
    this.engine.publish(name, bytes, solo ? undefined : [this.id]);
    this.#ownPackets++;
    this.#ownOctets += packet.payload.length;
  }

  /**
   * Sends a sender report mapping `ntpTimestamp` to `rtpTimestamp`, with the counts at the
   * time it leaves: queued behind other players' (EngineSendPaths.queueSenderReport); a newer
   * mapping arriving while one waits replaces it.
   */
  sendSenderReport(ntpTimestamp: bigint, rtpTimestamp: number): void {
    if (this.#closed) return;
    const queued = this.#reportNtp !== undefined;
    this.#reportNtp = ntpTimestamp;
    this.#reportRtp = rtpTimestamp;
    if (!queued) this.#owner.queueSenderReport(this);
  }

  /** Sends the queued sender report, if it still has one and is open. */
  sendPendingReport(): void {
    const ntpTimestamp = this.#reportNtp;
    this.#reportNtp = undefined;
    if (ntpTimestamp === undefined || this.#closed) return;
    sendSenderReport(this.#sender, this, ntpTimestamp, this.#reportRtp);
  }

  /** Leaves the engine: nothing more is sent to this player. */
  close(): void {
    this.#closed = true;
    this.#reportNtp = undefined;
    this.leaveShared();
    this.#owner.remove(this);
  }
}

let scratch = new Uint8Array(1500);

/**
 * Bytes of a one-byte-header extension block (RFC 8285) holding abs-send-time (4 bytes) and/or
 * a transport-wide sequence number (3 bytes), padded to 32 bits, by which of them it holds.
 */
function extensionBlockBytes(absSendTime: boolean, transportCc: boolean): number {
  if (!absSendTime && !transportCc) return 0;
  return 4 + (absSendTime && transportCc ? 8 : 4);
}

/**
 * `packet` as the engine sends it: a 12-byte header (marker, payload type, sequence number,
 * timestamp, SSRC; no CSRCs or padding, as WeriftSendPath sends), with `absSendTimeId` the
 * abs-send-time extension stamped now, with `transportCcId` a transport-wide sequence number
 * element first in the block (number 0, for the Worker to fill in per player), and the
 * payload. The bytes are valid until the next call (the engine copies them at once).
 */
export function rtpBytes(
  packet: RtpPacket,
  absSendTimeId?: number,
  transportCcId?: number,
): Uint8Array {
  const { header, payload } = packet;
  const extension = extensionBlockBytes(absSendTimeId !== undefined, transportCcId !== undefined);
  const length = 12 + extension + payload.length;
  if (scratch.length < length) scratch = new Uint8Array(length);
  const out = scratch;
  out[0] = extension ? 0x90 : 0x80;
  out[1] = (header.marker ? 0x80 : 0) | (header.payloadType & 0x7f);
  out[2] = header.sequenceNumber >>> 8;
  out[3] = header.sequenceNumber & 0xff;
  const ts = header.timestamp;
  out[4] = ts >>> 24;
  out[5] = (ts >>> 16) & 0xff;
  out[6] = (ts >>> 8) & 0xff;
  out[7] = ts & 0xff;
  const ssrc = header.ssrc;
  out[8] = ssrc >>> 24;
  out[9] = (ssrc >>> 16) & 0xff;
  out[10] = (ssrc >>> 8) & 0xff;
  out[11] = ssrc & 0xff;
  if (extension) {
    out[12] = 0xbe;
    out[13] = 0xde;
    out[14] = 0;
    out[15] = (extension - 4) / 4;
    let at = 16;
    if (transportCcId !== undefined) {
      out[at] = (transportCcId << 4) | 1;
      out[at + 1] = 0;
      out[at + 2] = 0;
      at += 3;
    }
    if (absSendTimeId !== undefined) {
      out[at] = (absSendTimeId << 4) | 2;
      writeAbsSendTime(out.subarray(at + 1, at + 4), performance.timeOrigin + performance.now());
      at += 4;
    }
    // Padding bytes of the block are 0.
    out.fill(0, at, 12 + extension);
  }
  out.set(payload, 12 + extension);
  return out.subarray(0, length);
}
