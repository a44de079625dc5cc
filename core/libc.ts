/**
 * The few libc calls Deno has no API for (getrlimit, setrlimit, statvfs; opendir/readdir for
 * /proc/self/fd, which Deno lets a program read only with --allow-all; getsockname,
 * getpeername, shutdown and send for a socket Deno gives no handle on; malloc_trim; the HLS
 * port's sockets, epoll and sendfile), through Deno.dlopen.
 * Loaded once on first use; undefined when FFI is not permitted (no `--allow-ffi`) or the C
 * library cannot be opened (not glibc/Linux), so callers fall back or go without.
 */

const symbols = {
  getrlimit: { parameters: ["i32", "buffer"], result: "i32" },
  setrlimit: { parameters: ["i32", "buffer"], result: "i32" },
  statvfs: { parameters: ["buffer", "buffer"], result: "i32" },
  opendir: { parameters: ["buffer"], result: "pointer" },
  readdir: { parameters: ["pointer"], result: "pointer" },
  closedir: { parameters: ["pointer"], result: "i32" },
  getsockname: { parameters: ["i32", "buffer", "buffer"], result: "i32" },
  getpeername: { parameters: ["i32", "buffer", "buffer"], result: "i32" },
  shutdown: { parameters: ["i32", "i32"], result: "i32" },
  // SO_RCVBUF of a UDP socket (SRT), which Deno's node:dgram does not set.
  getsockopt: { parameters: ["i32", "i32", "i32", "buffer", "buffer"], result: "i32" },
  setsockopt: { parameters: ["i32", "i32", "i32", "buffer", "u32"], result: "i32" },
  // send(2) on the descriptor of a Deno TCP connection (RTMP players: one call per write
  // instead of an async op; media/protocols/rtmp/fd_send.ts). (fd, bytes, length, flags)
  send: { parameters: ["i32", "buffer", "usize", "i32"], result: "isize" },
  // The HLS port's own sockets (media/publishers/hls/hls_ffi_transport.ts): a listener,
  // epoll, recv, and segment bodies in unnamed files or memfds sent with sendfile(2).
  socket: { parameters: ["i32", "i32", "i32"], result: "i32" },
  bind: { parameters: ["i32", "buffer", "u32"], result: "i32" },
  listen: { parameters: ["i32", "i32"], result: "i32" },
  // (fd, struct sockaddr *, socklen_t *, flags)
  accept4: { parameters: ["i32", "buffer", "buffer", "i32"], result: "i32" },
  epoll_create1: { parameters: ["i32"], result: "i32" },
  epoll_ctl: { parameters: ["i32", "i32", "i32", "buffer"], result: "i32" },
  // Off the main thread: the caller awaits it.
  epoll_wait: { parameters: ["i32", "buffer", "i32", "i32"], result: "i32", nonblocking: true },
  recv: { parameters: ["i32", "buffer", "usize", "i32"], result: "isize" },
  // (out fd, in fd, off_t *offset, count)
  sendfile: { parameters: ["i32", "i32", "buffer", "usize"], result: "isize" },
  // (path, flags, mode): open(2) is variadic, its mode passed as a third integer.
  open: { parameters: ["buffer", "i32", "u32"], result: "i32" },
  write: { parameters: ["i32", "buffer", "usize"], result: "isize" },
  eventfd: { parameters: ["u32", "i32"], result: "i32" },
  close: { parameters: ["i32"], result: "i32" },
  // The calling thread's errno.
  __errno_location: { parameters: [], result: "pointer" },
  // glibc 2.27 and musl 1.1.20 on: null where missing (then no memfd).
  memfd_create: { parameters: ["buffer", "u32"], result: "i32", optional: true },
  // glibc only (musl has none): null where missing.
  malloc_trim: { parameters: ["usize"], result: "i32", optional: true },
} as const;

/** The loaded libc symbols. */
export type Libc = Deno.DynamicLibrary<typeof symbols>["symbols"];

/** Names the C library is found under on Linux (glibc, then musl). */
const libraryNames = ["libc.so.6", "libc.musl-x86_64.so.1", "libc.so"];

let loaded: { libc?: Libc; error?: string } | undefined;

/** The libc symbols, or the reason they cannot be had (`error`). */
export function libc(): { libc?: Libc; error?: string } {
  if (loaded) return loaded;
  let error = "no C library found";
  for (const name of libraryNames) {
    try {
      loaded = { libc: Deno.dlopen(name, symbols).symbols };
      return loaded;
    } catch (err) {
      error = (err as Error).message;
      // Without the permission no other name will do.
      if (err instanceof Deno.errors.NotCapable || err instanceof Deno.errors.PermissionDenied) {
        break;
      }
    }
  }
  loaded = { error };
  return loaded;
}

/** A NUL-terminated C string of `text`. */
export function cString(text: string): Uint8Array<ArrayBuffer> {
  return new TextEncoder().encode(`${text}\0`);
}
