/**
 * Test helper: a UDP relay on 127.0.0.1 between an SRT caller and a listener that drops and
 * reorders a share of the data packets, to prove loss recovery against real peers. Control
 * packets pass untouched (their loss is covered by SRT's periodic timers, not by this test).
 */
import { DatagramSocket, type DatagramSource } from "./datagram_socket.ts";

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
  #front: DatagramSocket;
  #back: DatagramSocket;
  #caller: DatagramSource | undefined;
  #options: LossRelayOptions;
  #random: () => number;
  #held: { data: Uint8Array; toListener: boolean } | undefined;

  private constructor(front: DatagramSocket, back: DatagramSocket, o: LossRelayOptions) {
    this.port = front.port;
    this.#front = front;
    this.#back = back;
    this.#options = o;
    let state = (o.seed ?? 12345) >>> 0;
    this.#random = () => {
      state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
      return state / 2 ** 32;
    };
  }

  /** Binds the relay on an ephemeral port of 127.0.0.1. */
  static async open(options: LossRelayOptions): Promise<LossRelay> {
    const made: { relay?: LossRelay } = {};
    const front = await DatagramSocket.bind("127.0.0.1", 0, (data, source) => {
      if (made.relay) made.relay.#fromCaller(data, source);
    });
    const back = await DatagramSocket.bind(
      "127.0.0.1",
      0,
      (data) => made.relay && made.relay.#pass(data, false),
    );
    made.relay = new LossRelay(front, back, options);
    return made.relay;
  }

  #fromCaller(data: Uint8Array, source: DatagramSource): void {
    this.#caller = source;
    this.#pass(data, true);
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
    else if (this.#caller) this.#front.send(data, this.#caller.port, this.#caller.hostname);
  }

  /** Closes both sockets. */
  async close(): Promise<void> {
    await this.#front.close();
    await this.#back.close();
  }
}
