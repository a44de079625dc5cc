/**
 * The table of client message handlers. Each feature module registers the messages it
 * understands (`connection`, `sendData`, later `publishStream`, ...); a later registration
 * of the same name replaces the earlier one, so a module can take over a placeholder.
 */
import type { Logger } from "../core/log.ts";
import type { Services } from "../core/services.ts";
import type { SignalingSession } from "./session.ts";

/** What a handler gets besides its session and payload. */
export interface SignalingContext {
  readonly services: Services;
  /** Logger of the signaling component. */
  readonly log: Logger;
}

/**
 * Handles one client message; `payload` is the frame's `data[0]`, unvalidated. A thrown
 * (or rejected) error is logged and reported to the client with a `fail` message.
 */
export type MessageHandler = (
  session: SignalingSession,
  payload: unknown,
  ctx: SignalingContext,
) => void | Promise<void>;

/** A registered handler. */
export interface HandlerEntry {
  readonly handle: MessageHandler;
  /** Also accepted before `getUserData` was sent (connection, pong, pushLogs). */
  readonly beforeEstablished: boolean;
}

/** Client message name → handler. */
export class HandlerTable {
  #byMessage = new Map<string, HandlerEntry>();

  /** Registers (or replaces) the handler of `message`. */
  register(
    message: string,
    handle: MessageHandler,
    options: { beforeEstablished?: boolean } = {},
  ): this {
    this.#byMessage.set(message, { handle, beforeEstablished: options.beforeEstablished ?? false });
    return this;
  }

  /** The handler of `message`, if any. */
  get(message: string): HandlerEntry | undefined {
    return this.#byMessage.get(message);
  }
}
