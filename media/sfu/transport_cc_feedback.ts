/**
 * werift's transport feedback (RTPFB FMT 15) as bytes: werift decodes it into objects of its
 * own for its send-side estimator (which the SFU does not use: it sends through its own
 * paths), and nothing of the wire format is kept. Once installed, werift's RTPFB reader hands
 * an FMT 15 packet on undecoded, its bytes kept on the packet (`transportCcBytes`) for
 * parseTransportCc; werift's router skips a feedback it has no object for.
 */
import { RtcpTransportLayerFeedback } from "werift";
import type { RtcpPacket } from "werift";
import { transportCcFmt } from "../rtp/transport_cc.ts";

type Reader = (data: Uint8Array, header: RtcpHeaderLike) => RtcpTransportLayerFeedback;

interface RtcpHeaderLike {
  count: number;
  type: number;
  length: number;
  padding: boolean;
  version: number;
}

/** Bytes of an RTCP header werift strips before the reader sees the rest. */
const rtcpHeaderBytes = 4;

let installed = false;

/** Makes werift keep transport feedback as bytes (once per process). */
export function installTransportCcBytes(): void {
  if (installed) return;
  installed = true;
  const reader = RtcpTransportLayerFeedback as unknown as { deSerialize: Reader };
  const original = reader.deSerialize;
  reader.deSerialize = (data, header) => {
    if (header.count !== transportCcFmt) return original(data, header);
    // The packet again, header first (werift took it off). werift passes the rest of the
    // compound (less the padding its last byte counts when the padding bit is set), all of
    // which is kept: werift's own feedback writes a length that leaves out part of its
    // receive deltas, and the parser reads only what the packet's statuses need, so the bytes of a
    // packet following it in the compound do no harm. Rounded up with zero bytes, without
    // the padding bit.
    const body = data;
    const words = Math.ceil(body.length / 4);
    const bytes = new Uint8Array(rtcpHeaderBytes + words * 4);
    bytes[0] = 0x80 | transportCcFmt;
    bytes[1] = header.type;
    bytes[2] = words >> 8;
    bytes[3] = words & 0xff;
    bytes.set(body, rtcpHeaderBytes);
    return Object.assign(new RtcpTransportLayerFeedback({ header: header as never }), {
      transportCcBytes: bytes,
    });
  };
}

/** The bytes of a transport feedback werift passed on (installTransportCcBytes), if it is one. */
export function transportCcBytes(rtcp: RtcpPacket): Uint8Array | undefined {
  return (rtcp as { transportCcBytes?: Uint8Array }).transportCcBytes;
}
