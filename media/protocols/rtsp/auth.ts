/**
 * RTSP authentication with the credentials of the camera URL: Basic (RFC 7617) and Digest
 * (RFC 2617 without qop, and with qop=auth), as cameras offer them in WWW-Authenticate.
 */
import { createHash } from "node:crypto";
import { ParseError } from "../../../core/errors.ts";

/** A challenge of a 401 answer. */
export interface AuthChallenge {
  scheme: "basic" | "digest";
  /** Parameters by lower-case name (realm, nonce, qop, opaque, algorithm...). */
  params: Map<string, string>;
}

/** Parses one WWW-Authenticate value; unknown schemes give undefined. */
export function parseChallenge(value: string): AuthChallenge | undefined {
  const m = /^\s*(\w+)\s*(.*)$/s.exec(value);
  if (!m) throw new ParseError("empty WWW-Authenticate");
  const scheme = m[1].toLowerCase();
  if (scheme !== "basic" && scheme !== "digest") return undefined;
  const params = new Map<string, string>();
  const re = /([\w-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s,]*))\s*,?\s*/gy;
  const rest = m[2];
  re.lastIndex = 0;
  while (re.lastIndex < rest.length) {
    const p = re.exec(rest);
    if (!p) throw new ParseError(`malformed ${scheme} challenge`);
    params.set(p[1].toLowerCase(), p[2] !== undefined ? p[2].replace(/\\(.)/g, "$1") : p[3]);
  }
  if (scheme === "digest" && (!params.has("realm") || !params.has("nonce"))) {
    throw new ParseError("digest challenge without realm or nonce");
  }
  return { scheme, params };
}

/** The strongest usable challenge of a 401 answer: Digest over Basic. */
export function pickChallenge(values: readonly string[]): AuthChallenge | undefined {
  const challenges = values.map(parseChallenge).filter((c) => c !== undefined);
  return challenges.find((c) => c.scheme === "digest") ?? challenges[0];
}

function md5(text: string): string {
  return createHash("md5").update(text).digest("hex");
}

/** What a Digest response is computed from (RFC 2617 §3.2.2.1). */
export interface DigestInput {
  user: string;
  realm: string;
  password: string;
  method: string;
  uri: string;
  nonce: string;
  /** With qop=auth: the nonce count and client nonce. */
  qop?: { nc: string; cnonce: string };
}

/** The `response` value of a Digest authorization (MD5). */
export function digestResponse(d: DigestInput): string {
  const ha1 = md5(`${d.user}:${d.realm}:${d.password}`);
  const ha2 = md5(`${d.method}:${d.uri}`);
  return d.qop
    ? md5(`${ha1}:${d.nonce}:${d.qop.nc}:${d.qop.cnonce}:auth:${ha2}`)
    : md5(`${ha1}:${d.nonce}:${ha2}`);
}

/** Builds Authorization values for requests once a challenge is known. */
export class Authenticator {
  #user: string;
  #password: string;
  #challenge: AuthChallenge;
  #nonceCount = 0;

  constructor(user: string, password: string, challenge: AuthChallenge) {
    const algorithm = challenge.params.get("algorithm")?.toUpperCase();
    if (challenge.scheme === "digest" && algorithm !== undefined && algorithm !== "MD5") {
      throw new ParseError(`digest algorithm ${algorithm} is not supported`);
    }
    this.#user = user;
    this.#password = password;
    this.#challenge = challenge;
  }

  /** The Authorization value of a request. */
  authorization(method: string, uri: string): string {
    if (this.#challenge.scheme === "basic") {
      const bytes = new TextEncoder().encode(`${this.#user}:${this.#password}`);
      return `Basic ${btoa(String.fromCharCode(...bytes))}`;
    }
    const p = this.#challenge.params;
    const realm = p.get("realm")!;
    const nonce = p.get("nonce")!;
    const digest = { user: this.#user, realm, password: this.#password, method, uri, nonce };
    const qop = p.get("qop")?.split(",").map((q) => q.trim()).includes("auth") ? "auth" : "";
    const quote = (v: string) => `"${v.replace(/["\\]/g, "\\$&")}"`;
    let value = `Digest username=${quote(this.#user)}, realm=${quote(realm)}, ` +
      `nonce=${quote(nonce)}, uri=${quote(uri)}`;
    if (qop) {
      const nc = (++this.#nonceCount).toString(16).padStart(8, "0");
      const cnonce = crypto.randomUUID().replaceAll("-", "").slice(0, 16);
      const response = digestResponse({ ...digest, qop: { nc, cnonce } });
      value += `, response="${response}", qop=${qop}, nc=${nc}, cnonce="${cnonce}"`;
    } else {
      value += `, response="${digestResponse(digest)}"`;
    }
    const opaque = p.get("opaque");
    if (opaque !== undefined) value += `, opaque=${quote(opaque)}`;
    return value;
  }
}
