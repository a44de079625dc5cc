/**
 * The per-subscriber send path: the only place a forwarded packet is protected and sent.
 * Everything above it (fan-out, NACK, sender reports) speaks this small interface, so a
 * faster engine (libcrypto over FFI plus sendmmsg, see fastpath.md) can replace werift's.
 */
import { Buffer } from "node:buffer";
import { RtcpSenderInfo, RtcpSrPacket, type RTCRtpSender, RtpHeader, type RtpPacket } from "werift";
import { writeAbsSendTime } from "../../rtp/abs_send_time.ts";
import type { TransportCcLog } from "../../send_engine/transport_cc_log.ts";

/** Bytes SRTP adds to a packet (the authentication tag of the AES-CM/HMAC-SHA1-80 profile). */
const srtpTagBytes = 10;

/**
 * Packets one subscriber track may have in flight in the socket layer; beyond it new packets
 * are dropped, so a subscriber that cannot keep up costs itself packets, not server memory.
 */
export const maxInflightPackets = 512;

/** Sends one subscriber track's packets. Sequence numbers and timestamps pass unchanged. */
export interface RtpSendPath {
  /** SSRC of the subscriber track (what its RTCP refers to). */
  readonly ssrc: number;
  /** Packets sent, retransmissions included. */
  readonly packets: number;
  /** Payload bytes sent. */
  readonly octets: number;
  /**
   * Packets dropped: `maxInflightPackets` were still in flight (werift), or the socket buffer
   * was full (send engine).
   */
  readonly dropped: number;
  /** Protects and sends a publisher packet under this track's SSRC and payload type. */
  send(packet: RtpPacket): void;
  /** Sends a sender report mapping `ntpTimestamp` to `rtpTimestamp` (from the publisher's SR). */
  sendSenderReport(ntpTimestamp: bigint, rtpTimestamp: number): void;
}

/** werift's SRTP and socket, driven directly: one reused header, no per-packet clone. */
export class WeriftSendPath implements RtpSendPath {
  readonly ssrc: number;
  packets = 0;
  octets = 0;
  dropped = 0;
  #inflight = 0;
  readonly #settled = () => {
    this.#inflight--;
  };
  readonly #sender: RTCRtpSender;
  readonly #header: RtpHeader;
  /** The abs-send-time payload, rewritten in place for each packet; absent when not negotiated. */
  readonly #absSendTime?: Buffer;
  /** The transport-cc number's payload, rewritten for each packet, and its transport's log. */
  readonly #transportCc?: { payload: Buffer; log: TransportCcLog };

  /**
   * `absSendTimeId`: the negotiated id of the abs-send-time extension, written into every
   * packet sent (the receiver's bandwidth estimator reads it); undefined sends none.
   * `transportCc`: the transport-cc extension id and the transport's log: each packet gets the
   * transport's next number, recorded there (as the send engine's Workers do).
   */
  constructor(
    sender: RTCRtpSender,
    payloadType: number,
    absSendTimeId?: number,
    transportCc?: { id: number; log: TransportCcLog },
  ) {
    this.#sender = sender;
    this.ssrc = sender.ssrc;
    this.#header = new RtpHeader({ ssrc: sender.ssrc, payloadType });
    if (transportCc) {
      this.#transportCc = { payload: Buffer.alloc(2), log: transportCc.log };
      this.#header.extensions.push({ id: transportCc.id, payload: this.#transportCc.payload });
    }
    if (absSendTimeId !== undefined) {
      this.#absSendTime = Buffer.alloc(3);
      this.#header.extensions.push({ id: absSendTimeId, payload: this.#absSendTime });
    }
  }

  send(packet: RtpPacket): void {
    if (this.#inflight >= maxInflightPackets) {
      this.dropped++;
      return;
    }
    const header = this.#header;
    header.marker = packet.header.marker;
    header.sequenceNumber = packet.header.sequenceNumber;
    header.timestamp = packet.header.timestamp;
    const transportCc = this.#transportCc;
    const nowMs = this.#absSendTime || transportCc ? performance.timeOrigin + performance.now() : 0;
    if (this.#absSendTime) writeAbsSendTime(this.#absSendTime, nowMs);
    if (transportCc) {
      const sequence = transportCc.log.next();
      transportCc.payload[0] = sequence >>> 8;
      transportCc.payload[1] = sequence & 0xff;
      const bytes = header.serializeSize + packet.payload.length + srtpTagBytes;
      transportCc.log.record(sequence, bytes, nowMs);
    }
    this.packets++;
    this.octets += packet.payload.length;
    // SRTP protection runs synchronously inside sendRtp, so the header may be reused at once.
    this.#inflight++;
    this.#sender.dtlsTransport.sendRtp(packet.payload, header).then(this.#settled, this.#settled);
  }

  sendSenderReport(ntpTimestamp: bigint, rtpTimestamp: number): void {
    sendSenderReport(this.#sender, this, ntpTimestamp, rtpTimestamp);
  }
}

/**
 * Sends `path`'s sender report through werift's SRTCP (both paths keep RTCP with werift):
 * `ntpTimestamp` maps to `rtpTimestamp`, with the path's packet and octet counts.
 */
export function sendSenderReport(
  sender: RTCRtpSender,
  path: RtpSendPath,
  ntpTimestamp: bigint,
  rtpTimestamp: number,
): void {
  const senderInfo = new RtcpSenderInfo({
    ntpTimestamp,
    rtpTimestamp,
    packetCount: path.packets,
    octetCount: path.octets,
  });
  const report = new RtcpSrPacket({ ssrc: path.ssrc, senderInfo });
  // Before DTLS completes there is no SRTCP context; the next report will go through.
  sender.dtlsTransport.sendRtcp([report]).catch(() => {});
}
