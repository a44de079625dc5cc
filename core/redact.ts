/**
 * Secrets out of what the server shows: passwords of URI userinfo and query values with a
 * secret-sounding name become `***` before a URI reaches a log line, a REST answer or an
 * error body; absolute file paths leave error bodies. Pure string work, no parsing that could
 * fail on a malformed URI.
 */

/** What a secret is replaced with. */
export const redactedMark = "***";

/** Query parameter names (lowercase) whose values are secrets. */
const secretParams = new Set([
  "token",
  "key",
  "password",
  "pass",
  "passphrase",
  "secret",
  "auth",
  "aclauth",
]);

/** Longer names ending in a secret name after a separator (`access_token`, `api-key`). */
const secretParamSuffix = /[_.-](token|key|password|pass|passphrase|secret|auth)$/;

/** Scheme, then the authority's userinfo up to its last `@` (passwords may hold an `@`). */
const userinfoPattern = /^([a-z][a-z0-9+.-]*:\/\/)([^/?#]*)@/i;

/**
 * A URI inside free text: a scheme, `://`, and everything up to a space or a quote, less
 * trailing punctuation of the sentence around it.
 */
const uriInTextPattern = /[a-z][a-z0-9+.-]*:\/\/[^\s"'<>`]*[^\s"'<>`.,;:)\]]/gi;

/** True when the query parameter `name` carries a secret. */
export function isSecretParam(name: string): boolean {
  const lower = name.toLowerCase();
  return secretParams.has(lower) || secretParamSuffix.test(lower);
}

/** `uri` with the userinfo password and secret query values replaced by `***`. */
export function redactUri(uri: string): string {
  let out = uri.replace(userinfoPattern, (_all, scheme: string, userinfo: string) => {
    const colon = userinfo.indexOf(":");
    return colon < 0 ? `${scheme}${userinfo}@` : `${scheme}${userinfo.slice(0, colon)}:***@`;
  });
  const query = out.indexOf("?");
  if (query >= 0) {
    const hash = out.indexOf("#", query);
    const end = hash < 0 ? out.length : hash;
    const params = out.slice(query + 1, end).split("&").map((param) => {
      const eq = param.indexOf("=");
      return eq > 0 && isSecretParam(param.slice(0, eq))
        ? `${param.slice(0, eq + 1)}${redactedMark}`
        : param;
    });
    out = `${out.slice(0, query + 1)}${params.join("&")}${out.slice(end)}`;
  }
  return out;
}

/**
 * `uri` without its userinfo and without secret query parameters: a name derived from it
 * (a stream, a file) carries no secret, and no `***` either.
 */
export function withoutSecrets(uri: string): string {
  let out = uri.replace(userinfoPattern, "$1");
  const query = out.indexOf("?");
  if (query >= 0) {
    const hash = out.indexOf("#", query);
    const end = hash < 0 ? out.length : hash;
    const kept = out.slice(query + 1, end).split("&").filter((param) => {
      const eq = param.indexOf("=");
      return param !== "" && !isSecretParam(eq < 0 ? param : param.slice(0, eq));
    });
    out = out.slice(0, kept.length > 0 ? query + 1 : query) + kept.join("&") + out.slice(end);
  }
  return out;
}

/** `text` with every URI in it redacted (error messages, log fields). */
export function redactText(text: string): string {
  return text.includes("://") ? text.replace(uriInTextPattern, redactUri) : text;
}

/** A quoted absolute path, as Deno and Node print them in fs errors: `open '/work/x'`. */
const quotedPathPattern = /(['"])\/[^'"\n]*\1/g;
/** A `file:` URL. */
const fileUrlPattern = /file:\/\/[^\s'"]*/gi;
/**
 * An unquoted absolute path of two or more segments, not part of a URI (`rtsp://h/x`): its
 * first slash follows no word character, colon, dot, bracket or other slash.
 */
const barePathPattern = /(?<![\w:./\]-])\/[\w.@+-]+(?:\/[\w.@+-]*)+/g;

/** What a removed path is replaced with. */
export const pathMark = "<path>";

/** `text` with absolute file paths replaced, so an error body tells nothing of the disk. */
export function redactPaths(text: string): string {
  if (!text.includes("/")) return text;
  return text
    .replace(fileUrlPattern, pathMark)
    .replace(quotedPathPattern, (_all, quote: string) => `${quote}${pathMark}${quote}`)
    .replace(barePathPattern, pathMark);
}
