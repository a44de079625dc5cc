/**
 * The client side of SIP digest authentication across a dialog or a registration (RFC 3261
 * §22.2, §22.3): the latest challenge of a 401/407 is kept so that later requests of the same
 * dialog or binding carry credentials with a growing nonce count, and a challenge that repeats
 * a refused nonce (a wrong password) is not answered again.
 */
import { authorizationFor, type SipCredentials } from "./digest.ts";
import type { SipResponse } from "./message.ts";

/** The header a challenge is answered in: Authorization (401) or Proxy-Authorization (407). */
type AuthorizationHeader = "Authorization" | "Proxy-Authorization";

/** Digest state of one dialog or registration. */
export class DigestSession {
  readonly #credentials?: SipCredentials;
  #challenge?: { header: AuthorizationHeader; value: string; nonce: string };
  #nonceCount = 0;
  /** Nonces a request already answered: a fresh challenge with one of them means refused. */
  readonly #answeredNonces = new Set<string>();

  constructor(credentials?: SipCredentials) {
    this.#credentials = credentials;
  }

  /**
   * Takes the challenge of a 401 or 407. False when it cannot be answered: no credentials, no
   * usable Digest challenge, or the server challenged again a nonce we answered without
   * `stale=true` (the credentials were refused).
   */
  accept(response: SipResponse): boolean {
    if (!this.#credentials) return false;
    const header: AuthorizationHeader = response.status === 407
      ? "Proxy-Authorization"
      : "Authorization";
    const name = header === "Authorization" ? "WWW-Authenticate" : "Proxy-Authenticate";
    const value = response.headers.getAll(name).find((v) => /^\s*digest\s/i.test(v)) ??
      response.headers.get(name);
    if (!value || !/^\s*digest\s/i.test(value)) return false;
    const nonce = /nonce\s*=\s*"([^"]*)"/i.exec(value)?.[1] ?? "";
    const stale = /stale\s*=\s*"?true"?/i.test(value);
    if (this.#answeredNonces.has(nonce) && !stale) return false;
    try {
      // A challenge we cannot answer (another algorithm, no nonce) leaves the 401/407 final.
      authorizationFor(value, this.#credentials, "OPTIONS", "sip:check", 1);
    } catch {
      return false;
    }
    this.#challenge = { header, value, nonce };
    this.#nonceCount = 0;
    return true;
  }

  /** The credentials header for a request, when a challenge was accepted; else none. */
  headers(method: string, uri: string): [string, string][] {
    if (!this.#challenge || !this.#credentials) return [];
    this.#answeredNonces.add(this.#challenge.nonce);
    const value = authorizationFor(
      this.#challenge.value,
      this.#credentials,
      method,
      uri,
      ++this.#nonceCount,
    );
    return [[this.#challenge.header, value]];
  }
}
