/**
 * The `ffi` transport of the HLS listener: libc sockets (socket, accept4, recv, send,
 * sendfile) driven by one epoll set, its wait run off the main thread (a `nonblocking` FFI
 * call resolving a promise) and every ready connection handled at once on the main thread
 * when it resolves. HTTP is hls_http1.ts's, as on the `deno` transport.
 *
 * Why: a segment's body copied from the JS heap into the socket per viewer was most of a
 * segment request's cost; here each body of 16 KiB or more (segments, parts) is written once
 * into a memfd (`hls.segmentStore` memory) or an unnamed file in the temp folder (`tmpfile`)
 * and sent with sendfile(2), which hands the pages to TCP without that copy (what nginx does
 * from disk). Heads and small bodies (playlists) go with send(2).
 *
 * Bounds: a connection reads at most one request head (16 KiB) ahead and has at most one
 * answer being sent (its bytes shared, not copied); the next pipelined request is taken once
 * it is out. A connection waiting for a request, or whose client takes no byte of an answer,
 * for `idleTimeoutMs` is closed. Body files are closed when the segmenter releases their body
 * (hls_body_release.ts: the segment left the window) once no connection sends them, and
 * those unused for `fileIdleMs` (an output gone as a whole) by a sweep.
 */
import {
  acceptRetryFirstMs,
  acceptRetryMaxMs,
  type HlsHttpReply,
  Http1Responder,
  idleSweepMs,
  idleTimeoutMs,
  type ParsedHead,
  Refusal,
  RequestReader,
  shutdownGraceMs,
} from "./hls_http1.ts";
import type { HlsListenerOptions, HlsTransport } from "./hls_listener.ts";
import { onBodyReleased } from "./hls_body_release.ts";
import { type Libc, libc as loadLibc } from "../../../core/libc.ts";

const AF_INET = 2;
const AF_INET6 = 10;
const SOCK_STREAM = 1;
const SOCK_NONBLOCK = 0x800;
const SOCK_CLOEXEC = 0x80000;
const SOL_SOCKET = 1;
const SO_REUSEADDR = 2;
const IPPROTO_TCP = 6;
const TCP_NODELAY = 1;
const EPOLL_CTL_ADD = 1;
const EPOLL_CTL_DEL = 2;
const EPOLLIN = 0x1;
const EPOLLOUT = 0x4;
const EPOLLRDHUP = 0x2000;
const EPOLLET = 0x80000000;
const MSG_NOSIGNAL = 0x4000;
const MSG_MORE = 0x8000;
const MFD_CLOEXEC = 1;
/** open(2) flags: an unnamed file in the folder given (__O_TMPFILE | O_DIRECTORY). */
const O_TMPFILE = 0o20200000;
const O_RDWR = 2;
const O_CLOEXEC = 0o2000000;
const SHUT_WR = 1;
const EINTR = 4;
/** accept4 failures that a pause may cure: EMFILE, ENFILE, ENOBUFS, ENOMEM. */
const acceptPauseErrnos = new Set([24, 23, 105, 12]);
const EAGAIN = 11;

/** struct epoll_event: packed (12 bytes) on x86-64, 8-aligned (16) elsewhere. */
const eventBytes = Deno.build.arch === "x86_64" ? 12 : 16;
const eventDataOffset = Deno.build.arch === "x86_64" ? 4 : 8;
/** Events taken per wait. */
const maxEvents = 512;
/** Pending connections the kernel queues (capped by net.core.somaxconn). */
const listenBacklog = 4096;
/** Bodies at least this long are sent from a file; shorter ones are copied, in bytes. */
const minFileBodyBytes = 16 * 1024;
/** Most bytes held in body files at once; beyond, bodies are sent from memory (copied), in bytes. */
const maxFileBytes = 512 * 1024 * 1024;
/**
 * A connection closed after an answer (a refusal, `Connection: close`) is first half-closed
 * and its client's bytes read and dropped for at most this long, so the answer is not lost to
 * a reset from closing with bytes unread, in ms.
 */
const lingerMs = 2_000;
/** Most bytes read and dropped while lingering. */
const maxLingerBytes = 1024 * 1024;
/** A body file no connection used for this long is closed (its output may be gone), in ms. */
const fileIdleMs = 60_000;
/** The data word of the shutdown eventfd in the epoll set (no descriptor has it). */
const wakeToken = 0xffffffff;

let loaded: { libc?: Libc; errno?: Deno.UnsafePointerView; error?: string } | undefined;

function load(): { libc?: Libc; errno?: Deno.UnsafePointerView; error?: string } {
  if (loaded) return loaded;
  if (Deno.build.os !== "linux") return loaded = { error: "not Linux" };
  const { libc, error } = loadLibc();
  if (!libc) return loaded = { error };
  // errno of the main thread, where every call but epoll_wait is made.
  return loaded = { libc, errno: new Deno.UnsafePointerView(libc.__errno_location()!) };
}

/** Whether the ffi transport can serve `hostname` (an IP literal); else why not. */
export function ffiTransportAvailable(hostname: string): { ok: boolean; reason?: string } {
  const { error } = load();
  if (error) return { ok: false, reason: error };
  if (!socketAddress(hostname, 0)) return { ok: false, reason: `${hostname} is not an IP address` };
  return { ok: true };
}

/** A body's copy in an unnamed file or a memfd. */
interface BodyFile {
  fd: number;
  bytes: number;
  /** Answers sending from it now. */
  users: number;
  /** The segmenter let the body go: closed when no answer sends it. */
  released: boolean;
  lastUsedMs: number;
}

/**
 * Where bodies sent with sendfile are kept (`hls.segmentStore`): `memory` memfds (no disk
 * write ever), `tmpfile` unnamed files in the temp folder (less kernel time per segment sent
 * from a disk filesystem's large folios, but a body kept past the kernel's dirty expiry may
 * be written back to disk).
 */
export type HlsSegmentStore = "memory" | "tmpfile";

/** The memfds (or files) of bodies, shared by the ffi listeners of the process of one store. */
class BodyFiles {
  #libc: Libc;
  #errno: Deno.UnsafePointerView;
  #files = new Map<Uint8Array, BodyFile>();
  #bytes = 0;
  #owners = 0;
  #unlisten: (() => void) | undefined;
  #sweep: ReturnType<typeof setInterval> | undefined;
  #name = new TextEncoder().encode("hls-body\0");
  /** The folder bodies' unnamed files are made in (NUL-terminated); undefined: memfds. */
  #tmpDir: Uint8Array | undefined;

  constructor(libc: Libc, errno: Deno.UnsafePointerView, store: HlsSegmentStore) {
    this.#libc = libc;
    this.#errno = errno;
    this.#tmpDir = store === "tmpfile" ? bodyFolder() : undefined;
  }

  /** Open descriptors (for tests). */
  get count(): number {
    return this.#files.size;
  }

  /** A listener uses the files from now on. */
  acquire(): void {
    if (this.#owners++ > 0) return;
    this.#unlisten = onBodyReleased((body) => this.#release(body));
    this.#sweep = setInterval(() => this.#closeUnused(fileIdleMs), idleSweepMs);
  }

  /** A listener stopped (its connections are closed): with none left, every file closes. */
  dispose(): void {
    if (--this.#owners > 0) return;
    this.#unlisten?.();
    clearInterval(this.#sweep);
    this.#closeUnused(0);
  }

  /** The file of `body` in use by one more answer; undefined: send it from memory. */
  use(body: Uint8Array): BodyFile | undefined {
    if (body.length < minFileBodyBytes) return undefined;
    let file = this.#files.get(body);
    if (!file) {
      if (this.#bytes + body.length > maxFileBytes) return undefined;
      let fd = this.#open();
      if (fd >= 0 && !this.#fill(fd, body) && this.#tmpDir) {
        // The temp folder's disk is full (ENOSPC) or failing: memfds from now on.
        this.#tmpDir = undefined;
        fd = this.#open();
        if (fd >= 0 && !this.#fill(fd, body)) fd = -1;
      }
      if (fd < 0) return undefined;
      file = { fd, bytes: body.length, users: 0, released: false, lastUsedMs: 0 };
      this.#files.set(body, file);
      this.#bytes += body.length;
    }
    file.users++;
    file.lastUsedMs = performance.now();
    return file;
  }

  /** An answer is done with `file`. */
  done(file: BodyFile): void {
    if (--file.users === 0 && file.released) this.#libc.close(file.fd);
  }

  /** Writes `body` into `fd`; on failure closes `fd` and says false. */
  #fill(fd: number, body: Uint8Array): boolean {
    let at = 0;
    while (at < body.length) {
      const n = Number(this.#libc.write(fd, body.subarray(at), BigInt(body.length - at)));
      if (n <= 0) {
        this.#libc.close(fd);
        return false;
      }
      at += n;
    }
    return true;
  }

  /**
   * A new descriptor for a body: with `tmpfile`, an unnamed file (O_TMPFILE) in the temp folder,
   * else (or where that cannot be had) a memfd.
   * Why: sendfile from a memfd takes shmem's 4 KiB pages one at a time, while a file on a disk
   * filesystem with large folios (ext4 here) hands TCP bigger pieces: ~10 µs less kernel time
   * per 300 KB segment (42 vs 52 µs on this machine, nginx's path). The file has no name, its
   * pages stay in the page cache and are dropped when it closes; only a body kept past the
   * kernel's dirty expiry (vm.dirty_expire_centisecs, 30 s by default) is written back to disk.
   */
  #open(): number {
    if (this.#tmpDir) {
      const fd = this.#libc.open(this.#tmpDir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0o600);
      if (fd >= 0) return fd;
      // No O_TMPFILE there (an old kernel, a filesystem without it) or no such folder: memfds
      // from now on; out of descriptors (EMFILE, ENFILE): the memfd fails too, try again later.
      const errno = this.#errno.getInt32();
      if (errno !== 24 && errno !== 23) this.#tmpDir = undefined;
    }
    return this.#libc.memfd_create?.(this.#name, MFD_CLOEXEC) ?? -1;
  }

  #release(body: Uint8Array): void {
    const file = this.#files.get(body);
    if (!file) return;
    this.#files.delete(body);
    this.#bytes -= file.bytes;
    file.released = true;
    if (file.users === 0) this.#libc.close(file.fd);
  }

  #closeUnused(olderThanMs: number): void {
    const now = performance.now();
    for (const [body, file] of this.#files) {
      if (file.users === 0 && now - file.lastUsedMs >= olderThanMs) this.#release(body);
    }
  }
}

/** The folder of bodies' unnamed files, $TMPDIR or /tmp, as a C string. */
function bodyFolder(): Uint8Array {
  let dir = "/tmp";
  try {
    dir = Deno.env.get("TMPDIR") || dir;
  } catch {
    // No env permission: the default folder.
  }
  return new TextEncoder().encode(`${dir}\0`);
}

/** The body files of each store, made by the first listener of that store. */
const bodyFilesByStore = new Map<HlsSegmentStore, BodyFiles>();
/** Where lingering connections' bytes are read to be dropped. */
const lingerScratch = new Uint8Array(16 * 1024);

/** Memfds and files open for bodies, over every ffi listener (for tests). */
export function bodyFileCount(): number {
  let count = 0;
  for (const files of bodyFilesByStore.values()) count += files.count;
  return count;
}

/** One client connection. */
interface Conn {
  fd: number;
  remote: Deno.NetAddr;
  reader: RequestReader;
  /** An edge said bytes are there and recv has not yet said EAGAIN. */
  readable: boolean;
  /** A request is with the handler. */
  handling: boolean;
  /** The answer being sent: `out` from `outAt`, then `file` from `fileAt` to its end. */
  out: Uint8Array | undefined;
  outAt: number;
  file: BodyFile | undefined;
  fileAt: number;
  /** Close once the answer is out. */
  closeAfter: boolean;
  /** Half-closed after its last answer: what the client sends is dropped until it closes. */
  lingering: boolean;
  lingerBytes: number;
  /** Since when it waits for a request, or for the client to take bytes, in ms. */
  sinceMs: number;
  closed: boolean;
}

/** The HLS listener's transport on libc sockets (see the module's comment). */
export class FfiTransport implements HlsTransport {
  readonly #libc: Libc;
  readonly #errno: Deno.UnsafePointerView;
  readonly #options: HlsListenerOptions;
  readonly #responder: Http1Responder;
  readonly #files: BodyFiles;
  readonly #idleMs: number;
  readonly #listenFd: number;
  readonly #epollFd: number;
  readonly #wakeFd: number;
  readonly #port: number;
  readonly #conns = new Map<number, Conn>();
  readonly #events = new Uint8Array(eventBytes * maxEvents);
  readonly #eventView = new DataView(this.#events.buffer);
  /** epoll_ctl's event (reused). */
  readonly #ctl = new Uint8Array(eventBytes);
  readonly #ctlView = new DataView(this.#ctl.buffer);
  readonly #offset = new BigInt64Array(1);
  readonly #offsetBytes = new Uint8Array(this.#offset.buffer);
  readonly #peer = new Uint8Array(28);
  readonly #peerLength = new Uint32Array(1);
  readonly #peerLengthBytes = new Uint8Array(this.#peerLength.buffer);
  readonly #one = new Uint8Array(new Int32Array([1]).buffer);
  readonly #sweep: ReturnType<typeof setInterval>;
  readonly #loop: Promise<void>;
  #listening = true;
  #acceptRetryMs = acceptRetryFirstMs;
  #acceptTimer: ReturnType<typeof setTimeout> | undefined;
  #stopping = false;
  #stopped: Promise<void> | undefined;
  #restarts = 0;
  /** Resolves when no connection is left (shutdown waits on it). */
  #drained: (() => void) | undefined;

  /** Listens; throws when the address cannot be listened on. */
  constructor(options: HlsListenerOptions) {
    const { libc, errno } = load();
    if (!libc || !errno) throw new Error("libc is not available");
    this.#libc = libc;
    this.#errno = errno;
    this.#options = options;
    this.#idleMs = options.idleTimeoutMs ?? idleTimeoutMs;
    this.#responder = new Http1Responder(options.handler, options.log);
    const address = socketAddress(options.hostname, options.port);
    if (!address) throw new Error(`${options.hostname} is not an IP address`);
    const fds: number[] = [];
    try {
      const listenFd = this.#check(
        libc.socket(
          address[0] === AF_INET ? AF_INET : AF_INET6,
          SOCK_STREAM | SOCK_NONBLOCK |
            SOCK_CLOEXEC,
          0,
        ),
        "socket",
      );
      fds.push(listenFd);
      // As Deno.listen does: a port of a server just stopped can be listened on again.
      libc.setsockopt(listenFd, SOL_SOCKET, SO_REUSEADDR, this.#one, 4);
      this.#check(
        libc.bind(listenFd, address, address.length),
        `listen on ${options.hostname}:${options.port}`,
      );
      this.#check(libc.listen(listenFd, listenBacklog), "listen");
      const bound = new Uint8Array(28);
      const boundLength = new Uint32Array([bound.length]);
      this.#check(
        libc.getsockname(listenFd, bound, new Uint8Array(boundLength.buffer)),
        "getsockname",
      );
      this.#port = (bound[2] << 8) | bound[3];
      const epollFd = this.#check(libc.epoll_create1(SOCK_CLOEXEC), "epoll_create1");
      fds.push(epollFd);
      const wakeFd = this.#check(libc.eventfd(0, SOCK_NONBLOCK | SOCK_CLOEXEC), "eventfd");
      fds.push(wakeFd);
      this.#listenFd = listenFd;
      this.#epollFd = epollFd;
      this.#wakeFd = wakeFd;
      this.#check(this.#control(EPOLL_CTL_ADD, wakeFd, EPOLLIN, wakeToken), "epoll_ctl");
      // Level-triggered: connections left in the queue (no descriptor) are seen again.
      this.#check(this.#control(EPOLL_CTL_ADD, listenFd, EPOLLIN, listenFd), "epoll_ctl");
    } catch (err) {
      for (const fd of fds) libc.close(fd);
      throw err;
    }
    const store = options.segmentStore ?? "memory";
    let files = bodyFilesByStore.get(store);
    if (!files) bodyFilesByStore.set(store, files = new BodyFiles(libc, errno, store));
    this.#files = files;
    this.#files.acquire();
    this.#sweep = setInterval(() => this.#closeIdle(), Math.min(idleSweepMs, this.#idleMs));
    this.#loop = this.#run();
  }

  get port(): number {
    return this.#port;
  }

  get restarts(): number {
    return this.#restarts;
  }

  /**
   * Stops listening; requests being handled are answered (within `shutdownGraceMs`), then
   * every connection and descriptor closes.
   */
  shutdown(): Promise<void> {
    return this.#stopped ??= this.#shutdown();
  }

  async #shutdown(): Promise<void> {
    this.#stopping = true;
    this.#listening = false;
    clearInterval(this.#sweep);
    clearTimeout(this.#acceptTimer);
    this.#libc.close(this.#listenFd);
    // Connections waiting for a request close now; the others once their answer is out.
    for (const c of this.#conns.values()) {
      if (c.lingering || (!c.handling && !c.out && !c.file && c.reader.buffered === 0)) {
        this.#close(c);
      }
    }
    if (this.#conns.size > 0) {
      let timer: ReturnType<typeof setTimeout> | undefined;
      await new Promise<void>((resolve) => {
        this.#drained = resolve;
        timer = setTimeout(resolve, shutdownGraceMs);
      });
      clearTimeout(timer);
      for (const c of [...this.#conns.values()]) this.#close(c);
    }
    // Wakes the wait so the loop ends; the epoll set is closed only once nothing waits in it.
    const one = new BigUint64Array([1n]);
    this.#libc.write(this.#wakeFd, new Uint8Array(one.buffer), 8n);
    await this.#loop;
    this.#libc.close(this.#epollFd);
    this.#libc.close(this.#wakeFd);
    this.#files.dispose();
  }

  async #run(): Promise<void> {
    const libc = this.#libc;
    const view = this.#eventView;
    for (;;) {
      const n = await libc.epoll_wait(this.#epollFd, this.#events, maxEvents, -1);
      // Interrupted by a signal (its errno is the waiting thread's, unread here): wait again.
      if (n < 0) continue;
      for (let i = 0; i < n; i++) {
        const fd = view.getUint32(i * eventBytes + eventDataOffset, true);
        if (fd === wakeToken) return;
        if (fd === this.#listenFd && this.#listening) {
          this.#accept();
          continue;
        }
        const c = this.#conns.get(fd);
        if (!c) continue;
        // Any event (in, out, hang-up, error) is taken as a chance to go on: recv and send
        // say what it was.
        c.readable = true;
        this.#pump(c);
      }
    }
  }

  #accept(): void {
    const libc = this.#libc;
    for (;;) {
      this.#peerLength[0] = this.#peer.length;
      const fd = libc.accept4(
        this.#listenFd,
        this.#peer,
        this.#peerLengthBytes,
        SOCK_NONBLOCK | SOCK_CLOEXEC,
      );
      if (fd < 0) {
        const errno = this.#errno.getInt32();
        if (errno === EAGAIN || this.#stopping) return;
        // A client gone before it was taken, a signal: take the next one.
        if (!acceptPauseErrnos.has(errno)) continue;
        // Out of descriptors: connections being served go on; accept again after a pause
        // (the listener leaves the set meanwhile, or its level would wake the loop at once).
        this.#restarts++;
        const inMs = this.#acceptRetryMs;
        this.#options.log.error("hls accept failed, accepting again", { inMs, errno });
        this.#control(EPOLL_CTL_DEL, this.#listenFd, 0, 0);
        this.#listening = false;
        this.#acceptTimer = setTimeout(() => {
          if (this.#stopping) return;
          this.#listening = true;
          this.#control(EPOLL_CTL_ADD, this.#listenFd, EPOLLIN, this.#listenFd);
        }, inMs);
        this.#acceptRetryMs = Math.min(inMs * 2, acceptRetryMaxMs);
        return;
      }
      this.#acceptRetryMs = acceptRetryFirstMs;
      libc.setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, this.#one, 4);
      const c: Conn = {
        fd,
        remote: peerAddress(this.#peer),
        reader: new RequestReader(),
        readable: true,
        handling: false,
        out: undefined,
        outAt: 0,
        file: undefined,
        fileAt: 0,
        closeAfter: false,
        lingering: false,
        lingerBytes: 0,
        sinceMs: performance.now(),
        closed: false,
      };
      // Edge-triggered, once for the connection's life: no epoll_ctl per request.
      if (this.#control(EPOLL_CTL_ADD, fd, EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, fd) < 0) {
        libc.close(fd);
        continue;
      }
      this.#conns.set(fd, c);
    }
  }

  /** Sends what is pending, then takes and hands over requests, as far as it can go now. */
  #pump(c: Conn): void {
    while (!c.closed) {
      if (c.lingering) return this.#drain(c);
      if (c.out || c.file) {
        if (!this.#flush(c)) return;
        if (c.closeAfter) {
          c.lingering = true;
          c.sinceMs = performance.now();
          this.#libc.shutdown(c.fd, SHUT_WR);
          continue;
        }
      }
      if (c.handling) return;
      const taken = c.reader.take();
      if (taken === undefined) {
        if (this.#stopping && c.reader.buffered === 0) return this.#close(c);
        if (!c.readable) return;
        const space = c.reader.space();
        const n = Number(this.#libc.recv(c.fd, space, BigInt(space.length), 0));
        if (n > 0) {
          c.reader.received(n);
          // A short read took all there was: bytes coming later raise a new edge, so no
          // recv is spent to hear EAGAIN (as nginx does).
          if (n < space.length) c.readable = false;
          continue;
        }
        if (n < 0) {
          const errno = this.#errno.getInt32();
          if (errno === EINTR) continue;
          if (errno === EAGAIN) {
            c.readable = false;
            return;
          }
        }
        // The client closed (0) or the connection failed.
        return this.#close(c);
      }
      if (taken instanceof Refusal) {
        this.#queue(c, this.#responder.refusal(taken), undefined);
        c.closeAfter = true;
        continue;
      }
      this.#handle(c, taken);
    }
  }

  /** Hands a request to the handler; its answer is queued and the connection goes on. */
  #handle(c: Conn, head: ParsedHead): void {
    c.handling = true;
    void this.#responder.answer(head, c.remote).then((reply) => {
      c.handling = false;
      if (c.closed) return;
      try {
        this.#answer(c, head, reply);
      } catch (err) {
        this.#options.log.error("hls answer failed", { path: head.path, err });
        this.#close(c);
      }
    });
  }

  /** Queues the handler's reply to `head` and goes on with the connection. */
  #answer(c: Conn, head: ParsedHead, reply: HlsHttpReply): void {
    const keepAlive = head.keepAlive && !this.#stopping;
    const { head: bytes, body } = this.#responder.split(reply, head, keepAlive);
    const file = this.#files.use(body);
    if (file) this.#queue(c, bytes, file);
    // Small bodies (playlists): the whole response, kept per body, in one send.
    else this.#queue(c, this.#responder.message(reply, head, keepAlive), undefined);
    c.closeAfter = !keepAlive;
    this.#pump(c);
  }

  #queue(c: Conn, out: Uint8Array, file: BodyFile | undefined): void {
    c.out = out;
    c.outAt = 0;
    c.file = file;
    c.fileAt = 0;
    c.sinceMs = performance.now();
  }

  /** Sends the pending answer; false while the socket is full (EPOLLOUT goes on). */
  #flush(c: Conn): boolean {
    const libc = this.#libc;
    while (c.out) {
      const left = c.out.length - c.outAt;
      // MSG_MORE: the head leaves with the body's first bytes, not in a segment of its own.
      const n = Number(
        libc.send(
          c.fd,
          c.out.subarray(c.outAt),
          BigInt(left),
          MSG_NOSIGNAL | (c.file ? MSG_MORE : 0),
        ),
      );
      if (n < 0) return this.#sendFailed(c);
      c.sinceMs = performance.now();
      c.outAt += n;
      if (c.outAt === c.out.length) c.out = undefined;
    }
    const file = c.file;
    while (file) {
      this.#offset[0] = BigInt(c.fileAt);
      const n = Number(
        libc.sendfile(c.fd, file.fd, this.#offsetBytes, BigInt(file.bytes - c.fileAt)),
      );
      if (n < 0) return this.#sendFailed(c);
      if (n === 0) {
        // The file is shorter than it was written: nothing more can be sent.
        this.#close(c);
        return false;
      }
      c.sinceMs = performance.now();
      c.fileAt += n;
      if (c.fileAt === file.bytes) {
        c.file = undefined;
        this.#files.done(file);
        break;
      }
    }
    c.sinceMs = performance.now();
    return true;
  }

  /** Reads and drops what a lingering connection's client sends; closes at its end. */
  #drain(c: Conn): void {
    const scratch = lingerScratch;
    for (;;) {
      const n = Number(this.#libc.recv(c.fd, scratch, BigInt(scratch.length), 0));
      if (n > 0) {
        c.lingerBytes += n;
        if (c.lingerBytes > maxLingerBytes) return this.#close(c);
        continue;
      }
      if (n < 0) {
        const errno = this.#errno.getInt32();
        if (errno === EINTR) continue;
        if (errno === EAGAIN) return;
      }
      return this.#close(c);
    }
  }

  #sendFailed(c: Conn): boolean {
    const errno = this.#errno.getInt32();
    if (errno !== EAGAIN && errno !== EINTR) this.#close(c);
    return false;
  }

  /** Closes connections idle past the timeout: waiting for a request, or stalled in a send. */
  #closeIdle(): void {
    const now = performance.now();
    for (const c of [...this.#conns.values()]) {
      const limitMs = c.lingering ? Math.min(lingerMs, this.#idleMs) : this.#idleMs;
      if (!c.handling && now - c.sinceMs >= limitMs) this.#close(c);
    }
  }

  #close(c: Conn): void {
    if (c.closed) return;
    c.closed = true;
    this.#conns.delete(c.fd);
    // Closing the descriptor takes it out of the epoll set too.
    this.#libc.close(c.fd);
    if (c.file) this.#files.done(c.file);
    c.file = undefined;
    c.out = undefined;
    if (this.#conns.size === 0) this.#drained?.();
  }

  #control(op: number, fd: number, events: number, data: number): number {
    this.#ctlView.setUint32(0, events >>> 0, true);
    this.#ctlView.setUint32(eventDataOffset, data >>> 0, true);
    this.#ctlView.setUint32(eventDataOffset + 4, 0, true);
    return this.#libc.epoll_ctl(this.#epollFd, op, fd, this.#ctl);
  }

  /** `result` when not negative; else throws naming `what` and errno. */
  #check(result: number, what: string): number {
    if (result >= 0) return result;
    const errno = this.#errno.getInt32();
    const message = `${what}: errno ${errno}`;
    throw errno === 98 ? new Deno.errors.AddrInUse(message) : new Error(message);
  }
}

/** A struct sockaddr_in / sockaddr_in6 of an IP literal and port; undefined for anything else. */
function socketAddress(hostname: string, port: number): Uint8Array | undefined {
  const v4 = ipv4Bytes(hostname);
  if (v4) {
    const out = new Uint8Array(16);
    out[0] = AF_INET; // sa_family, little-endian u16
    out[2] = port >> 8;
    out[3] = port & 0xff;
    out.set(v4, 4);
    return out;
  }
  const v6 = ipv6Bytes(hostname.startsWith("[") ? hostname.slice(1, -1) : hostname);
  if (!v6) return undefined;
  const out = new Uint8Array(28);
  out[0] = AF_INET6;
  out[2] = port >> 8;
  out[3] = port & 0xff;
  out.set(v6, 8);
  return out;
}

function ipv4Bytes(text: string): number[] | undefined {
  const parts = text.split(".");
  if (parts.length !== 4) return undefined;
  const bytes = parts.map((p) => /^\d{1,3}$/.test(p) ? Number(p) : 256);
  return bytes.every((b) => b <= 255) ? bytes : undefined;
}

function ipv6Bytes(text: string): Uint8Array | undefined {
  if (!/^[0-9a-fA-F:.]+$/.test(text) || !text.includes(":")) return undefined;
  const halves = text.split("::");
  if (halves.length > 2) return undefined;
  const groups = (part: string): number[] | undefined => {
    if (part === "") return [];
    const out: number[] = [];
    for (const g of part.split(":")) {
      if (g.includes(".")) {
        const v4 = ipv4Bytes(g);
        if (!v4) return undefined;
        out.push(v4[0] << 8 | v4[1], v4[2] << 8 | v4[3]);
      } else if (/^[0-9a-fA-F]{1,4}$/.test(g)) out.push(parseInt(g, 16));
      else return undefined;
    }
    return out;
  };
  const head = groups(halves[0]);
  const tail = halves.length === 2 ? groups(halves[1]) : [];
  if (!head || !tail) return undefined;
  const missing = 8 - head.length - tail.length;
  if (halves.length === 2 ? missing < 1 : missing !== 0) return undefined;
  const all = [...head, ...new Array(halves.length === 2 ? missing : 0).fill(0), ...tail];
  const out = new Uint8Array(16);
  all.forEach((g, i) => (out[2 * i] = g >> 8, out[2 * i + 1] = g & 0xff));
  return out;
}

/** The client's address as Deno gives it (IPv6 in its shortest form). */
function peerAddress(sa: Uint8Array): Deno.NetAddr {
  const port = (sa[2] << 8) | sa[3];
  if (sa[0] === AF_INET) {
    return { transport: "tcp", hostname: `${sa[4]}.${sa[5]}.${sa[6]}.${sa[7]}`, port };
  }
  const groups: number[] = [];
  for (let i = 0; i < 8; i++) groups.push((sa[8 + 2 * i] << 8) | sa[9 + 2 * i]);
  if (groups.slice(0, 5).every((g) => g === 0) && groups[5] === 0xffff) {
    // An IPv4 client of a dual-stack listener, written as Deno writes it.
    return { transport: "tcp", hostname: `::ffff:${sa[20]}.${sa[21]}.${sa[22]}.${sa[23]}`, port };
  }
  // The longest run of two or more zero groups becomes `::` (RFC 5952).
  let bestAt = -1, bestLength = 1;
  for (let i = 0; i < 8;) {
    if (groups[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && groups[j] === 0) j++;
    if (j - i > bestLength) (bestAt = i, bestLength = j - i);
    i = j;
  }
  const hex = groups.map((g) => g.toString(16));
  const hostname = bestAt < 0
    ? hex.join(":")
    : `${hex.slice(0, bestAt).join(":")}::${hex.slice(bestAt + bestLength).join(":")}`;
  return { transport: "tcp", hostname, port };
}
