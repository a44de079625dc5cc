/**
 * The client side of SIP digest authentication (RFC 3261 §22.2, §22.3 over RFC 2617): the
 * Authorization or Proxy-Authorization value answering a 401's WWW-Authenticate or a 407's
 * Proxy-Authenticate. The challenge parsing and the MD5 response are RTSP's (same RFC 2617).
 */
import { ParseError } from "../../../core/errors.ts";
import { digestResponse, parseChallenge } from "../rtsp/auth.ts";
import { randomToken } from "./headers.ts";

/** The account a user agent authenticates with. */
export interface SipCredentials {
  user: string;
  password: string;
}

/** Largest nonce count (written as 8 hex digits). */
const maxNonceCount = 0xffffffff;

/** A quoted string with `"` and `\` escaped. */
const quote = (value: string) => `"${value.replace(/["\\]/g, "\\$&")}"`;

/**
 * The Authorization (or Proxy-Authorization) value for a request of `method` to `uri`
 * answering `challenge`: MD5 digest, the opaque echoed, and with qop=auth (nc `nonceCount`
 * as 8 hex digits, a fresh cnonce) when the challenge offers it. A challenge that is not a
 * usable MD5 digest one is a ParseError.
 */
export function authorizationFor(
  challenge: string,
  credentials: SipCredentials,
  method: string,
  uri: string,
  nonceCount: number,
): string {
  const parsed = parseChallenge(challenge);
  if (parsed?.scheme !== "digest") throw new ParseError("SIP challenge is not a Digest one");
  const p = parsed.params;
  const algorithm = p.get("algorithm");
  if (algorithm !== undefined && algorithm.toUpperCase() !== "MD5") {
    throw new ParseError(`digest algorithm ${algorithm} is not supported`);
  }
  const realm = p.get("realm")!;
  const nonce = p.get("nonce")!;
  const offered = p.get("qop")?.split(",").map((q) => q.trim().toLowerCase());
  if (offered && !offered.includes("auth")) {
    throw new ParseError(`digest qop ${p.get("qop")} is not supported`);
  }
  const { user, password } = credentials;
  const digest = { user, realm, password, method, uri, nonce };
  let value = `Digest username=${quote(user)}, realm=${quote(realm)}, nonce=${quote(nonce)}, ` +
    `uri=${quote(uri)}`;
  if (offered) {
    if (!Number.isInteger(nonceCount) || nonceCount < 1 || nonceCount > maxNonceCount) {
      throw new RangeError(`nonce count ${nonceCount} is out of range`);
    }
    const nc = nonceCount.toString(16).padStart(8, "0");
    const cnonce = randomToken(8);
    const response = digestResponse({ ...digest, qop: { nc, cnonce } });
    value += `, response="${response}", algorithm=MD5, cnonce="${cnonce}", qop=auth, nc=${nc}`;
  } else {
    value += `, response="${digestResponse(digest)}", algorithm=MD5`;
  }
  const opaque = p.get("opaque");
  if (opaque !== undefined) value += `, opaque=${quote(opaque)}`;
  return value;
}
