/**
 * A faster `RtpHeader.deSerialize` for werift: werift reads the header's bit fields by
 * formatting each byte as a string of binary digits and parsing slices of it back (six times a
 * packet), which a CPU profile of receiving put at about a seventh of a received packet's cost
 * on the main thread once SRTP was decrypted over FFI. This one reads them with bit
 * operations and fills the same fields (RFC 3550 §5.1; RFC 8285 one- and two-byte header
 * extensions, any other profile kept as one extension of id 0), so werift's RtpPacket and
 * everything that reads its header see the same values. A header cut short throws a
 * RangeError, which werift's receive loop drops as a malformed packet.
 */
import type { Buffer } from "node:buffer";
import { RtpHeader } from "werift";

/** RFC 8285 profiles of the header extension block. */
const oneByteProfile = 0xbede;
const twoByteProfile = 0x1000;

/** One header extension as werift keeps it. */
interface HeaderExtension {
  id: number;
  payload: Buffer;
}

/** Parses the RTP header at the start of `raw` into a werift RtpHeader. */
export function parseRtpHeader(raw: Buffer): RtpHeader {
  const length = raw.length;
  if (length < 12) throw new RangeError(`an RTP header needs 12 bytes, got ${length}`);
  const h = new RtpHeader();
  const b0 = raw[0];
  const b1 = raw[1];
  h.version = b0 >> 6;
  h.padding = (b0 & 0x20) !== 0;
  h.extension = (b0 & 0x10) !== 0;
  const csrcCount = b0 & 0x0f;
  h.csrcLength = csrcCount;
  h.marker = (b1 & 0x80) !== 0;
  h.payloadType = b1 & 0x7f;
  h.sequenceNumber = (raw[2] << 8) | raw[3];
  h.timestamp = readUint32(raw, 4);
  h.ssrc = readUint32(raw, 8);
  let at = 12 + csrcCount * 4;
  if (at > length) throw new RangeError("RTP header cut in its CSRC list");
  const csrc: number[] = new Array(csrcCount);
  for (let i = 0; i < csrcCount; i++) csrc[i] = readUint32(raw, 12 + i * 4);
  h.csrc = csrc;
  if (h.extension) {
    if (at + 4 > length) throw new RangeError("RTP header cut in its extension header");
    const profile = (raw[at] << 8) | raw[at + 1];
    const extensionBytes = ((raw[at + 2] << 8) | raw[at + 3]) * 4;
    at += 4;
    const end = at + extensionBytes;
    if (end > length) throw new RangeError("RTP header extension longer than the packet");
    h.extensionProfile = profile as RtpHeader["extensionProfile"];
    h.extensionLength = extensionBytes;
    const extensions: HeaderExtension[] = [];
    if (profile === oneByteProfile) {
      while (at < end) {
        const byte = raw[at++];
        if (byte === 0) continue; // padding between elements
        const id = byte >> 4;
        if (id === 15) break; // RFC 8285 §4.2: stop reading the block
        const bytes = (byte & 0x0f) + 1;
        extensions.push({ id, payload: raw.subarray(at, at + bytes) });
        at += bytes;
      }
    } else if (profile === twoByteProfile) {
      while (at < end) {
        const id = raw[at++];
        if (id === 0) continue;
        const bytes = raw[at++];
        extensions.push({ id, payload: raw.subarray(at, at + bytes) });
        at += bytes;
      }
    } else {
      extensions.push({ id: 0, payload: raw.subarray(at, end) });
    }
    h.extensions = extensions;
    at = end;
  }
  h.payloadOffset = at;
  if (h.padding) h.paddingSize = raw[length - 1];
  return h;
}

function readUint32(raw: Uint8Array, at: number): number {
  return ((raw[at] << 24) | (raw[at + 1] << 16) | (raw[at + 2] << 8) | raw[at + 3]) >>> 0;
}

let installed = false;

/** Makes werift's `RtpHeader.deSerialize` this parser, once per process. */
export function installRtpHeaderParse(): void {
  if (installed) return;
  installed = true;
  (RtpHeader as unknown as { deSerialize: (raw: Buffer) => RtpHeader }).deSerialize =
    parseRtpHeader;
}
