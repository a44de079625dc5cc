/**
 * What a werift peer connection keeps that costs memory per peer and that nothing uses, cut
 * once the peer is set up. A server holds one peer per player, so these add up: heap
 * snapshots of the server with 50 players against 10 (bench/support/webrtc_heap.ts) showed
 * about 185 KB of heap per player, of which werift's events took about 45 KB and its SRTP
 * contexts' unused HMACs about 12 KB.
 *
 * - werift's `Event` (its `onX` subscription points; about 75 per player) defines its ten
 *   methods as arrow-function fields, so each instance holds ten closures and their context
 *   (about 600 bytes). `leanEvents` points them at shared functions that do the same through
 *   `this`: werift only ever calls them as methods (`x.onY.subscribe(...)`), as does this
 *   server. A field someone replaced (the DTLS retransmit filter wraps `onData.execute` and
 *   calls the original detached) is left as it is.
 * - Each SRTP and SRTCP context keeps two HMAC-SHA1 objects made at construction (Node-style
 *   streams in Deno's polyfill, about 1.5 KB each) that it never reads: authentication makes
 *   a new HMAC each time. `dropUnusedSrtpAuth` lets them go.
 * - A DTLS server keeps, once connected, the private key it parsed for the handshake (one
 *   object per peer though every peer has the same certificate, about 2.6 KB) and its
 *   ECDHE key pair: `dropHandshakeKeys` lets them go.
 * - A player whose every track is on the send engine never has werift protect RTP, and its
 *   browser sends none: `dropRtpProtection` lets werift's SRTP session (two contexts of
 *   derived keys and cipher buffers, about 12 KB) go, keeping SRTCP.
 * - A connected DTLS server keeps every handshake message it sent and received (about 4.5 KB:
 *   certificates, hellos, key exchanges) though it only ever asks which types it has:
 *   `compactHandshake` keeps their types and sequence numbers.
 * - Every DTLS transport decodes the server's one certificate for itself (about 0.5 KB, often
 *   a slice keeping a larger buffer alive): `shareLocalCertificate` points it at one copy.
 * - werift keeps both negotiated descriptions parsed (about 10 KB of objects per peer, a
 *   heap snapshot at 60 players): `lazyDescriptions` keeps their SDP text and parses it again
 *   if werift looks (renegotiation), which it does not while a peer only plays or publishes.
 */
import { Socket as DgramSocket } from "node:dgram";
import { Stream } from "node:stream";
import {
  Event as WeriftEvent,
  type RTCDtlsTransport,
  SessionDescription,
  SrtpAuthenticationError,
} from "werift";
import { MuxSocket } from "./ice_mux.ts";

/** The methods werift's Event defines per instance, by name. */
const eventMethodNames = [
  "onerror",
  "execute",
  "complete",
  "error",
  "allUnsubscribe",
  "subscribe",
  "queuingSubscribe",
  "once",
  "watch",
  "asPromise",
] as const;

/** A subscriber of an event. */
interface Subscriber {
  execute: (...args: unknown[]) => unknown;
  id: number;
  complete?: () => void;
  error?: (e: unknown) => void;
}

/** The state of werift's Event the methods work on. */
interface EventState {
  event: { stack: Subscriber[]; promiseStack: Subscriber[]; eventId: number };
  ended: boolean;
  onended?: () => void;
  onerror: (e: unknown) => void;
  subscribe: typeof shared.subscribe;
  queuingSubscribe: typeof shared.queuingSubscribe;
  once: typeof shared.once;
  allUnsubscribe: () => void;
}

/** A new, empty subscriber list. */
function emptyState(): EventState["event"] {
  return { stack: [], promiseStack: [], eventId: 0 };
}

/**
 * The subscriber list of every lean event nobody subscribed to (most of them): frozen, so
 * that a list is made only on the first subscription (`ownState`).
 */
const noSubscribers: EventState["event"] = Object.freeze({
  stack: Object.freeze([]) as unknown as Subscriber[],
  promiseStack: Object.freeze([]) as unknown as Subscriber[],
  eventId: 0,
});

/** The event's own subscriber list, made when it still shares `noSubscribers`. */
function ownState(event: EventState): EventState["event"] {
  if (event.event === noSubscribers) event.event = emptyState();
  return event.event;
}

/**
 * werift's Event methods as shared functions of `this` (same behaviour: subscribers run in
 * order, queuing subscribers one after the other, and nothing runs once completed).
 */
const shared = {
  onerror(_e: unknown): void {},
  execute(this: EventState, ...args: unknown[]): void {
    if (this.ended) return;
    for (const item of this.event.stack) item.execute(...args);
    const queued = this.event.promiseStack;
    // werift chains the queuing subscribers in a promise on every call; with none (the usual
    // case) there is nothing to chain.
    if (queued.length === 0) return;
    (async () => {
      for (const item of queued) await item.execute(...args);
    })().catch((e) => this.onerror(e));
  },
  complete(this: EventState): void {
    if (this.ended) return;
    for (const item of this.event.stack) item.complete?.();
    this.allUnsubscribe();
    this.ended = true;
    const onended = this.onended;
    this.onended = undefined;
    onended?.();
  },
  error(this: EventState, e: unknown): void {
    if (this.ended) return;
    for (const item of this.event.stack) item.error?.(e);
    this.allUnsubscribe();
  },
  allUnsubscribe(this: EventState): void {
    if (this.ended) return;
    this.event = noSubscribers;
  },
  subscribe(
    this: EventState,
    execute: Subscriber["execute"],
    complete?: Subscriber["complete"],
    error?: Subscriber["error"],
  ) {
    const state = ownState(this);
    const id = state.eventId++;
    state.stack.push({ execute, id, complete, error });
    const unSubscribe = () => {
      if (this.event === noSubscribers) return;
      this.event.stack = this.event.stack.filter((item) => item.id !== id);
    };
    const disposer = (list: (() => void)[]) => {
      list.push(unSubscribe);
    };
    return { unSubscribe, disposer };
  },
  queuingSubscribe(
    this: EventState,
    execute: Subscriber["execute"],
    complete?: Subscriber["complete"],
    error?: Subscriber["error"],
  ) {
    if (this.ended) throw new Error("event completed");
    const state = ownState(this);
    const id = state.eventId++;
    state.promiseStack.push({ execute, id, complete, error });
    const unSubscribe = () => {
      if (this.event === noSubscribers) return;
      this.event.promiseStack = this.event.promiseStack.filter((item) => item.id !== id);
    };
    const disposer = (list: (() => void)[]) => {
      list.push(unSubscribe);
    };
    return { unSubscribe, disposer };
  },
  once(
    this: EventState,
    execute: Subscriber["execute"],
    complete?: Subscriber["complete"],
    error?: Subscriber["error"],
  ): void {
    const off = this.subscribe(
      (...args: unknown[]) => {
        off.unSubscribe();
        execute(...args);
      },
      complete,
      error,
    );
  },
  watch(
    this: EventState,
    check: (...args: unknown[]) => unknown,
    timeLimitMs?: number,
  ): Promise<unknown[]> {
    return new Promise((resolve, reject) => {
      const timer = timeLimitMs && setTimeout(() => reject("Event watch timeout"), timeLimitMs);
      const { unSubscribe } = this.subscribe((...args: unknown[]) => {
        if (!check(...args)) return;
        if (timer) clearTimeout(timer);
        unSubscribe();
        resolve(args);
      });
    });
  },
  asPromise(this: EventState, timeLimitMs?: number): Promise<unknown[]> {
    return new Promise((resolve, reject) => {
      const timer = timeLimitMs &&
        setTimeout(() => reject("Event asPromise timeout"), timeLimitMs);
      const stop = () => timer && clearTimeout(timer);
      this.once(
        (...args: unknown[]) => {
          stop();
          resolve(args);
        },
        () => {
          stop();
          resolve([]);
        },
        (e: unknown) => {
          stop();
          reject(e);
        },
      );
    });
  },
};

/**
 * Whether `value` is the method werift's Event made for field `name`: an arrow function named
 * after its field (a function assigned to the field later has no such name).
 */
function isOwnEventMethod(value: unknown, name: string): boolean {
  return typeof value === "function" && value.name === name && !Object.hasOwn(value, "prototype");
}

/**
 * Points the per-instance methods of `event` at the shared ones, and its subscriber list,
 * when empty, at the shared empty one; returns how many methods changed.
 */
export function leanEvent(event: object): number {
  const fields = event as Record<string, unknown>;
  let replaced = 0;
  for (const name of eventMethodNames) {
    if (fields[name] === shared[name] || !Object.hasOwn(event, name)) continue;
    if (!isOwnEventMethod(fields[name], name)) continue;
    fields[name] = shared[name];
    replaced++;
  }
  // Only when every method that adds a subscriber is a shared one (they make a list first).
  const state = event as EventState;
  if (
    state.subscribe === shared.subscribe && state.queuingSubscribe === shared.queuingSubscribe &&
    state.event.stack.length === 0 && state.event.promiseStack.length === 0
  ) {
    state.event = noSubscribers;
  }
  return replaced;
}

/** Objects looked at by one `leanEvents` walk at most (a peer has a few thousand). */
const maxWalkObjects = 20_000;

/**
 * Makes every werift Event reachable from `root` (a peer connection) through public fields,
 * arrays, maps and sets lean (`leanEvent`). Sockets, streams and timers are not walked into
 * (they lead out of the peer). Returns the number of events changed.
 */
export function leanEvents(root: object): number {
  const seen = new Set<object>([root]);
  const queue: object[] = [root];
  let changed = 0;
  for (let i = 0; i < queue.length && seen.size < maxWalkObjects; i++) {
    const object = queue[i];
    if (object instanceof WeriftEvent) {
      if (leanEvent(object) > 0) changed++;
      continue;
    }
    const visit = (value: unknown) => {
      if (typeof value !== "object" || value === null || seen.has(value)) return;
      if (!walkable(value)) return;
      seen.add(value);
      queue.push(value);
    };
    if (object instanceof Map) {
      for (const value of object.values()) visit(value);
    } else if (object instanceof Set || Array.isArray(object)) {
      for (const value of object) visit(value);
    } else {
      for (const key of Object.keys(object)) visit((object as Record<string, unknown>)[key]);
    }
  }
  return changed;
}

/** Whether the walk goes into `value`: not bytes, sockets, streams, timers or promises. */
function walkable(value: object): boolean {
  if (ArrayBuffer.isView(value) || value instanceof ArrayBuffer) return false;
  if (value instanceof DgramSocket || value instanceof MuxSocket || value instanceof Stream) {
    return false;
  }
  if (value instanceof Promise) return false;
  if (value instanceof WeakMap || value instanceof WeakSet) return false;
  return value.constructor?.name !== "Timeout";
}

/** The fields of werift's SRTP and SRTCP contexts that hold the unused HMACs. */
interface SrtpContextFields {
  srtpSessionAuth?: unknown;
  srtcpSessionAuth?: unknown;
}

/** The fields of werift's RTCDtlsTransport with its SRTP and SRTCP sessions. */
interface DtlsSrtpFields {
  srtp?: { localContext?: SrtpContextFields; remoteContext?: SrtpContextFields };
  srtcp?: { localContext?: SrtpContextFields; remoteContext?: SrtpContextFields };
}

/**
 * Lets the HMAC objects werift's SRTP and SRTCP contexts of `dtls` (an RTCDtlsTransport,
 * connected) made at construction go: werift authenticates with a new HMAC each time (and
 * AES-GCM profiles use none), so the ones made up front are never read. Returns how many.
 */
export function dropUnusedSrtpAuth(dtls: object): number {
  const { srtp, srtcp } = dtls as DtlsSrtpFields;
  const contexts = [
    srtp?.localContext,
    srtp?.remoteContext,
    srtcp?.localContext,
    srtcp?.remoteContext,
  ];
  let dropped = 0;
  for (const context of contexts) {
    if (!context) continue;
    for (const field of ["srtpSessionAuth", "srtcpSessionAuth"] as const) {
      if (context[field] === undefined) continue;
      context[field] = undefined;
      dropped++;
    }
  }
  return dropped;
}

/**
 * What stands in for werift's SRTP session of a transport whose RTP the send engine protects:
 * the session's `config` (keys and profile, as EngineSendPaths.open reads them), an `encrypt`
 * that refuses (nothing of the server sends RTP through werift then) and a `decrypt` that
 * fails as a bad tag does, so werift drops RTP a player should not send, as it drops
 * packets that fail authentication.
 */
class RtpOnEngine {
  constructor(readonly config: unknown) {}

  encrypt(): never {
    throw new Error("this transport's RTP goes through the send engine");
  }

  decrypt(): never {
    throw new SrtpAuthenticationError("no RTP is received on a player's transport");
  }
}

/**
 * Lets werift's SRTP (RTP) session of `dtls` go, once every track sending on it is on the send
 * engine; SRTCP (RTCP both ways: sender reports, NACK, PLI) stays. False when `dtls` has no
 * SRTP session yet or already lost it.
 */
export function dropRtpProtection(dtls: RTCDtlsTransport): boolean {
  const fields = dtls as unknown as { srtp?: { config: unknown } };
  const srtp = fields.srtp;
  if (!srtp || srtp instanceof RtpOnEngine) return false;
  fields.srtp = new RtpOnEngine(srtp.config);
  return true;
}

/** The fields of werift's DTLS socket (RTCDtlsTransport.dtls) `dropHandshakeKeys` touches. */
interface DtlsSocketFields {
  connected?: boolean;
  cipher?: { localPrivateKey?: unknown; localKeyPair?: unknown };
}

/**
 * Lets the private key and ECDHE key pair of a connected DTLS server go. A server uses them
 * only to sign its key exchange and to derive the master secret; once connected it ignores the
 * client's key messages (werift's DtlsServer returns on them), answers a retransmitted
 * Finished with its last flight as sent, and a new ClientHello (renegotiation) parses the
 * key anew. A DTLS client keeps them (it may have to sign its flight again). Returns whether
 * anything went.
 */
export function dropHandshakeKeys(dtls: RTCDtlsTransport): boolean {
  if (dtls.role !== "server" || dtls.state !== "connected") return false;
  const socket = (dtls as unknown as { dtls?: DtlsSocketFields }).dtls;
  const cipher = socket?.cipher;
  if (!socket?.connected || !cipher || cipher.localPrivateKey === undefined) return false;
  cipher.localPrivateKey = undefined;
  cipher.localKeyPair = undefined;
  return true;
}

/** One handshake message as werift's DtlsContext caches it (the fields we keep). */
interface CachedHandshake {
  msg_type: number;
  message_seq: number;
}

/** The fields of werift's DtlsContext (`RTCDtlsTransport.dtls.dtls`) `compactHandshake` touches. */
interface DtlsContextFields {
  flight?: number;
  handshakeCache?: Record<string, { data: CachedHandshake[] }>;
  lastFlight?: unknown[];
}

/**
 * Keeps, of a connected DTLS server's handshake, only what werift reads once connected: the
 * type and sequence number of each cached message (a retransmitted Finished makes werift ask
 * whether the ClientKeyExchange came, then resend its last flight, kept as sent: `flight` 6),
 * not their bytes; the last flight's message objects (read only by a DTLS client) and the
 * list of hello extensions (read only by a client's first flight; a renegotiation makes new
 * ones) go. A new ClientHello (renegotiation) starts a new context. Returns whether anything
 * went.
 */
export function compactHandshake(dtls: RTCDtlsTransport): boolean {
  if (dtls.role !== "server" || dtls.state !== "connected") return false;
  const socket = (dtls as unknown as {
    dtls?: DtlsSocketFields & { extensions?: unknown[]; dtls?: DtlsContextFields };
  }).dtls;
  const context = socket?.dtls;
  const cache = context?.handshakeCache;
  if (!socket?.connected || !cache || context.flight !== 6) return false;
  let compacted = false;
  for (const entry of Object.values(cache)) {
    if (entry.data.every((h) => Object.keys(h).length === 2)) continue;
    entry.data = entry.data.map((h) => ({ msg_type: h.msg_type, message_seq: h.message_seq }));
    compacted = true;
  }
  if (context.lastFlight?.length) {
    context.lastFlight = [];
    compacted = true;
  }
  if (socket.extensions?.length) {
    socket.extensions = [];
    compacted = true;
  }
  return compacted;
}

/** The fields of werift's SDPManager (`RTCPeerConnection.sdpManager`) `lazyDescriptions` swaps. */
const descriptionFields = ["currentLocalDescription", "currentRemoteDescription"] as const;

/**
 * Replaces werift's parsed current local and remote descriptions of `pc` (an
 * RTCPeerConnection) by their SDP text, parsed again on first read (and kept from then on);
 * werift setting a new description puts a plain field back. Only a description that reads
 * back as the same SDP is replaced. Returns how many were.
 */
export function lazyDescriptions(pc: object): number {
  const manager = (pc as { sdpManager?: Record<string, unknown> }).sdpManager;
  if (!manager) return 0;
  let replaced = 0;
  for (const field of descriptionFields) {
    const property = Object.getOwnPropertyDescriptor(manager, field);
    const description = property?.value;
    if (!(description instanceof SessionDescription)) continue;
    const sdp = description.string;
    if (SessionDescription.parse(sdp).string !== sdp) continue;
    const type = description.type;
    let parsed: SessionDescription | undefined;
    Object.defineProperty(manager, field, {
      configurable: true,
      enumerable: true,
      get(): SessionDescription {
        if (!parsed) {
          parsed = SessionDescription.parse(sdp);
          parsed.type = type;
        }
        return parsed;
      },
      set(value: unknown) {
        Object.defineProperty(manager, field, {
          configurable: true,
          enumerable: true,
          writable: true,
          value,
        });
      },
    });
    replaced++;
  }
  return replaced;
}

/** The one copy of the local certificate every connected DTLS transport points at. */
let sharedCertificate: Buffer | undefined;

/**
 * Points the decoded local certificate of `dtls`'s DTLS socket at one copy shared by every
 * transport with the same certificate bytes. werift reads it only to send it in a handshake
 * flight, copying it then (a renegotiation decodes it anew). Returns whether it was replaced.
 */
export function shareLocalCertificate(dtls: RTCDtlsTransport): boolean {
  const cipher = (dtls as unknown as { dtls?: { cipher?: { localCert?: unknown } } }).dtls?.cipher;
  const cert = cipher?.localCert;
  if (!cipher || !(cert instanceof Uint8Array) || cert === sharedCertificate) return false;
  if (!sharedCertificate || !Buffer.from(cert).equals(sharedCertificate)) {
    // Buffer.alloc is never a slice of Node's shared pool: the copy holds only its bytes.
    sharedCertificate = Buffer.alloc(cert.byteLength);
    sharedCertificate.set(cert);
  }
  cipher.localCert = sharedCertificate;
  return true;
}
