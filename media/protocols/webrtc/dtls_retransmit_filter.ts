/**
 * Drops stale retransmissions of DTLS handshake messages before werift's DTLS sees them.
 *
 * A browser retransmits a flight when the answer is slow, which on a loaded machine it often
 * is (werift's handshake crypto is JavaScript). werift (0.25) then handles the copies as new
 * messages: a second ClientKeyExchange derives the master secret again over a handshake
 * hash that by then includes later messages, and a late copy of the first ClientHello makes
 * a new server random and key pair. Both leave werift with keys the browser does not have:
 * the browser fails the handshake or every SRTP packet fails to decrypt, and the publish ends
 * "Failed by ICE timeout" (3 to 8 in 100 publishes from a loaded Chrome).
 *
 * Only epoch-0 handshake records are looked at (RFC 6347 §4.2.2 headers). A record whose
 * message and fragment came before is dropped when the peer has since sent a later message
 * (a retransmission of an earlier flight), or when it belongs to the client's key flight
 * (Certificate, ClientKeyExchange, CertificateVerify), whose retransmission the encrypted
 * Finished that travels with it still answers (werift resends its last flight on it). Other
 * retransmissions of the latest message (a ClientHello whose answer was lost) pass. One
 * filter serves one handshake: a DTLS renegotiation on the same transport (which browsers
 * never start) would restart message_seq and be dropped.
 */
import { Buffer } from "node:buffer";

/** DTLS content type of handshake records. */
const handshakeType = 22;
/** Bytes of a DTLS record header and of a handshake message header. */
const recordHeaderBytes = 13;
const handshakeHeaderBytes = 12;
/** Handshake messages of the client's key flight (RFC 5246 §7.4). */
const keyFlightTypes = new Set([11, 15, 16]);

/** The filter of one DTLS association. */
export class DtlsRetransmitFilter {
  /** messageSeq * 2^24 + fragmentOffset of every epoch-0 handshake record passed on. */
  readonly #seen = new Set<number>();
  #latestSeq = -1;
  /** Records dropped so far. */
  dropped = 0;

  /**
   * The datagram without stale retransmitted records: the same bytes when nothing is
   * dropped, a copy without them otherwise, undefined when no record is left.
   */
  filter(datagram: Uint8Array): Uint8Array | undefined {
    let keep: [number, number][] | undefined;
    let offset = 0;
    while (offset + recordHeaderBytes <= datagram.length) {
      const length = (datagram[offset + 11] << 8) | datagram[offset + 12];
      const end = Math.min(offset + recordHeaderBytes + length, datagram.length);
      if (this.#stale(datagram, offset, length)) {
        keep ??= offset > 0 ? [[0, offset]] : [];
        this.dropped++;
      } else if (keep) {
        keep.push([offset, end]);
      }
      offset = end;
    }
    if (!keep) return datagram;
    if (keep.length === 0) return undefined;
    return Buffer.concat(keep.map(([start, end]) => datagram.subarray(start, end)));
  }

  /** Whether the record at `offset` is a stale retransmission (recording it otherwise). */
  #stale(d: Uint8Array, offset: number, length: number): boolean {
    const epoch = (d[offset + 3] << 8) | d[offset + 4];
    if (d[offset] !== handshakeType || epoch !== 0 || length < handshakeHeaderBytes) return false;
    const h = offset + recordHeaderBytes;
    if (h + handshakeHeaderBytes > d.length) return false;
    const messageSeq = (d[h + 4] << 8) | d[h + 5];
    const fragmentOffset = (d[h + 6] << 16) | (d[h + 7] << 8) | d[h + 8];
    const key = messageSeq * 2 ** 24 + fragmentOffset;
    if (this.#seen.has(key)) {
      return messageSeq < this.#latestSeq || keyFlightTypes.has(d[h]);
    }
    this.#seen.add(key);
    this.#latestSeq = Math.max(this.#latestSeq, messageSeq);
    return false;
  }
}

/** The part of werift's ICE connection the filter hooks: its event of received datagrams. */
export interface DatagramEvent {
  execute: (data: Buffer) => void;
}

/**
 * Puts a filter in front of every receiver of `onData` (werift's Event calls its receivers
 * from `execute`); media and STUN pass untouched, with one comparison each.
 */
export function filterDtlsRetransmits(onData: DatagramEvent): DtlsRetransmitFilter {
  const filter = new DtlsRetransmitFilter();
  const execute = onData.execute;
  onData.execute = (data: Buffer) => {
    // RFC 7983: DTLS records start with a byte from 20 to 63.
    if (data[0] < 20 || data[0] > 63) return execute(data);
    const kept = filter.filter(data);
    if (kept) execute(kept as Buffer);
  };
  return filter;
}
