/**
 * A send Worker's fan-out: its subscribers, the groups they receive, and the loop that turns
 * one batch of publisher packets into each subscriber's protected copies. Copies of one
 * subscriber are written back to back so equal-size runs leave as one GSO message.
 */
import { srtpTrailerBytes } from "../rtp/srtp/srtp_protector.ts";
import type { SrtpProtector } from "../rtp/srtp/srtp_protector.ts";
import { createSrtpProtector } from "../rtp/srtp/srtp_select.ts";
import type { SrtpBackend } from "../rtp/srtp/srtp_protector.ts";
import { addressOf } from "../rtp/srtp/libcrypto.ts";
import { ffiSrtpAvailable } from "../rtp/srtp/srtp_ffi.ts";
import { readBatch, type Uint32ArrayLike } from "./send_batch.ts";
import type { GroupMembership, StatsTriples, WorkerSubscriber } from "./send_messages.ts";
import { UdpBatchSender, type UdpBatchSenderOptions } from "./udp_batch_sender.ts";
import { readVp8, rtpPayloadStart, shiftVp8, vp8Fields } from "../rtp/vp8_descriptor.ts";
import { lateWindowPackets } from "../rtp/late_window.ts";
import { TransportCcLog } from "./transport_cc_log.ts";

/** One subscriber inside a Worker. */
interface Subscriber {
  handle: number;
  destination: number;
  protector: SrtpProtector;
  /** Rewrite per group number. */
  groups: Map<number, GroupMembership>;
  /** Offsets in the current batch of the records it gets, with their groups (reused). */
  pendingOffsets: number[];
  pendingLengths: number[];
  pendingGroups: number[];
  /** Packets it could not get (protection failed or the socket refused). */
  failed: number;
  /** Its transport's sequence numbers (transport-cc) and their extension id. */
  transportCc?: { id: number; log: TransportCcLog };
}

/** Bytes of the slab copies are protected in before they are sent. */
const slabBytes = 512 * 1024;

/** Options of a Fanout. */
export interface FanoutOptions extends Omit<UdpBatchSenderOptions, "data"> {
  srtpBackend?: SrtpBackend | "auto";
}

/** The subscribers of one Worker and their send loop. */
export class Fanout {
  readonly sender: UdpBatchSender;
  /** The SRTP backend of this Worker's subscribers. */
  readonly srtpBackend: SrtpBackend;
  readonly #data = new Uint8Array(slabBytes);
  readonly #dataAddress: bigint;
  #dataUsed = 0;
  readonly #subscribers = new Map<number, Subscriber>();
  readonly #groups = new Map<number, Subscriber[]>();
  /** Subscribers with copies pending in the batch being processed. */
  readonly #touched: Subscriber[] = [];
  #batch: Uint8Array = new Uint8Array(0);
  /** VP8 descriptor fields of the copy being rewritten (reused). */
  readonly #vp8 = vp8Fields();
  /** Send time of the batch being sent, ms since the epoch (transport-cc records). */
  #batchMs = 0;
  /** Transport-cc logs by their memory: a transport's subscribers here share one view. */
  readonly #transportCcLogs = new WeakMap<SharedArrayBuffer, TransportCcLog>();

  /** Opens the Worker's socket. */
  constructor(options: FanoutOptions = {}) {
    this.sender = UdpBatchSender.open({ ...options, data: this.#data });
    const backend = options.srtpBackend ?? "auto";
    this.srtpBackend = backend === "auto" ? (ffiSrtpAvailable().ok ? "ffi" : "portable") : backend;
    this.#dataAddress = addressOf(this.#data);
  }

  /** Subscribers in this Worker. */
  get size(): number {
    return this.#subscribers.size;
  }

  /** Adds a subscriber; throws on bad keys or a bad address. */
  add(spec: WorkerSubscriber): void {
    this.remove(spec.handle);
    const protector = createSrtpProtector(spec, { backend: this.srtpBackend });
    let destination: number;
    try {
      destination = this.sender.addDestination(spec.host, spec.port);
    } catch (err) {
      protector.close();
      throw err;
    }
    const subscriber: Subscriber = {
      handle: spec.handle,
      destination,
      protector,
      groups: new Map(spec.groups.map((g) => [g.group, g])),
      pendingOffsets: [],
      pendingLengths: [],
      pendingGroups: [],
      failed: 0,
      transportCc: spec.transportCc && {
        id: spec.transportCc.id,
        log: this.#transportCcLog(spec.transportCc.log),
      },
    };
    this.#subscribers.set(spec.handle, subscriber);
    for (const group of spec.groups) {
      let members = this.#groups.get(group.group);
      if (!members) this.#groups.set(group.group, members = []);
      members.push(subscriber);
    }
  }

  /**
   * Puts a subscriber into a group, or changes its rewrite there: packets of the group taken
   * from now on (the batches after this message) reach it rewritten so.
   */
  join(handle: number, membership: GroupMembership): void {
    const subscriber = this.#subscribers.get(handle);
    if (!subscriber) return;
    if (!subscriber.groups.has(membership.group)) {
      let members = this.#groups.get(membership.group);
      if (!members) this.#groups.set(membership.group, members = []);
      members.push(subscriber);
    }
    subscriber.groups.set(membership.group, membership);
  }

  /** Takes a subscriber out of a group: later packets of the group do not reach it. */
  leave(handle: number, group: number): void {
    const subscriber = this.#subscribers.get(handle);
    if (!subscriber?.groups.delete(group)) return;
    const members = this.#groups.get(group)!;
    members.splice(members.indexOf(subscriber), 1);
    if (members.length === 0) this.#groups.delete(group);
  }

  /** Removes a subscriber: nothing more is sent to it. */
  remove(handle: number): void {
    const subscriber = this.#subscribers.get(handle);
    if (!subscriber) return;
    this.#subscribers.delete(handle);
    for (const group of subscriber.groups.keys()) {
      const members = this.#groups.get(group)!;
      members.splice(members.indexOf(subscriber), 1);
      if (members.length === 0) this.#groups.delete(group);
    }
    this.sender.removeDestination(subscriber.destination);
    subscriber.protector.close();
  }

  /** [handle, sent, dropped] of every subscriber. */
  stats(): StatsTriples {
    const out: StatsTriples = [];
    for (const s of this.#subscribers.values()) {
      const { sent, dropped } = this.sender.stats(s.destination);
      out.push(s.handle, sent, dropped + s.failed);
    }
    return out;
  }

  /** Protects and sends every packet of `batch` to its subscribers. */
  send(batch: Uint8Array): void {
    this.#batch = batch;
    this.#batchMs = performance.timeOrigin + performance.now();
    readBatch(batch, this.#collect);
    // Subscriber by subscriber, so one subscriber's copies lie back to back (GSO runs).
    for (const subscriber of this.#touched) {
      const offsets = subscriber.pendingOffsets;
      for (let i = 0; i < offsets.length; i++) {
        this.#sendCopy(
          subscriber,
          offsets[i],
          subscriber.pendingLengths[i],
          subscriber.pendingGroups[i],
        );
      }
      offsets.length = 0;
      subscriber.pendingLengths.length = 0;
      subscriber.pendingGroups.length = 0;
    }
    this.#touched.length = 0;
    this.sender.flush();
    this.#dataUsed = 0;
  }

  readonly #collect = (
    group: number,
    handles: Uint32ArrayLike,
    offset: number,
    length: number,
  ): void => {
    if (handles.length === 0) {
      const members = this.#groups.get(group);
      if (!members) return;
      for (const subscriber of members) this.#pend(subscriber, group, offset, length);
      return;
    }
    for (let i = 0; i < handles.length; i++) {
      const subscriber = this.#subscribers.get(handles.get(i));
      if (subscriber?.groups.has(group)) this.#pend(subscriber, group, offset, length);
    }
  };

  #pend(subscriber: Subscriber, group: number, offset: number, length: number): void {
    if (subscriber.pendingOffsets.length === 0) this.#touched.push(subscriber);
    subscriber.pendingOffsets.push(offset);
    subscriber.pendingLengths.push(length);
    subscriber.pendingGroups.push(group);
  }

  #sendCopy(subscriber: Subscriber, offset: number, length: number, group: number): void {
    if (this.#dataUsed + length + srtpTrailerBytes > slabBytes) {
      // Queued datagrams point into the slab: send them before reusing it.
      this.sender.flush();
      this.#dataUsed = 0;
    }
    const rewrite = subscriber.groups.get(group)!;
    const batch = this.#batch;
    if (rewrite.startSequence !== undefined) {
      const since = ((batch[offset + 2] << 8 | batch[offset + 3]) - rewrite.startSequence) & 0xffff;
      // Before its first packet here: a late one of a frame it never got.
      if (since >= 0x8000) return;
      // Well past it: no late packet from before is still on its way.
      if (since >= lateWindowPackets) rewrite.startSequence = undefined;
    }
    const at = this.#dataUsed;
    const data = this.#data;
    data.set(batch.subarray(offset, offset + length), at);
    if (rewrite.payloadType !== undefined) {
      data[at + 1] = (data[at + 1] & 0x80) | rewrite.payloadType;
    }
    if (rewrite.ssrc !== undefined) {
      data[at + 8] = rewrite.ssrc >>> 24;
      data[at + 9] = (rewrite.ssrc >>> 16) & 0xff;
      data[at + 10] = (rewrite.ssrc >>> 8) & 0xff;
      data[at + 11] = rewrite.ssrc & 0xff;
    }
    if (rewrite.sequenceOffset) {
      const sequence = ((data[at + 2] << 8 | data[at + 3]) + rewrite.sequenceOffset) & 0xffff;
      data[at + 2] = sequence >>> 8;
      data[at + 3] = sequence & 0xff;
    }
    if (rewrite.timestampOffset) {
      const timestamp =
        ((data[at + 4] << 24 | data[at + 5] << 16 | data[at + 6] << 8 | data[at + 7]) +
          rewrite.timestampOffset) >>> 0;
      data[at + 4] = timestamp >>> 24;
      data[at + 5] = (timestamp >>> 16) & 0xff;
      data[at + 6] = (timestamp >>> 8) & 0xff;
      data[at + 7] = timestamp & 0xff;
    }
    if (rewrite.vp8PictureIdOffset || rewrite.vp8Tl0PicIdxOffset) {
      const payloadAt = rtpPayloadStart(data, at, at + length);
      if (payloadAt >= 0) {
        const fields = readVp8(data, payloadAt, at + length, this.#vp8);
        shiftVp8(data, fields, rewrite.vp8PictureIdOffset ?? 0, rewrite.vp8Tl0PicIdxOffset ?? 0);
      }
    }
    // Its transport's next number, in the element rtpBytes put first in the extension block.
    const transportCc = subscriber.transportCc;
    let transportSequence = -1;
    if (
      transportCc && (data[at] & 0x1f) === 0x10 && data[at + 12] === 0xbe &&
      data[at + 13] === 0xde && data[at + 16] >> 4 === transportCc.id
    ) {
      transportSequence = transportCc.log.next();
      data[at + 17] = transportSequence >>> 8;
      data[at + 18] = transportSequence & 0xff;
    }
    let protectedBytes: number;
    try {
      protectedBytes = subscriber.protector.protect(
        data.subarray(at, at + length + srtpTrailerBytes),
        length,
        this.#dataAddress + BigInt(at),
      );
    } catch {
      subscriber.failed++;
      return;
    }
    this.sender.queue(subscriber.destination, at, protectedBytes);
    this.#dataUsed = at + protectedBytes;
    if (transportSequence >= 0) {
      transportCc!.log.record(transportSequence, protectedBytes, this.#batchMs);
    }
  }

  #transportCcLog(buffer: SharedArrayBuffer): TransportCcLog {
    let log = this.#transportCcLogs.get(buffer);
    if (!log) this.#transportCcLogs.set(buffer, log = new TransportCcLog(buffer));
    return log;
  }

  /** Closes every protector and the socket. */
  close(): void {
    for (const handle of [...this.#subscribers.keys()]) this.remove(handle);
    this.sender.close();
  }
}
