/**
 * A list of packets in one file, as the packet corpora keep them: each packet is a 16-bit
 * big-endian length and its bytes. Decoding stops at the first packet cut short, so any bytes
 * (a mutated file) decode to some list.
 */

/** Largest packet a list holds, in bytes (the 16-bit length). */
export const maxListedPacketBytes = 0xffff;

/** Encodes packets into a list. */
export function encodePacketList(packets: readonly Uint8Array[]): Uint8Array {
  const out = new Uint8Array(packets.reduce((n, p) => n + 2 + p.length, 0));
  let at = 0;
  for (const p of packets) {
    if (p.length > maxListedPacketBytes) throw new RangeError(`packet of ${p.length} bytes`);
    out[at] = p.length >> 8;
    out[at + 1] = p.length & 0xff;
    out.set(p, at + 2);
    at += 2 + p.length;
  }
  return out;
}

/** The packets of a list; a last packet cut short is left out. */
export function decodePacketList(data: Uint8Array): Uint8Array[] {
  const packets: Uint8Array[] = [];
  let at = 0;
  while (at + 2 <= data.length) {
    const length = (data[at] << 8) | data[at + 1];
    if (at + 2 + length > data.length) break;
    packets.push(data.subarray(at + 2, at + 2 + length));
    at += 2 + length;
  }
  return packets;
}
