/** RTMP addresses: `rtmp://host[:port]/app[/instance]/streamName[?query]`. */
import { BadRequestError } from "../../../core/errors.ts";

/** Port of rtmp:// addresses that name none. */
export const defaultRtmpPort = 1935;

/** The parts of an RTMP address a client needs. */
export interface RtmpUrl {
  hostname: string;
  port: number;
  /** Application, the first path segment (e.g. "live"). */
  app: string;
  /** Stream name: the rest of the path, with its query. */
  streamName: string;
  /** The `tcUrl` of the connect command: scheme, host, port and app. */
  tcUrl: string;
}

/**
 * Parses an RTMP address; `field` names the request field in the BadRequestError raised for
 * a malformed address, an rtmps:// one (TLS is not supported) or one without a stream name.
 */
export function parseRtmpUrl(text: string, field: string): RtmpUrl {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw new BadRequestError(field, `${JSON.stringify(text)} is not a URL`);
  }
  if (url.protocol === "rtmps:") {
    throw new BadRequestError(field, "rtmps:// (RTMP over TLS) is not supported");
  }
  if (url.protocol !== "rtmp:") throw new BadRequestError(field, "must be an rtmp:// URL");
  if (!url.hostname) throw new BadRequestError(field, "the URL names no host");
  const segments = url.pathname.split("/").filter((s) => s !== "");
  if (segments.length < 2) {
    throw new BadRequestError(field, "the URL needs an application and a stream name");
  }
  const port = url.port ? Number(url.port) : defaultRtmpPort;
  const hostname = url.hostname.replace(/^\[(.*)\]$/, "$1");
  return {
    hostname,
    port,
    app: decode(segments[0], field),
    streamName: decode(segments.slice(1).join("/"), field) + url.search,
    tcUrl: `rtmp://${url.host}/${segments[0]}`,
  };
}

function decode(part: string, field: string): string {
  try {
    return decodeURIComponent(part);
  } catch {
    throw new BadRequestError(field, `bad percent-encoding in ${JSON.stringify(part)}`);
  }
}
