/**
 * Test helper: a UDP relay on 127.0.0.1 between an SRT caller and a listener that drops and
 * reorders a share of the data packets, to prove loss recovery against real peers. Control
 * packets pass untouched (their loss is covered by SRT's periodic timers, not by this test).
 */
import dgram from "node:dgram";

/** Loss and reordering applied by a LossRelay. */
export interface LossRelayOptions {
  /** Port of the listener the relay forwards to, on 127.0.0.1. */
  targetPort: number;
  /** Share of data packets dropped, 0..1, in each direction. */
  dropRatio?: number;
  /** Share of data packets held back and sent after the next one, 0..1. */
  reorderRatio?: number;
  /** Called with each datagram and its direction, before loss is applied (captures). */
  onDatagram?: (fromCaller: boolean, data: Uint8Array) => void;
  /** Seed of the deterministic random sequence, so a run can be replayed. */
  seed?: number;
}

/** A relay port: callers connect to `port`; the relay talks to the listener from one socket. */
export class LossRelay {
  /** Port callers send to. */
  readonly port: number;
  /** Data packets dropped so far. */
  dropped = 0;
  /** Data packets reordered so far. */
  reordered = 0;
  /** While true every datagram is dropped (an outage). */
  blackout = false;
  #front: dgram.Socket;
  #back: dgram.Socket;
  #caller: { address: string; port: number } | undefined;
  #options: LossRelayOptions;
  #random: () => number;
  #held: { data: Uint8Array; toListener: boolean } | undefined;

  private constructor(port: number, front: dgram.Socket, back: dgram.Socket, o: LossRelayOptions) {
    this.port = port;
    this.#front = front;
    this.#back = back;
    this.#options = o;
    let state = (o.seed ?? 12345) >>> 0;
    this.#random = () => {
      state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
      return state / 2 ** 32;
    };
    front.on("message", (msg: Uint8Array, info: dgram.RemoteInfo) => {
      this.#caller = { address: info.address, port: info.port };
      this.#pass(msg, true);
    });
    back.on("message", (msg: Uint8Array) => this.#pass(msg, false));
  }

  /** Binds the relay on an ephemeral port of 127.0.0.1. */
  static async open(options: LossRelayOptions): Promise<LossRelay> {
    const front = dgram.createSocket("udp4");
    const back = dgram.createSocket("udp4");
    await new Promise<void>((resolve) => front.bind(0, "127.0.0.1", resolve));
    await new Promise<void>((resolve) => back.bind(0, "127.0.0.1", resolve));
    return new LossRelay(front.address().port, front, back, options);
  }

  #pass(data: Uint8Array, toListener: boolean): void {
    this.#options.onDatagram?.(toListener, data);
    if (this.blackout) return;
    const isData = data.length >= 16 && (data[0] & 0x80) === 0;
    if (isData) {
      if (this.#random() < (this.#options.dropRatio ?? 0)) {
        this.dropped++;
        return;
      }
      if (!this.#held && this.#random() < (this.#options.reorderRatio ?? 0)) {
        this.#held = { data, toListener };
        this.reordered++;
        return;
      }
    }
    this.#send(data, toListener);
    const held = this.#held;
    if (held && isData) {
      this.#held = undefined;
      this.#send(held.data, held.toListener);
    }
  }

  #send(data: Uint8Array, toListener: boolean): void {
    if (toListener) this.#back.send(data, this.#options.targetPort, "127.0.0.1");
    else if (this.#caller) this.#front.send(data, this.#caller.port, this.#caller.address);
  }

  /** Closes both sockets. */
  async close(): Promise<void> {
    await new Promise<void>((resolve) => this.#front.close(() => resolve()));
    await new Promise<void>((resolve) => this.#back.close(() => resolve()));
  }
}
