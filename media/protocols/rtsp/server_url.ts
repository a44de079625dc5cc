/**
 * What a request URL of the RTSP server names: `rtsp://host:port/<stream>` (the aggregate
 * control URL, a trailing slash allowed) or `rtsp://host:port/<stream>/trackID=<n>` (the
 * control URL of track n).
 */
import { ParseError } from "../../../core/errors.ts";

/** The target of a request. */
export interface RtspTarget {
  /** Stream name, percent-decoded; empty for `*` or a bare host. */
  name: string;
  /** Track id when the URL is a track's control URL. */
  trackId?: number;
}

/** Path segment of a track's control URL, relative to the Content-Base. */
export function trackControl(trackId: number): string {
  return `trackID=${trackId}`;
}

/** Parses a request URL; one that is not an absolute rtsp:// URL (or `*`) is a ParseError. */
export function parseTarget(url: string): RtspTarget {
  if (url === "*") return { name: "" };
  const m = /^rtsps?:\/\/[^/?#]*(\/[^?#]*)?(?:[?#].*)?$/i.exec(url);
  if (!m) throw new ParseError(`not an rtsp:// URL: ${url.slice(0, 64)}`);
  let path = (m[1] ?? "").replace(/^\/+/, "").replace(/\/+$/, "");
  let trackId: number | undefined;
  const track = /(?:^|\/)trackID=(\d{1,3})$/.exec(path);
  if (track) {
    trackId = Number(track[1]);
    path = path.slice(0, track.index);
  }
  let name: string;
  try {
    name = decodeURIComponent(path);
  } catch {
    throw new ParseError("bad percent-encoding in the RTSP URL");
  }
  // deno-lint-ignore no-control-regex
  if (/[\x00-\x1f\x7f]/.test(name)) throw new ParseError("control characters in the stream name");
  return trackId === undefined ? { name } : { name, trackId };
}

/** The Content-Base of a stream: the request URL without query, ending with one slash. */
export function contentBase(url: string): string {
  return url.replace(/[?#].*$/, "").replace(/\/+$/, "") + "/";
}
