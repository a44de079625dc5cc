/**
 * Authentication of the RTSP server's clients: with users configured, every request but
 * OPTIONS needs an Authorization of one of them, Digest (RFC 2617, MD5, with or without
 * qop=auth) against the connection's nonce, or Basic (RFC 7617); anything else is answered
 * 401 with both challenges.
 */
import { timingSafeEqual } from "node:crypto";
import { ParseError } from "../../../core/errors.ts";
import { digestResponse, parseChallenge } from "./auth.ts";

/** Realm of the challenges. */
export const rtspRealm = "media-server";

function sameText(a: string, b: string): boolean {
  const x = new TextEncoder().encode(a);
  const y = new TextEncoder().encode(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

/** The users of the RTSP server. */
export class RtspServerAuth {
  readonly #passwords = new Map<string, string>();

  /** `users`: `user:password` pairs; none turns authentication off. */
  constructor(users: readonly string[]) {
    for (const pair of users) {
      const colon = pair.indexOf(":");
      this.#passwords.set(pair.slice(0, colon), pair.slice(colon + 1));
    }
  }

  /** True when clients must authenticate. */
  get enabled(): boolean {
    return this.#passwords.size > 0;
  }

  /** WWW-Authenticate values of a 401 on a connection whose nonce is `nonce`. */
  challenges(nonce: string): string[] {
    return [`Digest realm="${rtspRealm}", nonce="${nonce}"`, `Basic realm="${rtspRealm}"`];
  }

  /** True when `authorization` (the header's value) names a user of this server. */
  check(authorization: string | undefined, method: string, nonce: string): boolean {
    if (authorization === undefined) return false;
    let credentials;
    try {
      credentials = parseCredentials(authorization);
    } catch (err) {
      if (err instanceof ParseError) return false;
      throw err;
    }
    if (!credentials) return false;
    const password = this.#passwords.get(credentials.user);
    if (password === undefined) return false;
    if (credentials.scheme === "basic") return sameText(credentials.password, password);
    const p = credentials.params;
    if (p.get("nonce") !== nonce || p.get("realm") !== rtspRealm) return false;
    const qop = p.get("qop") === "auth"
      ? { nc: p.get("nc") ?? "", cnonce: p.get("cnonce") ?? "" }
      : undefined;
    const expected = digestResponse({
      user: credentials.user,
      realm: rtspRealm,
      password,
      method,
      uri: p.get("uri") ?? "",
      nonce,
      qop,
    });
    return sameText(p.get("response") ?? "", expected);
  }
}

type Credentials =
  | { scheme: "basic"; user: string; password: string }
  | { scheme: "digest"; user: string; params: Map<string, string> };

/** The credentials of an Authorization value, or undefined for another scheme. */
function parseCredentials(value: string): Credentials | undefined {
  const basic = /^\s*basic\s+([A-Za-z0-9+/=]+)\s*$/i.exec(value);
  if (basic) {
    let text: string;
    try {
      text = new TextDecoder().decode(Uint8Array.from(atob(basic[1]), (c) => c.charCodeAt(0)));
    } catch {
      return undefined;
    }
    const colon = text.indexOf(":");
    if (colon < 0) return undefined;
    return { scheme: "basic", user: text.slice(0, colon), password: text.slice(colon + 1) };
  }
  // A Digest Authorization has the shape of a challenge (realm and nonce among its fields).
  const digest = parseChallenge(value);
  if (digest?.scheme !== "digest") return undefined;
  return { scheme: "digest", user: digest.params.get("username") ?? "", params: digest.params };
}
