/**
 * The open WHIP publishes and WHEP plays, by the unguessable id of their session resource
 * (the `Location` of the POST's answer), so PATCH and DELETE find them and the server's
 * stop ends them.
 */
import type { TrickleCandidate } from "../media/protocols/webrtc/sdpfrag.ts";

/** What a session's stream offers the HTTP side. */
export interface WhipStream {
  readonly mediaSessionId: string;
  addRemoteCandidates(candidates: readonly TrickleCandidate[]): Promise<void>;
  terminate(info: string): Promise<void>;
}

/** One WHIP or WHEP session. */
export interface WhipSession {
  /** Resource id: the last segment of the session URL. */
  readonly id: string;
  readonly kind: "publish" | "play";
  /** Stream name as the URL gave it (the session URL repeats it). */
  readonly urlName: string;
  /** Entity tag of the ICE session, quoted, as sent in `ETag`. */
  readonly etag: string;
  /** `a=ice-ufrag` of the client's offer: a PATCH with another one asks for an ICE restart. */
  readonly clientUfrag?: string;
  readonly stream: WhipStream;
}

/** Info of a stream ended by the server's stop. */
const stopInfo = "Stopped by server shutdown";

/** The sessions of one server. */
export class WhipRegistry {
  readonly #sessions = new Map<string, WhipSession>();

  /** Adds a session. */
  add(session: WhipSession): void {
    this.#sessions.set(session.id, session);
  }

  /** The session of a resource id, if it is open. */
  get(id: string): WhipSession | undefined {
    return this.#sessions.get(id);
  }

  /** Forgets a session (idempotent; called when its stream ends). */
  remove(id: string): void {
    this.#sessions.delete(id);
  }

  /** Open sessions. */
  get size(): number {
    return this.#sessions.size;
  }

  /** Ends every session's stream (server stop). */
  async closeAll(): Promise<void> {
    const sessions = [...this.#sessions.values()];
    this.#sessions.clear();
    await Promise.allSettled(sessions.map((s) => s.stream.terminate(stopInfo)));
  }
}
