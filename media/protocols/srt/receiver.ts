/**
 * The receiving half of an SRT connection in live mode (draft-sharabayko-srt §4.4-4.8):
 * receive buffer over 31-bit sequence numbers, loss list with an immediate NAK on a gap and
 * periodic NAKs, full ACK every tick with RTT and rates, light ACK every 64 packets, RTT from
 * ACKACK, TSBPD delivery at the negotiated latency with too-late packet drop, and message
 * reassembly. No sockets: packets come in through `onData`, time through `tick`.
 */
import {
  ControlType,
  type DataPacket,
  PacketPosition,
  serializeAck,
  serializeNak,
} from "./packet.ts";
import type { DropRange, LossRange } from "./packet.ts";
import { LossList } from "./loss_list.ts";
import { seqAdd, seqDiff } from "./seq.ts";

/** Packets between two light ACKs (libsrt's value). */
const lightAckPackets = 64;
/** Shortest interval between two NAKs of the same loss, ms (libsrt's minimum). */
const minNakIntervalMs = 20;
/** ACK send times kept to match ACKACKs. */
const maxPendingAcks = 1024;
/** Window over which the receive rates are measured, ms. */
const rateWindowMs = 1000;
/** Packets whose transit times are averaged to follow clock drift (libsrt's drift tracer). */
const driftSamples = 1000;
/** libsrt sends every 16th packet right after the one before it: a probe pair. */
const probeMask = 0xf;
/** Probe pair intervals the capacity estimate takes the median of (libsrt's 16). */
const probeSamples = 16;
/** Drift of the mean transit time that moves the delivery base, ms (libsrt's 5 ms). */
const maxDriftMs = 5;

/** Options of a Receiver. */
export interface ReceiverOptions {
  /** Sequence number of the peer's first data packet (from the handshake). */
  initialSeq: number;
  /** Negotiated TSBPD latency, ms. */
  latencyMs: number;
  /** Local time (ms, performance.now() clock) at which the peer's clock read 0. */
  peerStartMs: number;
  /** Receive buffer size in packets (the flow window announced). */
  bufferPackets: number;
  /** Sends a control packet to the peer. */
  sendControl: (type: number, typeInfo: number, body: Uint8Array) => void;
  /** Called with each delivered message, in order. */
  deliver: (payload: Uint8Array) => void;
  /** Decrypts a payload whose KK bits are set; absent means encrypted packets are dropped. */
  decrypt?: (seq: number, keyFlag: 1 | 2, payload: Uint8Array) => Promise<Uint8Array>;
}

/** Counters of a Receiver. */
export interface ReceiverStats {
  /** Data packets received, retransmissions and duplicates included. */
  packets: number;
  /** Payload bytes received. */
  bytes: number;
  /** Packets received with the retransmitted flag. */
  retransmitted: number;
  /** Packets detected missing (each counted once). */
  lost: number;
  /** Packets never delivered: still missing when their delivery time passed. */
  dropped: number;
  /** Packets received twice, or after their delivery time. */
  duplicates: number;
  /** Encrypted packets that could not be decrypted. */
  undecryptable: number;
  /** Messages delivered. */
  delivered: number;
  acksSent: number;
  naksSent: number;
  /** Smoothed round-trip time, ms. */
  rttMs: number;
  rttVarMs: number;
  /** Receive rate over the last second, bits per second. */
  receiveRateBps: number;
  /** Receive rate over the last second, packets per second. */
  packetRate: number;
  /** Total correction of the delivery base for the drift of the sender's clock, ms. */
  driftMs: number;
  /**
   * Link capacity estimated from probe pairs (median of 16), packets per second; 0 until
   * known. Times the packet size, the bandwidth of the path.
   */
  capacityPps: number;
}

interface Entry {
  payload: Uint8Array | Promise<Uint8Array | undefined>;
  /** Unwrapped sender timestamp, µs. */
  timestampUs: number;
  position: number;
}

/** Receive state of one connection. */
export class Receiver {
  readonly stats: ReceiverStats = {
    packets: 0,
    bytes: 0,
    retransmitted: 0,
    lost: 0,
    dropped: 0,
    duplicates: 0,
    undecryptable: 0,
    delivered: 0,
    acksSent: 0,
    naksSent: 0,
    rttMs: 100,
    rttVarMs: 50,
    receiveRateBps: 0,
    packetRate: 0,
    driftMs: 0,
    capacityPps: 0,
  };
  #o: ReceiverOptions;
  #buffer = new Map<number, Entry>();
  #loss = new LossList();
  /** Next sequence number to deliver. */
  #head: number;
  /** One past the highest sequence number received. */
  #next: number;
  #lastTimestampUs = 0;
  #sinceLightAck = 0;
  #lastAckSeq: number;
  #ackNumber = 0;
  #ackSentMs = new Map<number, number>();
  #rttSampled = false;
  #partial: Uint8Array[] | undefined;
  #ordered: Promise<void> | undefined;
  #windowStartMs: number;
  #windowPackets = 0;
  #windowBytes = 0;
  /** Arrival of the first packet of the current probe pair, ms. */
  #probeStartMs: number | undefined;
  #probeIntervalsMs: number[] = [];
  /** Local time at which the peer's clock read 0, corrected for drift. */
  #peerStartMs: number;
  #transitSumMs = 0;
  #transitCount = 0;
  /** Mean transit of the first window: what drift is measured against. */
  #referenceTransitMs: number | undefined;

  constructor(options: ReceiverOptions) {
    this.#o = options;
    this.#head = options.initialSeq;
    this.#next = options.initialSeq;
    this.#lastAckSeq = options.initialSeq;
    this.#windowStartMs = options.peerStartMs;
    this.#peerStartMs = options.peerStartMs;
  }

  /** Whether an ACKACK measured the round trip yet (else `stats.rttMs` is the default). */
  get rttMeasured(): boolean {
    return this.#rttSampled;
  }

  /** Packets waiting in the buffer for their delivery time. */
  get buffered(): number {
    return this.#buffer.size;
  }

  /** Takes one data packet. */
  onData(p: DataPacket, nowMs: number): void {
    const stats = this.stats;
    stats.packets++;
    stats.bytes += p.payload.length;
    this.#windowPackets++;
    this.#windowBytes += p.payload.length;
    if (p.retransmitted) stats.retransmitted++;
    const offset = seqDiff(this.#head, p.seq);
    if (offset < 0 || this.#buffer.has(p.seq)) {
      stats.duplicates++;
      return;
    }
    if (offset >= this.#o.bufferPackets) {
      stats.dropped++; // beyond the buffer: the sender ignored the flow window
      return;
    }
    const gap = seqDiff(this.#next, p.seq);
    if (gap > 0) {
      const to = seqAdd(p.seq, -1);
      this.#loss.addRange(this.#next, to, nowMs);
      stats.lost += gap;
      this.#sendNak([{ from: this.#next, to }]);
    } else if (gap < 0) {
      this.#loss.remove(p.seq);
    }
    if (gap >= 0) this.#next = seqAdd(p.seq, 1);
    const timestampUs = this.#unwrap(p.timestamp);
    if (!p.retransmitted) {
      this.#trackDrift(nowMs - this.#peerStartMs - timestampUs / 1000);
      this.#probe(p.seq, gap, nowMs);
    }
    this.#buffer.set(p.seq, { payload: this.#open(p), timestampUs, position: p.position });
    if (++this.#sinceLightAck >= lightAckPackets) this.#sendAck(nowMs, true);
  }

  /** Takes an ACKACK: the round trip of the full ACK it names. */
  onAckAck(ackNumber: number, nowMs: number): void {
    const sentMs = this.#ackSentMs.get(ackNumber);
    if (sentMs === undefined) return;
    this.#ackSentMs.delete(ackNumber);
    const sample = nowMs - sentMs;
    const s = this.stats;
    if (!this.#rttSampled) {
      this.#rttSampled = true;
      s.rttMs = sample;
      s.rttVarMs = sample / 2;
    } else {
      s.rttVarMs = (s.rttVarMs * 3 + Math.abs(s.rttMs - sample)) / 4;
      s.rttMs = (s.rttMs * 7 + sample) / 8;
    }
  }

  /** Takes a drop request: the sender gave up on these packets, stop asking for them. */
  onDropRequest(range: DropRange): void {
    const n = seqDiff(range.firstSeq, range.lastSeq);
    for (let i = 0; i <= n && i < this.#o.bufferPackets; i++) {
      this.#loss.remove(seqAdd(range.firstSeq, i));
    }
  }

  /** Runs the timers: delivery, full ACK, periodic NAK. Call every 10 ms. */
  tick(nowMs: number): void {
    this.#deliverDue(nowMs);
    this.#sendAck(nowMs, false);
    const s = this.stats;
    const intervalMs = Math.max(minNakIntervalMs, (s.rttMs + 4 * s.rttVarMs) / 2);
    const due = this.#loss.due(nowMs, intervalMs);
    if (due.length > 0) this.#sendNak(due);
    const elapsedMs = nowMs - this.#windowStartMs;
    if (elapsedMs >= rateWindowMs) {
      s.packetRate = Math.round(this.#windowPackets * 1000 / elapsedMs);
      s.receiveRateBps = Math.round(this.#windowBytes * 8000 / elapsedMs);
      this.#windowStartMs = nowMs;
      this.#windowPackets = 0;
      this.#windowBytes = 0;
    }
  }

  /** Delivers everything buffered now, skipping what is missing (the peer shut down). */
  flush(): void {
    this.#deliverDue(Infinity);
  }

  /** Resolves when every decrypted message handed to `deliver` so far was delivered. */
  async settled(): Promise<void> {
    await this.#ordered;
  }

  /** Takes the arrival interval of a probe pair (packets N*16 and N*16+1, in order). */
  #probe(seq: number, gap: number, nowMs: number): void {
    const position = seq & probeMask;
    if (position === 0) {
      this.#probeStartMs = gap === 0 ? nowMs : undefined;
      return;
    }
    if (position !== 1 || gap !== 0 || this.#probeStartMs === undefined) return;
    const intervalMs = Math.max(nowMs - this.#probeStartMs, 0.001);
    this.#probeStartMs = undefined;
    this.#probeIntervalsMs.push(intervalMs);
    if (this.#probeIntervalsMs.length > probeSamples) this.#probeIntervalsMs.shift();
    const sorted = [...this.#probeIntervalsMs].sort((a, b) => a - b);
    this.stats.capacityPps = Math.round(1000 / sorted[sorted.length >> 1]);
  }

  /**
   * Follows the sender's clock: when the mean transit time of a window of packets moved more
   * than 5 ms from the first window's, the delivery base moves with it, so a sender clock
   * slower or faster than ours neither eats the latency nor grows the buffer.
   */
  #trackDrift(transitMs: number): void {
    this.#transitSumMs += transitMs;
    if (++this.#transitCount < driftSamples) return;
    const meanMs = this.#transitSumMs / this.#transitCount;
    this.#transitSumMs = 0;
    this.#transitCount = 0;
    if (this.#referenceTransitMs === undefined) {
      this.#referenceTransitMs = meanMs;
      return;
    }
    const driftMs = meanMs - this.#referenceTransitMs;
    if (Math.abs(driftMs) <= maxDriftMs) return;
    this.#peerStartMs += driftMs;
    this.stats.driftMs += driftMs;
  }

  #open(p: DataPacket): Entry["payload"] {
    if (p.keyFlag === 0) return p.payload; // a view of its own datagram, not reused
    const decrypt = this.#o.decrypt;
    const kk = p.keyFlag === 2 ? 2 : 1;
    if (!decrypt) return Promise.resolve(undefined);
    return decrypt(p.seq, kk, p.payload.slice()).catch(() => undefined);
  }

  /** Sender timestamps wrap every 2^32 µs (71 minutes): keep them rising. */
  #unwrap(timestamp: number): number {
    const last = this.#lastTimestampUs;
    let delta = (timestamp - (last % 2 ** 32)) | 0;
    if (last === 0) delta = timestamp;
    const unwrapped = last + delta;
    if (unwrapped > last) this.#lastTimestampUs = unwrapped;
    return unwrapped;
  }

  #deliveryMs(e: Entry): number {
    return this.#peerStartMs + e.timestampUs / 1000 + this.#o.latencyMs;
  }

  #deliverDue(nowMs: number): void {
    while (this.#buffer.size > 0) {
      const entry = this.#buffer.get(this.#head);
      if (entry) {
        if (this.#deliveryMs(entry) > nowMs) return;
        this.#buffer.delete(this.#head);
        this.#head = seqAdd(this.#head, 1);
        this.#emit(entry.payload, entry.position);
        continue;
      }
      // The head is missing: once a later packet is due, the missing ones are too late.
      let seq = this.#head;
      let found: Entry | undefined;
      while (seqDiff(seq, this.#next) > 0) {
        found = this.#buffer.get(seq);
        if (found) break;
        seq = seqAdd(seq, 1);
      }
      if (!found || this.#deliveryMs(found) > nowMs) return;
      const missing = seqDiff(this.#head, seq);
      this.stats.dropped += missing;
      for (let i = 0; i < missing; i++) this.#loss.remove(seqAdd(this.#head, i));
      this.#head = seq;
      this.#emit("drop", PacketPosition.solo);
    }
  }

  /** Hands payloads over in order, waiting for decryption when a payload is pending. */
  #emit(payload: Entry["payload"] | "drop", position: number): void {
    if (payload instanceof Promise || this.#ordered) {
      const previous = this.#ordered ?? Promise.resolve();
      const next = previous.then(async () => this.#assemble(await payload, position));
      this.#ordered = next;
      next.then(() => {
        if (this.#ordered === next) this.#ordered = undefined;
      });
      return;
    }
    this.#assemble(payload, position);
  }

  /** Joins the packets of a multi-packet message; a lost packet discards the message. */
  #assemble(payload: Uint8Array | undefined | "drop", position: number): void {
    if (payload === "drop" || payload === undefined) {
      this.#partial = undefined;
      if (payload === undefined) this.stats.undecryptable++;
      return;
    }
    if (position === PacketPosition.solo) {
      this.#partial = undefined;
      this.#deliver(payload);
    } else if (position === PacketPosition.first) {
      this.#partial = [payload];
    } else if (this.#partial) {
      this.#partial.push(payload);
      if (position === PacketPosition.last) {
        const parts = this.#partial;
        this.#partial = undefined;
        const out = new Uint8Array(parts.reduce((n, b) => n + b.length, 0));
        let off = 0;
        for (const b of parts) {
          out.set(b, off);
          off += b.length;
        }
        this.#deliver(out);
      }
    }
  }

  #deliver(payload: Uint8Array): void {
    this.stats.delivered++;
    this.#o.deliver(payload);
  }

  #sendAck(nowMs: number, light: boolean): void {
    const ackSeq = this.#loss.first() ?? this.#next;
    this.#sinceLightAck = 0;
    if (light) {
      this.#o.sendControl(ControlType.ack, 0, serializeAck({ lastAckSeq: ackSeq }));
      return;
    }
    if (ackSeq === this.#lastAckSeq) return;
    this.#lastAckSeq = ackSeq;
    const s = this.stats;
    this.#ackNumber = (this.#ackNumber + 1) >>> 0 || 1;
    this.#ackSentMs.set(this.#ackNumber, nowMs);
    if (this.#ackSentMs.size > maxPendingAcks) {
      this.#ackSentMs.delete(this.#ackSentMs.keys().next().value!);
    }
    s.acksSent++;
    this.#o.sendControl(
      ControlType.ack,
      this.#ackNumber,
      serializeAck({
        lastAckSeq: ackSeq,
        rttUs: Math.round(s.rttMs * 1000),
        rttVarUs: Math.round(s.rttVarMs * 1000),
        availableBuffer: Math.max(2, this.#o.bufferPackets - this.#buffer.size),
        packetRate: s.packetRate,
        capacity: s.capacityPps,
        receiveRate: Math.round(s.receiveRateBps / 8),
      }),
    );
  }

  #sendNak(ranges: LossRange[]): void {
    this.stats.naksSent++;
    this.#o.sendControl(ControlType.nak, 0, serializeNak(ranges));
  }
}
