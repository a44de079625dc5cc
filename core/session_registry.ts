/**
 * The Web SDK client sessions of the server, keyed by sessionId. Signaling registers a
 * session once it is established; REST (`/connection`, `/logger`, `/data`) looks it up here,
 * never in signaling.
 */
import { NotFoundError } from "./errors.ts";
import type { ConnectionRecord } from "./records.ts";

/** Levels of a per-session client log, least verbose first. */
export const clientLogLevels = ["ERROR", "WARN", "INFO", "DEBUG", "TRACE"] as const;
/** A client log level. */
export type ClientLogLevel = typeof clientLogLevels[number];

/** What the registry needs of a client session. */
export interface ClientSession {
  /** `/<client_ip>:<port>/<server_ip>:<port>-<uuid>`. */
  readonly sessionId: string;
  /** The Connection record of the API. */
  record(): ConnectionRecord;
  /** Sends a signaling message; `data` becomes the frame's `data` array. */
  send(message: string, ...data: unknown[]): void;
  /** Closes the session's socket and resolves once the session has ended (streams included). */
  terminate(reason: string): Promise<void>;
  /** Starts (or re-levels) the session's client log file. */
  enableClientLog(level: ClientLogLevel): Promise<void>;
  /** Stops the session's client log and closes its file; a no-op when it is off. */
  disableClientLog(): Promise<void>;
}

/** Established client sessions by sessionId, and by authToken. */
export class SessionRegistry {
  #byId = new Map<string, ClientSession>();
  #byAuthToken = new Map<string, ClientSession>();

  /** Adds a session (its sessionId and authToken are unique by construction). */
  add(session: ClientSession): void {
    this.#byId.set(session.sessionId, session);
    this.#byAuthToken.set(session.record().authToken, session);
  }

  /** Removes a session if present (idempotent, so every exit path may call it). */
  remove(session: ClientSession): void {
    if (this.#byId.get(session.sessionId) !== session) return;
    this.#byId.delete(session.sessionId);
    this.#byAuthToken.delete(session.record().authToken);
  }

  /** The session given this authToken in its `getUserData`, if it is still registered. */
  findByAuthToken(authToken: string): ClientSession | undefined {
    return this.#byAuthToken.get(authToken);
  }

  /** The session with this id, or NotFoundError. */
  get(sessionId: string): ClientSession {
    const session = this.#byId.get(sessionId);
    if (!session) throw new NotFoundError(`session ${sessionId} not found`);
    return session;
  }

  /** Every session, in establishment order. */
  list(): ClientSession[] {
    return [...this.#byId.values()];
  }

  /** Number of established sessions. */
  get size(): number {
    return this.#byId.size;
  }
}
