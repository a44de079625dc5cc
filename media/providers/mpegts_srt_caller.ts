/**
 * MPEG-TS pulled over SRT: the server calls a remote SRT listener (an encoder or another
 * server in listener mode) and takes the MPEG-TS it sends. A call that fails or a connection
 * that ends is made again after `srtRecallMs`, until the transport is closed; the ingest's
 * own timeout ends a pull whose listener never answers.
 */
import { connectSrt } from "../protocols/srt/caller.ts";
import type { SrtConnection } from "../protocols/srt/connection.ts";
import { SrtRejectedError } from "../protocols/srt/errors.ts";
import type { MpegtsPeer, MpegtsTransport, MpegtsTransportHandlers } from "./mpegts_transport.ts";

/** Wait before calling the remote listener again, in ms. */
export const srtRecallMs = 1000;

/** Where an SRT pull calls. */
export interface SrtCallTarget {
  /** The listener's address, an IP literal. */
  hostname: string;
  port: number;
  streamId?: string;
  passphrase?: string;
  /** Receiver latency, in ms (libsrt's default 120 when absent). */
  latencyMs?: number;
}

/** An SRT caller receiving MPEG-TS from one remote listener. */
export class SrtCallerTransport implements MpegtsTransport {
  readonly kind = "srt";
  /** No local port of the range is held: the caller's socket is ephemeral. */
  readonly port = 0;
  #target: SrtCallTarget;
  #refused = 0;
  #current: SrtConnection | undefined;
  #timer: ReturnType<typeof setTimeout> | undefined;
  #wake: (() => void) | undefined;
  #loop: Promise<void> = Promise.resolve();
  #closed = false;

  constructor(target: SrtCallTarget) {
    this.#target = target;
  }

  /** Calls the listener refused so far (wrong passphrase, unknown stream id, ...). */
  get refused(): number {
    return this.#refused;
  }

  start(handlers: MpegtsTransportHandlers): void {
    this.#loop = this.#run(handlers);
  }

  async close(): Promise<void> {
    this.#closed = true;
    clearTimeout(this.#timer);
    this.#wake?.();
    await this.#current?.close().catch(() => {});
    await this.#loop;
  }

  async #run(handlers: MpegtsTransportHandlers): Promise<void> {
    const { hostname, port, streamId, passphrase, latencyMs } = this.#target;
    const peer: MpegtsPeer = { address: hostname, port };
    while (!this.#closed) {
      try {
        const connection = await connectSrt({ hostname, port, streamId, passphrase, latencyMs });
        if (this.#closed) {
          await connection.close();
          break;
        }
        this.#current = connection;
        handlers.peer(peer);
        connection.onPayload = (payload) => handlers.data(payload, peer);
        await connection.closed;
        this.#current = undefined;
      } catch (err) {
        if (err instanceof SrtRejectedError) {
          this.#refused++;
          handlers.refused(peer, err.message);
        }
      }
      if (this.#closed) break;
      await new Promise<void>((resolve) => {
        this.#wake = resolve;
        this.#timer = setTimeout(resolve, srtRecallMs);
      });
    }
  }
}
