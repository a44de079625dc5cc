/**
 * Enlarges the kernel receive buffer (SO_RCVBUF) of a bound UDP socket, found among the
 * process's descriptors by its local port, through libc: Deno's node:dgram does not set it
 * (its recvBufferSize is the size of the buffer each read allocates). The default 208 KiB
 * holds about 90 datagrams of 1.3 KB; an encoder's keyframe burst overflowed it and lost 6%
 * of a 5 Mbit/s SRT stream on loopback (RcvbufErrors in /proc/net/snmp), where libsrt, which
 * asks for 12 MB, lost none. Linux only, and only with `--allow-ffi`.
 */
import { libc } from "../../../core/libc.ts";
import { openDescriptors, socketPort } from "../../../core/socket_shutdown.ts";

const solSocket = 1;
const soType = 3;
const soRcvbuf = 8;
const sockDgram = 2;

const option = new Int32Array(1);
const optionBytes = new Uint8Array(option.buffer);
const lengthBuffer = new Uint32Array(1);
const lengthBytes = new Uint8Array(lengthBuffer.buffer);

/**
 * Asks for `bytes` of receive buffer on the UDP sockets bound to `port` (the kernel caps it
 * at net.core.rmem_max and doubles it for bookkeeping). Returns the size granted, in bytes,
 * or undefined when it cannot be set (no FFI permission, no such socket).
 */
export function enlargeReceiveBuffer(port: number, bytes: number): number | undefined {
  const c = libc().libc;
  if (!c) return undefined;
  let granted: number | undefined;
  for (const fd of openDescriptors(c)) {
    if (socketPort(c, fd) !== port) continue;
    lengthBuffer[0] = 4;
    if (c.getsockopt(fd, solSocket, soType, optionBytes, lengthBytes) !== 0) continue;
    if (option[0] !== sockDgram) continue;
    option[0] = bytes;
    c.setsockopt(fd, solSocket, soRcvbuf, optionBytes, 4);
    lengthBuffer[0] = 4;
    if (c.getsockopt(fd, solSocket, soRcvbuf, optionBytes, lengthBytes) === 0) granted = option[0];
  }
  return granted;
}
