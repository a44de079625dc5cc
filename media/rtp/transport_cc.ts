/**
 * Transport-wide congestion control (draft-holmer-rmcat-transport-wide-cc-extensions-01): the
 * sender numbers every packet of a transport in one 16-bit sequence (an RTP header extension),
 * and the receiver reports which of them arrived and when, in RTCP transport feedback (RTPFB,
 * PT 205, FMT 15). The sender compares those arrival times with its send times.
 */
import { ParseError, TruncatedError } from "../../core/errors.ts";

/** URI of the header extension in `a=extmap`. */
export const transportCcUri =
  "http://www.ietf.org/id/draft-holmer-rmcat-transport-wide-cc-extensions-01";

/** FMT of transport feedback in an RTPFB (PT 205) packet. */
export const transportCcFmt = 15;
/** RTCP packet type of transport-layer feedback. */
const rtpfbType = 205;
/** Units of a receive delta, in ms (250 µs). */
const deltaUnitMs = 0.25;
/** Units of the reference time, in ms. */
const referenceUnitMs = 64;
/** Bytes before the first packet chunk: RTCP header, SSRCs, base, count, reference, count. */
const fixedBytes = 20;

/** Packet status symbols (§3.1.1). */
const notReceived = 0;
const smallDelta = 1;
const largeDelta = 2;

/** One transport feedback packet. */
export interface TransportCcFeedback {
  senderSsrc: number;
  mediaSsrc: number;
  /** Transport sequence number of the first packet reported. */
  baseSequence: number;
  /** Packets reported, from `baseSequence` on (received or not). */
  statusCount: number;
  /** Feedback packet count (8 bits), to notice lost feedback. */
  feedbackCount: number;
  /** Sequence numbers of the packets that arrived, in report order. */
  received: number[];
  /**
   * Their arrival times, in ms on the receiver's clock (the reference time plus the deltas),
   * same order as `received`.
   */
  arrivalMs: number[];
}

/**
 * Reads a transport feedback packet: `packet` is the whole RTCP packet (header included, as
 * one packet of a compound). Anything else, cut or inconsistent, is a ParseError (a
 * TruncatedError when cut).
 */
export function parseTransportCc(packet: Uint8Array): TransportCcFeedback {
  if (packet.length < fixedBytes) {
    throw new TruncatedError("transport feedback shorter than 20 bytes");
  }
  if (packet[0] >> 6 !== 2) throw new ParseError("transport feedback: RTCP version is not 2");
  if ((packet[0] & 0x1f) !== transportCcFmt || packet[1] !== rtpfbType) {
    throw new ParseError("not a transport feedback packet (RTPFB FMT 15)");
  }
  const declared = ((packet[2] << 8 | packet[3]) + 1) * 4;
  if (declared > packet.length) throw new TruncatedError("transport feedback cut");
  if (declared < fixedBytes) {
    throw new ParseError(`transport feedback length ${declared} under ${fixedBytes} bytes`);
  }
  let end = declared;
  if (packet[0] & 0x20) {
    const padding = packet[end - 1];
    if (padding === 0 || padding > end - fixedBytes) {
      throw new ParseError("transport feedback padding out of range");
    }
    end -= padding;
  }
  const view = new DataView(packet.buffer, packet.byteOffset, end);
  const statusCount = view.getUint16(14);
  // 24-bit signed, in 64 ms units.
  const reference = (view.getUint32(16) >> 8) << 8 >> 8;
  const feedback: TransportCcFeedback = {
    senderSsrc: view.getUint32(4),
    mediaSsrc: view.getUint32(8),
    baseSequence: view.getUint16(12),
    statusCount,
    feedbackCount: packet[19],
    received: [],
    arrivalMs: [],
  };
  const statuses = new Uint8Array(statusCount);
  let filled = 0;
  let at = fixedBytes;
  while (filled < statusCount) {
    if (at + 2 > end) throw new TruncatedError("transport feedback: packet chunks cut");
    const chunk = view.getUint16(at);
    at += 2;
    if ((chunk & 0x8000) === 0) {
      // Run length chunk: one status for up to 8191 packets.
      const status = (chunk >> 13) & 0x3;
      const run = chunk & 0x1fff;
      if (run === 0) throw new ParseError("transport feedback: empty run length chunk");
      const take = Math.min(run, statusCount - filled);
      statuses.fill(status, filled, filled + take);
      filled += take;
    } else if ((chunk & 0x4000) === 0) {
      // Status vector of 14 one-bit symbols: received (small delta) or not.
      for (let i = 13; i >= 0 && filled < statusCount; i--) statuses[filled++] = (chunk >> i) & 1;
    } else {
      // Status vector of 7 two-bit symbols.
      for (let i = 6; i >= 0 && filled < statusCount; i--) {
        statuses[filled++] = (chunk >> (2 * i)) & 3;
      }
    }
  }
  let timeMs = reference * referenceUnitMs;
  for (let i = 0; i < statusCount; i++) {
    const status = statuses[i];
    if (status === notReceived) continue;
    if (status === smallDelta) {
      if (at + 1 > end) throw new TruncatedError("transport feedback: receive deltas cut");
      timeMs += view.getUint8(at) * deltaUnitMs;
      at += 1;
    } else if (status === largeDelta) {
      if (at + 2 > end) throw new TruncatedError("transport feedback: receive deltas cut");
      timeMs += view.getInt16(at) * deltaUnitMs;
      at += 2;
    } else {
      throw new ParseError("transport feedback: reserved packet status");
    }
    feedback.received.push((feedback.baseSequence + i) & 0xffff);
    feedback.arrivalMs.push(timeMs);
  }
  return feedback;
}

/** A packet a transport feedback reports: its sequence number and arrival time, or lost. */
export interface TransportCcReport {
  sequence: number;
  /** Arrival time in ms on the receiver's clock; undefined: not received. */
  arrivalMs?: number;
}

/**
 * A transport feedback packet reporting `reports` (consecutive sequence numbers from the
 * first, arrival times not decreasing by more than a large delta allows), with two-bit
 * status vectors and, where every status of seven is the same, run length chunks. Arrival
 * times are rounded to 250 µs against a reference time of 64 ms units.
 */
export function transportCcPacket(
  senderSsrc: number,
  mediaSsrc: number,
  feedbackCount: number,
  reports: readonly TransportCcReport[],
): Uint8Array {
  if (reports.length === 0 || reports.length > 0xffff) {
    throw new RangeError("a transport feedback reports 1 to 65535 packets");
  }
  const firstArrival = reports.find((r) => r.arrivalMs !== undefined)?.arrivalMs ?? 0;
  const reference = Math.floor(firstArrival / referenceUnitMs);
  const statuses: number[] = [];
  const deltas: number[] = [];
  let lastUnits = reference * referenceUnitMs / deltaUnitMs;
  for (const r of reports) {
    if (r.arrivalMs === undefined) {
      statuses.push(notReceived);
      continue;
    }
    const units = Math.round(r.arrivalMs / deltaUnitMs);
    const delta = units - lastUnits;
    if (delta < -0x8000 || delta > 0x7fff) throw new RangeError("receive delta out of range");
    lastUnits = units;
    statuses.push(delta >= 0 && delta <= 0xff ? smallDelta : largeDelta);
    deltas.push(delta);
  }
  const chunks: number[] = [];
  for (let i = 0; i < statuses.length;) {
    let run = 1;
    while (i + run < statuses.length && statuses[i + run] === statuses[i] && run < 0x1fff) run++;
    if (run >= 7) {
      chunks.push((statuses[i] << 13) | run);
      i += run;
      continue;
    }
    let chunk = 0xc000;
    for (let k = 0; k < 7; k++) chunk |= (statuses[i + k] ?? 0) << (2 * (6 - k));
    chunks.push(chunk);
    i += 7;
  }
  const deltaBytes = deltas.reduce((n, d) => n + (d >= 0 && d <= 0xff ? 1 : 2), 0);
  const bytes = Math.ceil((fixedBytes + 2 * chunks.length + deltaBytes) / 4) * 4;
  const out = new Uint8Array(bytes);
  const view = new DataView(out.buffer);
  out[0] = 0x80 | transportCcFmt;
  out[1] = rtpfbType;
  view.setUint16(2, bytes / 4 - 1);
  view.setUint32(4, senderSsrc >>> 0);
  view.setUint32(8, mediaSsrc >>> 0);
  view.setUint16(12, reports[0].sequence & 0xffff);
  view.setUint16(14, reports.length);
  view.setUint32(16, ((reference & 0xffffff) << 8 | (feedbackCount & 0xff)) >>> 0);
  let at = fixedBytes;
  for (const chunk of chunks) {
    view.setUint16(at, chunk);
    at += 2;
  }
  for (const d of deltas) {
    if (d >= 0 && d <= 0xff) out[at++] = d;
    else {
      view.setInt16(at, d);
      at += 2;
    }
  }
  return out;
}
