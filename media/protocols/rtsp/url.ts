/**
 * RTSP URLs (RFC 2326 §3.2): host, port and credentials of a camera address, and the
 * resolution of the `a=control` URLs of its SDP.
 */
import { ParseError } from "../../../core/errors.ts";

/** Port of rtsp:// when the URL names none. */
export const defaultRtspPort = 554;
/** Port of rtsps:// when the URL names none. */
export const defaultRtspsPort = 322;

/** A parsed camera address. */
export interface RtspUrl {
  /** True for rtsps:// (RTSP over TLS). */
  secure: boolean;
  hostname: string;
  port: number;
  /** Credentials of the URL, decoded; empty when none. */
  user: string;
  password: string;
  /** The URL without credentials: what requests carry. */
  href: string;
}

/** Parses an rtsp:// or rtsps:// URL; anything else is a ParseError. */
export function parseRtspUrl(text: string): RtspUrl {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw new ParseError(`not a URL: ${text}`);
  }
  if (url.protocol !== "rtsp:" && url.protocol !== "rtsps:") {
    throw new ParseError(`not an rtsp:// URL: ${text}`);
  }
  if (url.hostname === "") throw new ParseError(`no host in ${text}`);
  const secure = url.protocol === "rtsps:";
  const user = decodeURIComponent(url.username);
  const password = decodeURIComponent(url.password);
  url.username = "";
  url.password = "";
  const hostname = url.hostname.replace(/^\[(.*)\]$/, "$1");
  return {
    secure,
    hostname,
    port: url.port ? Number(url.port) : secure ? defaultRtspsPort : defaultRtspPort,
    user,
    password,
    href: url.href,
  };
}

/**
 * The URL a media section's `a=control` names: absolute when it is, else relative to the
 * Content-Base (or the DESCRIBE URL) as RFC 2326 §C.1.1 says.
 */
export function resolveControl(base: string, control: string | undefined): string {
  if (control === undefined || control === "*") return base;
  if (/^rtsps?:\/\//i.test(control)) return control;
  return base.endsWith("/") ? base + control : `${base}/${control}`;
}
