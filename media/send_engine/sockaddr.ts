/**
 * `struct sockaddr_in` / `sockaddr_in6` bytes (Linux x86-64/aarch64 layout) for the FFI UDP
 * sender, from an address string and a port.
 */

/** Bytes of a sockaddr_in. */
export const sockaddrIn4Bytes = 16;
/** Bytes of a sockaddr_in6. */
export const sockaddrIn6Bytes = 28;
/** AF_INET and AF_INET6 on Linux. */
export const afInet = 2;
export const afInet6 = 10;

/** The 4 bytes of a dotted IPv4 address, or undefined. */
export function ipv4Bytes(text: string): Uint8Array | undefined {
  const parts = text.split(".");
  if (parts.length !== 4) return undefined;
  const out = new Uint8Array(4);
  for (let i = 0; i < 4; i++) {
    if (!/^\d{1,3}$/.test(parts[i]) || Number(parts[i]) > 255) return undefined;
    out[i] = Number(parts[i]);
  }
  return out;
}

/** The 16 bytes of an IPv6 address (with `::` and a dotted IPv4 tail), or undefined. */
export function ipv6Bytes(text: string): Uint8Array | undefined {
  const address = text.replace(/^\[|\]$/g, "").replace(/%.*$/, "");
  const halves = address.split("::");
  if (halves.length > 2) return undefined;
  const words = (part: string): number[] | undefined => {
    if (part === "") return [];
    const out: number[] = [];
    const groups = part.split(":");
    for (const [i, group] of groups.entries()) {
      if (i === groups.length - 1 && group.includes(".")) {
        const v4 = ipv4Bytes(group);
        if (!v4) return undefined;
        out.push((v4[0] << 8) | v4[1], (v4[2] << 8) | v4[3]);
      } else if (/^[0-9a-f]{1,4}$/i.test(group)) {
        out.push(parseInt(group, 16));
      } else {
        return undefined;
      }
    }
    return out;
  };
  const head = words(halves[0]);
  const tail = halves.length === 2 ? words(halves[1]) : [];
  if (!head || !tail) return undefined;
  const missing = 8 - head.length - tail.length;
  if (halves.length === 2 ? missing < 1 : missing !== 0) return undefined;
  const all = [...head, ...new Array(halves.length === 2 ? missing : 0).fill(0), ...tail];
  const out = new Uint8Array(16);
  all.forEach((word, i) => {
    out[i * 2] = word >> 8;
    out[i * 2 + 1] = word & 0xff;
  });
  return out;
}

/**
 * Writes the sockaddr of `host`:`port` for a socket of `family` into `out` and returns its
 * length; an IPv4 host on an IPv6 socket is written IPv4-mapped. Throws RangeError on a host
 * that is not an IP address of a usable family.
 */
export function writeSockaddr(out: Uint8Array, family: number, host: string, port: number): number {
  if (!Number.isInteger(port) || port < 0 || port > 65535) {
    throw new RangeError(`port ${port} is not a UDP port`);
  }
  const view = new DataView(out.buffer, out.byteOffset, out.byteLength);
  out.fill(0, 0, sockaddrIn6Bytes);
  const v4 = ipv4Bytes(host);
  if (family === afInet) {
    if (!v4) throw new RangeError(`${host} is not an IPv4 address (the socket is IPv4)`);
    view.setUint16(0, afInet, true);
    view.setUint16(2, port);
    out.set(v4, 4);
    return sockaddrIn4Bytes;
  }
  let v6 = v4 ? undefined : ipv6Bytes(host);
  if (v4) {
    v6 = new Uint8Array(16);
    v6[10] = 0xff;
    v6[11] = 0xff;
    v6.set(v4, 12);
  }
  if (!v6) throw new RangeError(`${host} is not an IP address`);
  view.setUint16(0, afInet6, true);
  view.setUint16(2, port);
  out.set(v6, 8);
  return sockaddrIn6Bytes;
}

/** A sockaddr read back: the address as text (IPv4-mapped IPv6 as dotted IPv4) and the port. */
export interface SockaddrText {
  address: string;
  port: number;
  family: "IPv4" | "IPv6";
}

/** Reads the sockaddr_in or sockaddr_in6 at the start of `bytes`; undefined for other families. */
export function readSockaddr(bytes: Uint8Array): SockaddrText | undefined {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const family = view.getUint16(0, true);
  const port = view.getUint16(2);
  if (family === afInet) {
    return { address: bytes.subarray(4, 8).join("."), port, family: "IPv4" };
  }
  if (family !== afInet6) return undefined;
  const ip = bytes.subarray(8, 24);
  if (ip.subarray(0, 10).every((b) => b === 0) && ip[10] === 0xff && ip[11] === 0xff) {
    return { address: ip.subarray(12, 16).join("."), port, family: "IPv4" };
  }
  return { address: ipv6Text(ip), port, family: "IPv6" };
}

/** RFC 5952 text of 16 address bytes: lower-case hex, the longest run of zero words as `::`. */
function ipv6Text(ip: Uint8Array): string {
  const words = Array.from({ length: 8 }, (_, i) => (ip[i * 2] << 8) | ip[i * 2 + 1]);
  let bestStart = -1;
  let bestLength = 1;
  for (let i = 0; i < 8;) {
    let end = i;
    while (end < 8 && words[end] === 0) end++;
    if (end - i > bestLength) [bestStart, bestLength] = [i, end - i];
    i = end > i ? end : i + 1;
  }
  const hex = (from: number, to: number) => words.slice(from, to).map((w) => w.toString(16));
  if (bestStart < 0) return hex(0, 8).join(":");
  return `${hex(0, bestStart).join(":")}::${hex(bestStart + bestLength, 8).join(":")}`;
}
