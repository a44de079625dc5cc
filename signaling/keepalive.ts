/**
 * Server pings: one timer for all sessions sends `ping` every interval; a session that left
 * `probes` pings in a row without a `pong` is closed. The SDK answers every ping with pong.
 */
import type { HandlerTable } from "./handlers.ts";
import { closeCodes, type SignalingSession } from "./session.ts";

/** Pings every session of `sessions()` each `intervalMs`; closes the silent ones. */
export class KeepAlive {
  #timer?: ReturnType<typeof setInterval>;

  constructor(
    readonly intervalMs: number,
    readonly probes: number,
    readonly sessions: () => Iterable<SignalingSession>,
  ) {}

  /** Starts the timer. */
  start(): void {
    this.#timer ??= setInterval(() => this.tick(), this.intervalMs);
  }

  /** Stops the timer. */
  stop(): void {
    clearInterval(this.#timer);
    this.#timer = undefined;
  }

  /** One round: count the pongs that did not come, close or ping. */
  tick(): void {
    for (const session of this.sessions()) {
      if (session.state === "closed" || session.state === "detached") continue;
      if (session.awaitingPong && ++session.missedPongs >= this.probes) {
        // A lost network: a keepAlive session waits for its client to reconnect.
        session.close(closeCodes.goingAway, `no pong to ${session.missedPongs} pings`, true);
        continue;
      }
      session.awaitingPong = true;
      session.send("ping");
    }
  }
}

/** Registers `pong` (resets the counters) and the SDK's optional `ping` (answered). */
export function registerKeepAlive(handlers: HandlerTable): void {
  handlers.register("pong", (session) => {
    session.awaitingPong = false;
    session.missedPongs = 0;
  }, { beforeEstablished: true });
  handlers.register("ping", (session) => session.send("pong"), { beforeEstablished: true });
}
