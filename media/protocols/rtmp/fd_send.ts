/**
 * The `ffi` write path of RTMP connections: bytes go out with one synchronous libc send(2) on
 * the descriptor of the Deno TCP connection, instead of one async write op each (a promise,
 * an op resolved on a later turn, its callback). Players write the same shared chunk bytes
 * dozens of times a second each, so that per-write overhead was most of what a player cost
 * beyond the kernel's own work.
 *
 * Deno gives no descriptor for a connection, so it is found among the process's own by the
 * connection's four ends (getsockname and getpeername over /proc/self/fd), the connections
 * asked for in one turn in one pass. Deno keeps owning the socket: it reads it, and closes it
 * when the connection is closed, so a descriptor is used only while its connection is open
 * (RtmpConn checks). send(2) never waits (MSG_DONTWAIT): what the socket does not take is
 * written by Deno's own write, which waits for room and reports errors, so a slow peer costs
 * only its own connection.
 *
 * Linux only, and only with `--allow-ffi`; `fdSendSupport` says why not otherwise.
 */
import { type Libc, libc } from "../../../core/libc.ts";
import {
  addressKey,
  openDescriptors,
  socketAddress,
  socketLocalAddress,
} from "../../../core/socket_shutdown.ts";

/** Which write path RTMP connections take (`rtmp.transport`). */
export type RtmpTransport = "auto" | "ffi" | "deno";

/** send(2) flags: never block, no SIGPIPE on a peer gone. */
const msgDontWait = 0x40;
const msgNoSignal = 0x4000;
const sendFlags = msgDontWait | msgNoSignal;

/** Whether the ffi write path can run here; `reason` when it cannot. */
export function fdSendSupport(): { ok: true } | { ok: false; reason: string } {
  if (Deno.build.os !== "linux") return { ok: false, reason: "not Linux" };
  const { libc: c, error } = libc();
  if (!c) return { ok: false, reason: error ?? "no C library" };
  return { ok: true };
}

/**
 * Whether connections of `transport` write with send(2); throws when `ffi` is asked for and
 * cannot run, so a server configured for it does not start without it.
 */
export function resolveFdSend(transport: RtmpTransport): boolean {
  if (transport === "deno") return false;
  const support = fdSendSupport();
  if (support.ok) return true;
  if (transport === "ffi") {
    throw new Error(`rtmp.transport ffi is not available: ${support.reason}`);
  }
  return false;
}

/**
 * Bytes of `bytes` from `offset` the socket `fd` took at once: 0 when it took none (full,
 * or an error, which the caller's next write through Deno reports).
 */
export function sendNow(fd: number, bytes: Uint8Array, offset: number): number {
  const c = libc().libc as Libc;
  const rest = offset === 0 ? bytes : bytes.subarray(offset);
  const n = Number(c.send(fd, rest, BigInt(rest.length), sendFlags));
  return n > 0 ? n : 0;
}

/** A lookup: the connection's ends and who gets the descriptor. */
interface Lookup {
  readonly key: string;
  readonly found: (fd: number) => void;
}

let pending: Lookup[] = [];
let lookupTimer: ReturnType<typeof setTimeout> | undefined;

/**
 * Finds the descriptor of `tcp` at the end of this turn and gives it to `found`, which is
 * not called when it is not found (the connection closed meanwhile) or two descriptors have
 * the same ends. `found` must check that the connection is still open.
 */
export function findDescriptor(tcp: Deno.TcpConn, found: (fd: number) => void): void {
  let key: string;
  try {
    key = connKey(tcp.localAddr as Deno.NetAddr, tcp.remoteAddr as Deno.NetAddr);
  } catch {
    return; // Closed already: nothing to write to.
  }
  pending.push({ key, found });
  lookupTimer ??= setTimeout(lookUp, 0);
}

/** One pass over the open descriptors for every lookup queued. */
function lookUp(): void {
  lookupTimer = undefined;
  const lookups = pending;
  pending = [];
  const c = libc().libc;
  if (!c || lookups.length === 0) return;
  const wanted = new Map<string, Lookup>();
  for (const l of lookups) wanted.set(l.key, l);
  const fds = new Map<string, number>();
  const ambiguous = new Set<string>();
  for (const fd of openDescriptors(c)) {
    const key = descriptorKey(c, fd);
    if (key === undefined || !wanted.has(key)) continue;
    if (fds.has(key)) ambiguous.add(key);
    fds.set(key, fd);
  }
  for (const [key, fd] of fds) {
    if (!ambiguous.has(key)) wanted.get(key)!.found(fd);
  }
}

/** `local>peer` of a connected TCP socket `fd`; undefined for anything else. */
function descriptorKey(c: Libc, fd: number): string | undefined {
  const peer = socketAddress(c, fd);
  if (peer === undefined) return undefined;
  const local = socketLocalAddress(c, fd);
  return local === undefined ? undefined : `${local}>${peer}`;
}

function connKey(local: Deno.NetAddr, remote: Deno.NetAddr): string {
  return `${addressKey(local)}>${addressKey(remote)}`;
}
