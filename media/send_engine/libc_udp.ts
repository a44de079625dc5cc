/**
 * The libc socket calls of the FFI UDP sender (socket, bind, setsockopt, sendmmsg). Pointer
 * parameters are `u64` for V8's fast-call path (fastpath.md). Separate from core/libc.ts,
 * whose `buffer` signatures suit occasional calls, not a per-batch send loop.
 * Loaded once per thread; `error` says why it is unavailable (no --allow-ffi, not glibc).
 */

const symbols = {
  socket: { parameters: ["i32", "i32", "i32"], result: "i32" },
  bind: { parameters: ["i32", "u64", "i32"], result: "i32" },
  getsockname: { parameters: ["i32", "u64", "u64"], result: "i32" },
  setsockopt: { parameters: ["i32", "i32", "i32", "u64", "i32"], result: "i32" },
  getsockopt: { parameters: ["i32", "i32", "i32", "u64", "u64"], result: "i32" },
  // (fd, struct mmsghdr *, vlen, flags)
  sendmmsg: { parameters: ["i32", "u64", "i32", "i32"], result: "i32" },
  // (fd, buf, len, flags, struct sockaddr *, addrlen): one datagram (ICE mux, werift's sends)
  sendto: { parameters: ["i32", "buffer", "usize", "i32", "buffer", "u32"], result: "i32" },
  // (fd, struct mmsghdr *, vlen, flags, timeout): with MSG_DONTWAIT after `poll`
  recvmmsg: { parameters: ["i32", "u64", "u32", "i32", "u64"], result: "i32" },
  // (struct pollfd *, nfds, timeout ms) on a thread of its own: the ICE mux waits in it
  poll: { parameters: ["u64", "u64", "i32"], result: "i32", nonblocking: true },
  close: { parameters: ["i32"], result: "i32" },
  __errno_location: { parameters: [], result: "pointer" },
} as const;

/** The loaded symbols. */
export type LibcUdp = Deno.DynamicLibrary<typeof symbols>["symbols"];

let loaded: { libc?: LibcUdp; error?: string } | undefined;

/** The libc socket symbols, or why they cannot be had (`error`). */
export function libcUdp(): { libc?: LibcUdp; error?: string } {
  if (loaded) return loaded;
  try {
    loaded = { libc: Deno.dlopen("libc.so.6", symbols).symbols };
  } catch (err) {
    loaded = { error: `libc.so.6: ${(err as Error).message}` };
  }
  return loaded;
}

/** This thread's errno (read right after a failed call). */
export function errno(libc: LibcUdp): number {
  return new Deno.UnsafePointerView(libc.__errno_location()!).getInt32();
}

/** Linux constants the sender uses. */
export const linux = {
  SOCK_DGRAM: 2,
  SOCK_NONBLOCK: 0x800,
  SOCK_CLOEXEC: 0x80000,
  SOL_SOCKET: 1,
  SO_SNDBUF: 7,
  SO_RCVBUF: 8,
  MSG_TRUNC: 0x20,
  MSG_DONTWAIT: 0x40,
  POLLIN: 1,
  IPPROTO_IPV6: 41,
  IPV6_V6ONLY: 26,
  SOL_UDP: 17,
  UDP_SEGMENT: 103,
  EINTR: 4,
  EAGAIN: 11,
  EINVAL: 22,
  EIO: 5,
  EMSGSIZE: 90,
  EADDRINUSE: 98,
  ENOPROTOOPT: 92,
} as const;
