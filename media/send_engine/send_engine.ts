/**
 * The SRTP fan-out send engine (fastpath.md): Workers, one per core by default, each with its
 * own FFI UDP socket and a share of the subscribers. The main thread hands every publisher
 * packet to each Worker that has subscribers for it once, in transferred batches (one per
 * Worker per event-loop turn); Workers copy, rewrite, protect (libcrypto over FFI) and send
 * (`sendmmsg`, UDP GSO). DTLS, keys and RTCP stay with werift: a subscriber arrives here with
 * its SRTP master keys and its address.
 */
import { BadRequestError, ConflictError } from "../../core/errors.ts";
import type { SrtpBackend } from "../rtp/srtp/srtp_protector.ts";
import {
  type SrtpMasterKeys,
  type SrtpProfile,
  srtpProfileSizes,
} from "../rtp/srtp/srtp_profile.ts";
import { BatchWriter } from "./send_batch.ts";
import type {
  FromWorker,
  GroupMembership,
  StatsTriples,
  ToWorker,
  TransportCcStamp,
  WorkerSettings,
} from "./send_messages.ts";
import { writeSockaddr } from "./sockaddr.ts";

/** Options of SendEngine.start. */
export interface SendEngineOptions {
  /** Workers (default: the number of CPU cores). */
  workers?: number;
  /** Address the Workers' sockets bind (default 0.0.0.0). */
  bindHost?: string;
  /**
   * A bound UDP socket (the ICE mux's) every Worker sends on instead of one of its own, so
   * media leaves from the port ICE selected; the engine never closes it.
   */
  socketFd?: number;
  /** SRTP implementation (default auto: libcrypto over FFI, else node:crypto). */
  srtpBackend?: SrtpBackend | "auto";
  /** Use UDP GSO where the kernel has it (default true). */
  gso?: boolean;
  /** Told when a Worker could not take a subscriber (it then gets nothing). */
  onSubscriberError?: (id: string, error: string) => void;
  /** How long close waits for a Worker to close its socket, in ms (default 2000). */
  closeTimeoutMs?: number;
}

/** A subscriber handed to the engine after its DTLS handshake. */
export interface SubscriberSpec {
  /** Unique id (the player's id). */
  id: string;
  /** Its address and port (the ICE-selected remote candidate). */
  host: string;
  port: number;
  /** The negotiated DTLS-SRTP profile and the server's (sending side's) master key and salt. */
  profile: SrtpProfile;
  keys: SrtpMasterKeys;
  /** Fan-out groups it receives (e.g. a stream's video), each with its rewrite. */
  groups: GroupSpec[];
  /**
   * Subscribers with the same key go to the same Worker (the first one's, chosen by load):
   * the members of a group that only they share (an SFU track's layers) are then on one
   * Worker, which alone gets the group's packets (one handoff a packet instead of one per
   * Worker).
   */
  affinity?: string;
  /**
   * Transport-cc: each copy of a packet whose extension block starts with element `id` gets
   * the next number of the transport's TransportCcLog (`log`, its memory), recorded there
   * with its size and send time.
   */
  transportCc?: TransportCcStamp;
}

/** A group a subscriber receives, by name, and how its copies are rewritten for it. */
export interface GroupSpec extends Omit<GroupMembership, "group"> {
  group: string;
}

/** Counters of one subscriber. */
export interface SubscriberStats {
  /** Datagrams sent. */
  sent: number;
  /** Datagrams dropped: socket buffer full, refused by the kernel, or not protectable. */
  dropped: number;
  /** Index of its Worker. */
  worker: number;
}

/** What a started Worker reports. */
export interface SendWorkerInfo {
  /** Local UDP port of its socket. */
  port: number;
  /** AF_INET or AF_INET6: the address family of its socket. */
  family: number;
  srtpBackend: SrtpBackend;
  gso: boolean;
}

interface WorkerSlot {
  worker: Worker;
  info: SendWorkerInfo;
  writer: BatchWriter;
  subscribers: number;
  /** Members per group number in this Worker. */
  groups: Map<number, number>;
  waiters: Map<number, (stats: StatsTriples) => void>;
  closed?: () => void;
}

interface EngineSubscriber {
  id: string;
  affinity?: string;
  handle: number;
  worker: number;
  /** Group names it receives, and their numbers in the same order. */
  groupNames: string[];
  groups: number[];
}

/** A fan-out group's number and how many subscribers receive it. */
interface GroupEntry {
  number: number;
  members: number;
}

const workerUrl = new URL("./send_worker.ts", import.meta.url);

/** The send engine and its Workers. */
export class SendEngine {
  static #live = 0;
  readonly #slots: WorkerSlot[];
  readonly #options: SendEngineOptions;
  readonly #family: number;
  readonly #subscribers = new Map<string, EngineSubscriber>();
  readonly #byHandle = new Map<number, EngineSubscriber>();
  /** Groups that have subscribers: a name is let go with its last one (publishers come and go). */
  readonly #groups = new Map<string, GroupEntry>();
  /** Worker of each affinity key, and its subscribers. */
  readonly #affinity = new Map<string, { worker: number; subscribers: number }>();
  /** Numbers are never reused, so a Worker never takes a new group for one it still holds. */
  #nextGroup = 1;
  #nextHandle = 1;
  #nextRequest = 1;
  #flushScheduled = false;
  #closed = false;

  private constructor(slots: WorkerSlot[], options: SendEngineOptions) {
    this.#slots = slots;
    this.#options = options;
    this.#family = slots[0].info.family;
    slots.forEach((slot) => {
      slot.worker.onmessage = (event: MessageEvent<FromWorker>) =>
        this.#onMessage(slot, event.data);
    });
  }

  /** Starts the Workers and waits until each has its socket; throws when one cannot. */
  static async start(options: SendEngineOptions = {}): Promise<SendEngine> {
    const count = options.workers ?? navigator.hardwareConcurrency ?? 1;
    if (!Number.isInteger(count) || count < 1) {
      throw new RangeError(`worker count ${count} is not a positive integer`);
    }
    const settings: WorkerSettings = {
      bindHost: options.bindHost ?? "0.0.0.0",
      srtpBackend: options.srtpBackend ?? "auto",
      gso: options.gso ?? true,
      ...(options.socketFd === undefined ? {} : { fd: options.socketFd }),
    };
    const workers: Worker[] = [];
    const started = await Promise.allSettled(
      Array.from({ length: count }, () => {
        const worker = new Worker(workerUrl, { type: "module" });
        SendEngine.#live++;
        workers.push(worker);
        return new Promise<SendWorkerInfo>((resolve, reject) => {
          worker.onmessage = (event: MessageEvent<FromWorker>) => {
            const message = event.data;
            if (message.type === "ready") resolve(message);
            else if (message.type === "failed") reject(new Error(message.error));
          };
          worker.onerror = (event: ErrorEvent) => {
            event.preventDefault();
            reject(new Error(`send worker failed to start: ${event.message}`));
          };
          post(worker, { type: "start", settings });
        });
      }),
    );
    const failure = started.find((r) => r.status === "rejected");
    if (failure) {
      for (const worker of workers) {
        worker.terminate();
        SendEngine.#live--;
      }
      throw (failure as PromiseRejectedResult).reason;
    }
    const slots = workers.map((worker, i): WorkerSlot => ({
      worker,
      info: (started[i] as PromiseFulfilledResult<SendWorkerInfo>).value,
      writer: new BatchWriter(),
      subscribers: 0,
      groups: new Map(),
      waiters: new Map(),
    }));
    for (const slot of slots) {
      slot.worker.onerror = (event: ErrorEvent) => {
        event.preventDefault();
        console.error(`send worker failed: ${event.message}`);
      };
    }
    return new SendEngine(slots, options);
  }

  /** Send Workers started by all engines of this thread and not yet ended (a gauge). */
  static get liveWorkers(): number {
    return SendEngine.#live;
  }

  /** What each Worker reported when it started. */
  get workers(): readonly SendWorkerInfo[] {
    return this.#slots.map((slot) => slot.info);
  }

  /** True once close was called: publish and addSubscriber then throw. */
  get closed(): boolean {
    return this.#closed;
  }

  /** Subscribers in the engine. */
  get size(): number {
    return this.#subscribers.size;
  }

  /**
   * Adds a subscriber to the Worker with the fewest; packets published from now on reach it.
   * BadRequestError on bad keys or address, ConflictError on a duplicate id.
   */
  addSubscriber(spec: SubscriberSpec): void {
    this.#assertOpen();
    if (this.#subscribers.has(spec.id)) {
      throw new ConflictError(`subscriber ${spec.id} is already in the send engine`);
    }
    const size = srtpProfileSizes(spec.profile);
    if (!size) throw new BadRequestError("profile", `unknown SRTP profile ${spec.profile}`);
    if (spec.keys.masterKey.length !== size.keyBytes) {
      throw new BadRequestError("keys.masterKey", `${spec.profile} needs ${size.keyBytes} bytes`);
    }
    if (spec.keys.masterSalt.length !== size.saltBytes) {
      throw new BadRequestError("keys.masterSalt", `${spec.profile} needs ${size.saltBytes} bytes`);
    }
    try {
      writeSockaddr(new Uint8Array(32), this.#family, spec.host, spec.port);
    } catch (err) {
      throw new BadRequestError("host", (err as Error).message);
    }
    let index = 0;
    this.#slots.forEach((slot, i) => {
      if (slot.subscribers < this.#slots[index].subscribers) index = i;
    });
    if (spec.affinity !== undefined) {
      const affine = this.#affinity.get(spec.affinity);
      if (affine) {
        index = affine.worker;
        affine.subscribers++;
      } else this.#affinity.set(spec.affinity, { worker: index, subscribers: 1 });
    }
    const slot = this.#slots[index];
    const groups = spec.groups.map((g) => ({ ...g, group: this.#joinGroup(g.group) }));
    const subscriber: EngineSubscriber = {
      id: spec.id,
      affinity: spec.affinity,
      handle: this.#nextHandle++,
      worker: index,
      groupNames: spec.groups.map((g) => g.group),
      groups: groups.map((g) => g.group),
    };
    this.#subscribers.set(spec.id, subscriber);
    this.#byHandle.set(subscriber.handle, subscriber);
    slot.subscribers++;
    for (const group of subscriber.groups) {
      slot.groups.set(group, (slot.groups.get(group) ?? 0) + 1);
    }
    this.#send(slot, {
      type: "add",
      subscriber: {
        handle: subscriber.handle,
        host: spec.host,
        port: spec.port,
        profile: spec.profile,
        masterKey: spec.keys.masterKey,
        masterSalt: spec.keys.masterSalt,
        groups,
        ...(spec.transportCc ? { transportCc: spec.transportCc } : {}),
      },
    });
  }

  /**
   * Puts subscriber `id` into `spec.group` with its rewrite, or changes the rewrite when it
   * is there already: packets published from now on reach it so, those published before do
   * not (the message follows them to its Worker). False for an unknown subscriber.
   */
  join(id: string, spec: GroupSpec): boolean {
    this.#assertOpen();
    const subscriber = this.#subscribers.get(id);
    if (!subscriber) return false;
    const slot = this.#slots[subscriber.worker];
    let number = this.#groups.get(spec.group)?.number;
    if (number === undefined || !subscriber.groups.includes(number)) {
      number = this.#joinGroup(spec.group);
      subscriber.groupNames.push(spec.group);
      subscriber.groups.push(number);
      slot.groups.set(number, (slot.groups.get(number) ?? 0) + 1);
    }
    this.#send(slot, {
      type: "join",
      handle: subscriber.handle,
      membership: { ...spec, group: number },
    });
    return true;
  }

  /**
   * Takes subscriber `id` out of `group`: packets published from now on no longer reach it
   * there. False when it was not in it.
   */
  leave(id: string, group: string): boolean {
    const subscriber = this.#subscribers.get(id);
    if (!subscriber || this.#closed) return false;
    const at = subscriber.groupNames.indexOf(group);
    if (at < 0) return false;
    const number = subscriber.groups[at];
    subscriber.groupNames.splice(at, 1);
    subscriber.groups.splice(at, 1);
    const slot = this.#slots[subscriber.worker];
    const left = slot.groups.get(number)! - 1;
    if (left === 0) slot.groups.delete(number);
    else slot.groups.set(number, left);
    this.#leaveGroup(group);
    this.#send(slot, { type: "leave", handle: subscriber.handle, group: number });
    return true;
  }

  /** Removes a subscriber: packets published from now on no longer reach it. */
  removeSubscriber(id: string): boolean {
    const subscriber = this.#subscribers.get(id);
    if (!subscriber || this.#closed) return false;
    this.#subscribers.delete(id);
    this.#byHandle.delete(subscriber.handle);
    const slot = this.#slots[subscriber.worker];
    slot.subscribers--;
    for (const group of subscriber.groups) {
      const left = slot.groups.get(group)! - 1;
      if (left === 0) slot.groups.delete(group);
      else slot.groups.set(group, left);
    }
    for (const name of subscriber.groupNames) this.#leaveGroup(name);
    if (subscriber.affinity !== undefined) {
      const affine = this.#affinity.get(subscriber.affinity);
      if (affine && --affine.subscribers === 0) this.#affinity.delete(subscriber.affinity);
    }
    this.#send(slot, { type: "remove", handle: subscriber.handle });
    return true;
  }

  /**
   * Sends the RTP packet to every subscriber of `group`, or only to `ids` among them (a
   * retransmission). Each Worker concerned gets the bytes once, at the end of this turn.
   */
  publish(group: string, packet: Uint8Array, ids?: readonly string[]): void {
    this.#assertOpen();
    const number = this.#groups.get(group)?.number;
    if (number === undefined) return;
    if (ids) {
      const byWorker = new Map<number, number[]>();
      for (const id of ids) {
        const subscriber = this.#subscribers.get(id);
        if (!subscriber?.groups.includes(number)) continue;
        const handles = byWorker.get(subscriber.worker) ?? [];
        handles.push(subscriber.handle);
        byWorker.set(subscriber.worker, handles);
      }
      for (const [worker, handles] of byWorker) {
        this.#slots[worker].writer.append(number, packet, handles);
      }
    } else {
      for (const slot of this.#slots) {
        if (slot.groups.has(number)) slot.writer.append(number, packet);
      }
    }
    if (!this.#flushScheduled) {
      this.#flushScheduled = true;
      queueMicrotask(() => this.flush());
    }
  }

  /** Hands the packets published so far to the Workers now. */
  flush(): void {
    this.#flushScheduled = false;
    for (const slot of this.#slots) this.#flushSlot(slot);
  }

  /** Counters of every subscriber, by id. */
  async stats(): Promise<Map<string, SubscriberStats>> {
    this.#assertOpen();
    this.flush();
    const replies = await Promise.all(
      this.#slots.map((slot) =>
        new Promise<StatsTriples>((resolve) => {
          const request = this.#nextRequest++;
          slot.waiters.set(request, resolve);
          post(slot.worker, { type: "stats", request });
        })
      ),
    );
    const out = new Map<string, SubscriberStats>();
    replies.forEach((triples, worker) => {
      for (let i = 0; i < triples.length; i += 3) {
        const subscriber = this.#byHandle.get(triples[i]);
        if (subscriber) {
          out.set(subscriber.id, { sent: triples[i + 1], dropped: triples[i + 2], worker });
        }
      }
    });
    return out;
  }

  /** Sends what is pending, closes every Worker's socket and ends the Workers. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.flush();
    this.#closed = true;
    const timeoutMs = this.#options.closeTimeoutMs ?? 2000;
    await Promise.all(this.#slots.map(async (slot) => {
      let timer: ReturnType<typeof setTimeout> | undefined;
      await Promise.race([
        new Promise<void>((resolve) => {
          slot.closed = resolve;
          post(slot.worker, { type: "close" });
        }),
        new Promise<void>((resolve) => timer = setTimeout(resolve, timeoutMs)),
      ]);
      clearTimeout(timer);
      slot.worker.terminate();
      SendEngine.#live--;
      for (const resolve of slot.waiters.values()) resolve([]);
    }));
  }

  /** Counts one more member of `group` and gives its number. */
  #joinGroup(group: string): number {
    let entry = this.#groups.get(group);
    if (!entry) this.#groups.set(group, entry = { number: this.#nextGroup++, members: 0 });
    entry.members++;
    return entry.number;
  }

  /** Counts one member less of `group`, forgetting it with its last. */
  #leaveGroup(group: string): void {
    const entry = this.#groups.get(group);
    if (entry && --entry.members === 0) this.#groups.delete(group);
  }

  /** Groups with at least one subscriber. */
  get groupCount(): number {
    return this.#groups.size;
  }

  /** Posts a control message after the packets published before it. */
  #send(slot: WorkerSlot, message: ToWorker): void {
    this.#flushSlot(slot);
    post(slot.worker, message);
  }

  #flushSlot(slot: WorkerSlot): void {
    if (slot.writer.used === 0 || this.#closed) return;
    const buffer = slot.writer.take();
    slot.worker.postMessage({ type: "batch", buffer } satisfies ToWorker, [buffer]);
  }

  #onMessage(slot: WorkerSlot, message: FromWorker): void {
    if (message.type === "stats") {
      slot.waiters.get(message.request)?.(message.stats);
      slot.waiters.delete(message.request);
    } else if (message.type === "closed") {
      slot.closed?.();
    } else if (message.type === "error") {
      const id = this.#byHandle.get(message.handle)?.id ?? `#${message.handle}`;
      this.#options.onSubscriberError?.(id, message.error);
    }
  }

  #assertOpen(): void {
    if (this.#closed) throw new Error("the send engine is closed");
  }
}

function post(worker: Worker, message: ToWorker): void {
  worker.postMessage(message);
}
