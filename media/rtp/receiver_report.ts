/**
 * The receiving side of RTCP (RFC 3550 §6.4): statistics of one received RTP source
 * (extended highest sequence, cumulative and fractional loss, interarrival jitter, §A.1,
 * §A.3, §A.8), the receiver report that carries them, and the report blocks the far end
 * sends about us.
 */
import { ParseError, TruncatedError } from "../../core/errors.ts";
import { writeUint32 } from "./rtp_writer.ts";

const rtcpSenderReport = 200;
const rtcpReceiverReport = 201;
const rtcpSdes = 202;
const sdesCname = 1;
/** Length of one report block, in bytes. */
const reportBlockBytes = 24;

/** What one report block says about a source. */
export interface ReportBlock {
  /** The source the block is about. */
  ssrc: number;
  /** Share of packets lost since the previous report, in 1/256. */
  fractionLost: number;
  /** Packets lost since the start (24-bit, signed). */
  cumulativeLost: number;
  /** Extended highest sequence number received. */
  highestSequence: number;
  /** Interarrival jitter, in the source's clock units. */
  jitter: number;
  /** Middle 32 bits of the NTP time of the last sender report received from the source. */
  lastSenderReport: number;
  /** Time since that sender report, in 1/65536 s. */
  delaySinceLastSenderReport: number;
}

/** Reception statistics of one RTP source (one SSRC). */
export class ReceptionStats {
  /** Packets received. */
  received = 0;
  /** Interarrival jitter, in clock units (RFC 3550 §A.8). */
  jitter = 0;
  readonly ssrc: number;
  #clockRate: number;
  #base = -1;
  #max = 0;
  #cycles = 0;
  #transit: number | undefined;
  #expectedPrior = 0;
  #receivedPrior = 0;
  #lastSenderReport = 0;
  #senderReportAtMs: number | undefined;

  /** `ssrc`: the source; `clockRate`: its RTP clock, in Hz. */
  constructor(ssrc: number, clockRate: number) {
    this.ssrc = ssrc;
    this.#clockRate = clockRate;
  }

  /** Counts a packet: its sequence number, RTP timestamp and arrival time (ms, monotonic). */
  update(sequence: number, timestamp: number, arrivalMs: number): void {
    if (this.#base < 0) {
      this.#base = sequence;
      this.#max = sequence;
    } else {
      const ahead = (sequence - this.#max) & 0xffff;
      if (ahead > 0 && ahead < 0x8000) {
        if (sequence < this.#max) this.#cycles += 0x10000;
        this.#max = sequence;
      }
    }
    this.received++;
    // Transit in clock units, modulo 2^32 like the timestamps (only differences matter).
    const transit = (Math.round(arrivalMs * this.#clockRate / 1000) - timestamp) | 0;
    if (this.#transit !== undefined) {
      const d = Math.abs((transit - this.#transit) | 0);
      this.jitter += (d - this.jitter) / 16;
    }
    this.#transit = transit;
  }

  /** Packets expected from the first to the highest sequence number. */
  get expected(): number {
    return this.#base < 0 ? 0 : this.#cycles + this.#max - this.#base + 1;
  }

  /** Packets lost (expected but never received; duplicates can make it negative). */
  get lost(): number {
    return this.expected - this.received;
  }

  /** Notes a sender report of the source: its NTP time (ms since 1900), received at `nowMs`. */
  senderReport(ntpMs: number, nowMs: number): void {
    this.#lastSenderReport = ntpMiddle(ntpMs);
    this.#senderReportAtMs = nowMs;
  }

  /** The report block about this source at `nowMs`; starts the next loss interval. */
  block(nowMs: number): ReportBlock {
    const expected = this.expected;
    const expectedInterval = expected - this.#expectedPrior;
    const lostInterval = expectedInterval - (this.received - this.#receivedPrior);
    this.#expectedPrior = expected;
    this.#receivedPrior = this.received;
    return {
      ssrc: this.ssrc,
      fractionLost: expectedInterval > 0 && lostInterval > 0
        ? Math.min(255, Math.floor(lostInterval * 256 / expectedInterval))
        : 0,
      cumulativeLost: Math.max(-0x800000, Math.min(0x7fffff, this.lost)),
      highestSequence: (this.#cycles + this.#max) >>> 0,
      jitter: Math.floor(this.jitter),
      lastSenderReport: this.#lastSenderReport,
      delaySinceLastSenderReport: this.#senderReportAtMs === undefined
        ? 0
        : Math.floor((nowMs - this.#senderReportAtMs) * 65.536),
    };
  }
}

/** Middle 32 bits of an NTP time given in ms since 1900 (RFC 3550 §6.4.1 LSR). */
export function ntpMiddle(ntpMs: number): number {
  const seconds = Math.floor(ntpMs / 1000);
  const fraction = Math.floor((ntpMs / 1000 - seconds) * 65536);
  return (((seconds & 0xffff) << 16) | fraction) >>> 0;
}

function writeBlock(out: Uint8Array, at: number, b: ReportBlock): void {
  writeUint32(out, at, b.ssrc);
  writeUint32(out, at + 4, ((b.fractionLost & 0xff) << 24) | (b.cumulativeLost & 0xffffff));
  writeUint32(out, at + 8, b.highestSequence);
  writeUint32(out, at + 12, b.jitter);
  writeUint32(out, at + 16, b.lastSenderReport);
  writeUint32(out, at + 20, b.delaySinceLastSenderReport);
}

/**
 * A compound RTCP packet for a receiver: RR from `ssrc` with `blocks` (at most 31), then
 * SDES with `cname` when given (a compound that does not lead with an SR must carry it; a
 * caller appending this RR to its SR leaves `cname` out).
 */
export function writeReceiverReport(
  ssrc: number,
  blocks: ReportBlock[],
  cname?: string,
): Uint8Array {
  const count = Math.min(blocks.length, 31);
  const rrBytes = 8 + count * reportBlockBytes;
  const name = cname === undefined ? undefined : new TextEncoder().encode(cname).subarray(0, 255);
  const sdesBytes = name ? Math.ceil((4 + 4 + 2 + name.length + 1) / 4) * 4 : 0;
  const out = new Uint8Array(rrBytes + sdesBytes);
  out[0] = 0x80 | count;
  out[1] = rtcpReceiverReport;
  out[3] = rrBytes / 4 - 1;
  writeUint32(out, 4, ssrc);
  for (let i = 0; i < count; i++) writeBlock(out, 8 + i * reportBlockBytes, blocks[i]);
  if (name) {
    const at = rrBytes;
    out[at] = 0x81;
    out[at + 1] = rtcpSdes;
    out[at + 3] = sdesBytes / 4 - 1;
    writeUint32(out, at + 4, ssrc);
    out[at + 8] = sdesCname;
    out[at + 9] = name.length;
    out.set(name, at + 10);
  }
  return out;
}

/** The report blocks of the SR and RR packets of a compound RTCP packet. */
export function parseReportBlocks(data: Uint8Array): ReportBlock[] {
  const blocks: ReportBlock[] = [];
  let pos = 0;
  while (pos < data.length) {
    if (data.length - pos < 4) throw new TruncatedError("RTCP header cut");
    if (data[pos] >> 6 !== 2) throw new ParseError("not RTCP version 2");
    const count = data[pos] & 0x1f;
    const type = data[pos + 1];
    const bytes = (((data[pos + 2] << 8) | data[pos + 3]) + 1) * 4;
    if (pos + bytes > data.length) throw new TruncatedError("RTCP packet longer than its datagram");
    if (type === rtcpSenderReport || type === rtcpReceiverReport) {
      const first = pos + (type === rtcpSenderReport ? 28 : 8);
      if (first + count * reportBlockBytes > pos + bytes) {
        throw new TruncatedError("report blocks cut");
      }
      const view = new DataView(data.buffer, data.byteOffset);
      for (let i = 0; i < count; i++) {
        const at = first + i * reportBlockBytes;
        const lost = view.getUint32(at + 4) & 0xffffff;
        blocks.push({
          ssrc: view.getUint32(at),
          fractionLost: data[at + 4],
          cumulativeLost: lost & 0x800000 ? lost - 0x1000000 : lost,
          highestSequence: view.getUint32(at + 8),
          jitter: view.getUint32(at + 12),
          lastSenderReport: view.getUint32(at + 16),
          delaySinceLastSenderReport: view.getUint32(at + 20),
        });
      }
    }
    pos += bytes;
  }
  return blocks;
}
