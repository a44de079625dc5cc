/**
 * Shuts down the socket of a connection Deno gives us no way to end: its descriptor is found
 * among the process's own by its local port and its peer's address (getsockname,
 * getpeername; the local address is left out, unknown behind a wildcard bind) and shut down
 * for reading and writing through libc. Whatever task still owns the socket then reads the
 * end of the stream, fails and drops it, which frees the descriptor; nothing is closed here,
 * so no descriptor is ever closed twice. Linux only, and only with `--allow-ffi`.
 *
 * Connections queued in one turn are looked for in one pass over /proc/self/fd, so a flood of
 * them costs one pass per turn rather than one per connection.
 */
import { cString, type Libc, libc } from "./libc.ts";

/** `shutdown(2)` of both directions. */
const shutRdWr = 2;
/** Address families of sockaddr. */
const afInet = 2;
const afInet6 = 10;
/** Room for a sockaddr_in6 and more. */
const sockaddrBytes = 128;
/** Offset of d_name in a Linux struct dirent64 (glibc and musl on 64-bit). */
const direntNameOffset = 19;

/** A TCP connection by its ends: the local port and the peer's address as Deno reports it. */
export interface SocketEnds {
  readonly localPort: number;
  readonly remote: Deno.NetAddr;
}

let queued: SocketEnds[] = [];
let flushTimer: ReturnType<typeof setTimeout> | undefined;

/**
 * Queues the socket with these ends to be shut down at the end of this turn. Returns false
 * when it cannot be (no FFI permission or C library), so the caller can say so.
 */
export function shutdownSocket(ends: SocketEnds): boolean {
  if (!libc().libc) return false;
  queued.push(ends);
  flushTimer ??= setTimeout(flush, 0);
  return true;
}

/** Shuts down every queued socket still open. */
function flush(): void {
  clearTimeout(flushTimer);
  flushTimer = undefined;
  const targets = queued;
  queued = [];
  const c = libc().libc;
  if (!c || targets.length === 0) return;
  const wanted = new Set(targets.map((t) => endsKey(t.localPort, t.remote)));
  for (const fd of openDescriptors(c)) {
    const remote = socketAddress(c, fd);
    if (remote === undefined) continue;
    const localPort = socketPort(c, fd);
    if (localPort === undefined) continue;
    const key = `${localPort}>${remote}`;
    if (!wanted.delete(key)) continue;
    c.shutdown(fd, shutRdWr);
    if (wanted.size === 0) break;
  }
}

/** The descriptors open in this process now. */
export function openDescriptors(c: Libc): number[] {
  const dir = c.opendir(cString("/proc/self/fd"));
  if (dir === null) return [];
  const fds: number[] = [];
  for (let entry = c.readdir(dir); entry !== null; entry = c.readdir(dir)) {
    const name = new Deno.UnsafePointerView(entry).getCString(direntNameOffset);
    if (name !== "." && name !== "..") fds.push(Number(name));
  }
  c.closedir(dir);
  return fds;
}

const addressBuffer = new Uint8Array(sockaddrBytes);
const lengthBuffer = new Uint32Array(1);
const lengthBytes = new Uint8Array(lengthBuffer.buffer);

/** The local port of socket `fd`; undefined for what is not an IP socket. */
export function socketPort(c: Libc, fd: number): number | undefined {
  lengthBuffer[0] = sockaddrBytes;
  if (c.getsockname(fd, addressBuffer, lengthBytes) !== 0) return undefined;
  const family = addressBuffer[0] | (addressBuffer[1] << 8);
  if (family !== afInet && family !== afInet6) return undefined;
  return (addressBuffer[2] << 8) | addressBuffer[3];
}

/** `host|port` of the peer of socket `fd`; undefined for what is not a connected IP socket. */
export function socketAddress(c: Libc, fd: number): string | undefined {
  lengthBuffer[0] = sockaddrBytes;
  if (c.getpeername(fd, addressBuffer, lengthBytes) !== 0) return undefined;
  return sockaddrText(addressBuffer);
}

/** `host|port` of the local end of socket `fd`; undefined for what is not an IP socket. */
export function socketLocalAddress(c: Libc, fd: number): string | undefined {
  lengthBuffer[0] = sockaddrBytes;
  if (c.getsockname(fd, addressBuffer, lengthBytes) !== 0) return undefined;
  return sockaddrText(addressBuffer);
}

/** `host|port` of a sockaddr_in or sockaddr_in6, IPv6 in the URL standard's spelling. */
function sockaddrText(b: Uint8Array): string | undefined {
  const family = b[0] | (b[1] << 8);
  const port = (b[2] << 8) | b[3];
  if (family === afInet) return `${b[4]}.${b[5]}.${b[6]}.${b[7]}|${port}`;
  if (family !== afInet6) return undefined;
  const groups: string[] = [];
  for (let i = 8; i < 24; i += 2) groups.push(((b[i] << 8) | b[i + 1]).toString(16));
  return `${canonicalIpv6(groups.join(":"))}|${port}`;
}

/** `host|port` of an address as Deno reports it, spelled as `socketAddress` gives it. */
export function addressKey(address: Deno.NetAddr): string {
  return `${hostKey(address.hostname)}|${address.port}`;
}

/** The key of a connection's ends, in the form `socketAddress` gives them. */
function endsKey(localPort: number, remote: Deno.NetAddr): string {
  return `${localPort}>${addressKey(remote)}`;
}

function hostKey(hostname: string): string {
  return hostname.includes(":") ? canonicalIpv6(hostname) : hostname;
}

/** One spelling of an IPv6 address (the URL standard's), whichever form it came in. */
function canonicalIpv6(address: string): string {
  return new URL(`http://[${address}]/`).hostname;
}
