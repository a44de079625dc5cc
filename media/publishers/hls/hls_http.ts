/**
 * The HTTP face of HLS (the `ports.hls` listener, hls_listener.ts), from memory:
 * - `GET /<stream>/<stream>.m3u8`: the master playlist (starts the output on demand);
 * - `GET /<stream>/<variant>/index.m3u8`: a media playlist, with LL-HLS blocking reload
 *   (`_HLS_msn`, `_HLS_part`), bounded to `blockingWaitTargets` target durations, and delta
 *   updates (`_HLS_skip`);
 * - `GET /<stream>/<variant>/<msn>.ts|.m4s`, parts `<msn>.<part>.ts|.m4s`, `init.mp4`;
 * - WCS profile URLs: `/<stream>-<profile>/<stream>-<profile>.m3u8` is the media playlist of
 *   that variant, its segments beside it.
 * HEAD answers the same headers. Every request on an output is counted on its viewer.
 */
import { MediaServerError } from "../../../core/errors.ts";
import type { Logger } from "../../../core/log.ts";
import {
  type HlsHttpHandler,
  type HlsHttpReply,
  type HlsHttpRequest,
  textReply,
} from "./hls_listener.ts";
import { type HlsOutput, type HlsVariant, startSegments } from "./hls_output.ts";

/** Target durations a blocking playlist reload or a hinted part may wait. */
const blockingWaitTargets = 3;
/** Shortest longest wait of a first playlist request for the first segments, in ms. */
const firstSegmentWaitMinMs = 15_000;
/** Cache lifetime of segments, parts and init segments (they never change), in seconds. */
const segmentMaxAgeSec = 3600;
/** Largest `_HLS_msn` / `_HLS_part` / segment number accepted. */
const maxSequence = 2 ** 31;
/** RFC 8216bis 6.2.5.2: a reload asking more than this many segments ahead is a 400. */
const msnAheadLimit = 2;
/** RFC 8216bis 6.2.5.2: the Advance Part Limit is the parts of this many seconds (at least 3). */
const partAheadSec = 3;

type Headers = readonly (readonly [string, string])[];

const playlistHeaders: Headers = [
  ["Content-Type", "application/vnd.apple.mpegurl"],
  ["Cache-Control", "no-cache"],
];
/** Headers of segments, parts and init segments by extension, made once. */
const mediaHeaders: Record<string, Headers> = Object.fromEntries(
  Object.entries({ ts: "video/mp2t", m4s: "video/iso.segment", mp4: "video/mp4" }).map((
    [ext, type],
  ) => [ext, [["Content-Type", type], ["Cache-Control", `public, max-age=${segmentMaxAgeSec}`]]]),
);

/** Where the HTTP face finds outputs (core/hls_registry.ts). */
export interface HlsOutputs {
  /**
   * The output of stream `name`; for a playlist request (`start`), one started on demand when
   * the stream is published. Undefined when there is none.
   */
  find(name: string, start: boolean): HlsOutput | undefined;
  /**
   * Opens stream `name` for a viewer presenting access key `key` before its playlist is
   * served: rejects with ForbiddenError when the key does not open it; may bring the stream
   * here from another node (the CDN). Absent: every published stream is open.
   */
  open?(name: string, key: string | undefined): Promise<unknown>;
}

/** What the handler is built from. */
export interface HlsHttpOptions {
  outputs: HlsOutputs;
  /** `hls.corsOrigins`: `*` or the origins echoed back. */
  corsOrigins: readonly string[];
  /** `hls.segmentDurationSec`. */
  targetDurationSec: number;
  /** `hls.partDurationMs` when LL-HLS is on, else 0. */
  partDurationMs: number;
  /** Query parameter carrying a viewer's access key (`cdn.aclPropertyName`). */
  aclPropertyName?: string;
  log: Logger;
}

/** What a path names. */
type Target =
  | { kind: "master" }
  | { kind: "media"; variant: string }
  | { kind: "init"; variant: string }
  | { kind: "segment"; variant: string; msn: number; part?: number; ext: "ts" | "m4s" };

/** A request that names nothing servable; `status` and a short text body. */
class HttpAnswer extends Error {
  constructor(readonly status: number, message: string) {
    super(message);
  }
}

/** The request handler of the HLS listener (hls_listener.ts). */
export function createHlsHandler(options: HlsHttpOptions): HlsHttpHandler {
  const { outputs, log } = options;
  const blockingWaitMs = blockingWaitTargets * options.targetDurationSec * 1000;
  const partAheadLimit = options.partDurationMs > 0
    ? Math.max(3, Math.floor(partAheadSec * 1000 / options.partDurationMs))
    : 0;
  // Enough for the segments a player starts with, the first keyframe's wait included.
  const firstWaitMs = Math.max(
    firstSegmentWaitMinMs,
    (startSegments.plain + 1) * options.targetDurationSec * 1000,
  );
  const anyOrigin = options.corsOrigins.includes("*");
  /**
   * Headers with the CORS headers added, by the headers and the origin allowed ("*" for any):
   * the same array each time, so the listener answers from the response it kept.
   */
  const corsHeaders = new WeakMap<Headers, Map<string, Headers>>();
  /** The reply with the CORS headers the request's origin gets. */
  const cors = (req: HlsHttpRequest, reply: HlsHttpReply): HlsHttpReply => {
    let origin = "*";
    if (!anyOrigin) {
      const asked = req.header("origin");
      if (!asked || !options.corsOrigins.includes(asked)) return reply;
      origin = asked;
    }
    let byOrigin = corsHeaders.get(reply.headers);
    if (!byOrigin) corsHeaders.set(reply.headers, byOrigin = new Map());
    let headers = byOrigin.get(origin);
    if (!headers) {
      headers = origin === "*"
        ? [...reply.headers, ["Access-Control-Allow-Origin", "*"]]
        : [...reply.headers, ["Access-Control-Allow-Origin", origin], ["Vary", "Origin"]];
      byOrigin.set(origin, headers);
    }
    return { ...reply, headers };
  };

  const aclPropertyName = options.aclPropertyName ?? "aclAuth";
  /**
   * The master playlist with the viewer's access key copied into every variant URL and the
   * URI of every audio rendition (`#EXT-X-MEDIA`).
   */
  const withKey = (master: string, key: string) => {
    const param = `${encodeURIComponent(aclPropertyName)}=${encodeURIComponent(key)}`;
    const keyed = (uri: string) => `${uri}${uri.includes("?") ? "&" : "?"}${param}`;
    return master.split("\n").map((line) =>
      line.startsWith("#EXT-X-MEDIA:")
        ? line.replace(/URI="([^"]*)"/, (_, uri: string) => `URI="${keyed(uri)}"`)
        : line === "" || line.startsWith("#")
        ? line
        : keyed(line)
    ).join("\n");
  };

  return async (req) => {
    const started = performance.now();
    const { path } = req;
    let output: HlsOutput | undefined;
    let variantName: string | undefined;
    let reply: HlsHttpReply;
    try {
      if (req.method === "OPTIONS") {
        reply = {
          status: 204,
          headers: [
            ["Allow", "GET, HEAD, OPTIONS"],
            ["Access-Control-Allow-Methods", "GET, HEAD, OPTIONS"],
            [
              "Access-Control-Allow-Headers",
              req.header("access-control-request-headers") ?? "Range",
            ],
            ["Access-Control-Max-Age", "86400"],
          ],
          body: "",
        };
      } else if (req.method !== "GET" && req.method !== "HEAD") {
        reply = textReply(405, "method not allowed", [["Allow", "GET, HEAD, OPTIONS"]]);
      } else {
        const route = routeOf(path);
        if (outputs.open && route.file.endsWith(".m3u8")) {
          const key = req.query === "" ? null : new URLSearchParams(req.query).get(aclPropertyName);
          await outputs.open(route.name, key ?? undefined);
        }
        let target: Target | undefined;
        if (route.variant !== undefined) {
          target = fileTarget(route.variant, route.file);
          output = outputs.find(route.name, target.kind === "media");
        } else if (route.file === `${route.name}.m3u8`) {
          target = { kind: "master" };
          output = outputs.find(route.name, true);
        }
        if (!output && route.variant === undefined) {
          // WCS names a profile's playlist `/<stream>-<profile>/<stream>-<profile>.m3u8`.
          const playlist = route.file === `${route.name}.m3u8`;
          const alias = profileAlias(route.name, playlist);
          if (alias) {
            output = alias.output;
            target = fileTarget(alias.variant, playlist ? "index.m3u8" : route.file);
          }
        }
        if (!output || output.closed || !target) {
          throw new HttpAnswer(404, `no HLS output of ${route.name}`);
        }
        if (target.kind !== "master") variantName = target.variant;
        reply = await serve(output, target, req.query);
      }
    } catch (err) {
      if (err instanceof HttpAnswer) reply = textReply(err.status, err.message);
      else if (err instanceof MediaServerError) reply = textReply(err.status, err.message);
      else {
        log.error("hls request failed", { path, err });
        reply = textReply(500, "internal error");
      }
    }
    reply = cors(req, reply);
    const responseMs = performance.now() - started;
    if (output) {
      const variant = output.variant(variantName ?? "");
      output.viewers.count({
        ip: req.remote.hostname,
        port: req.remote.port,
        userAgent: req.header("user-agent") ?? "",
        variant: variant ? variantName : undefined,
        audio: variant?.media === "audio",
        status: reply.status,
        responseMs,
      });
    }
    if (log.enabled("debug")) {
      log.debug("hls request", { method: req.method, path, status: reply.status, ms: responseMs });
    }
    return reply;
  };

  /**
   * The output and variant a WCS profile name `<stream>-<profile>` names (a profile named
   * `-720p` in WCS style too); the longest stream name first.
   */
  function profileAlias(
    name: string,
    start: boolean,
  ): { output: HlsOutput; variant: string } | undefined {
    for (let dash = name.lastIndexOf("-"); dash > 0; dash = name.lastIndexOf("-", dash - 1)) {
      const output = outputs.find(name.slice(0, dash), start);
      if (!output) continue;
      const profile = name.slice(dash + 1);
      for (const variant of [profile, `-${profile}`]) {
        if (output.variant(variant)) return { output, variant };
      }
    }
    return undefined;
  }

  async function serve(output: HlsOutput, target: Target, rawQuery: string): Promise<HlsHttpReply> {
    if (target.kind === "master") {
      if (!(await output.waitVariants(firstWaitMs))) {
        throw new HttpAnswer(404, `no segment of ${output.name} yet`);
      }
      const key = rawQuery === "" ? null : new URLSearchParams(rawQuery).get(aclPropertyName);
      return playlist(
        key === null ? output.masterPlaylist() : withKey(output.masterPlaylist(), key),
      );
    }
    const variant = output.variant(target.variant);
    if (!variant) throw new HttpAnswer(404, `no variant ${target.variant} of ${output.name}`);
    const segmenter = variant.segmenter;
    if (target.kind === "media") {
      const { msn, part, skip } = playlistRequest(rawQuery);
      if (msn !== undefined) {
        const edge = segmenter.edge;
        if (edge && msn > edge.msn + msnAheadLimit) {
          throw new HttpAnswer(400, `_HLS_msn ${msn} is beyond the playlist's end (${edge.msn})`);
        }
        if (
          edge && part !== undefined && msn === edge.msn && partAheadLimit > 0 &&
          part > (edge.part ?? -1) + partAheadLimit
        ) {
          throw new HttpAnswer(
            400,
            `_HLS_part ${part} is beyond the playlist's last part (${edge.part})`,
          );
        }
        await waitFor(output, () => segmenter.ready(msn, part, blockingWaitMs));
      } else if (!variant.startable) {
        // A player's first request after a start: the segments it starts with are coming.
        await output.waitVariants(firstWaitMs);
      }
      return playlist(output.mediaPlaylist(variant, skip));
    }
    if (target.kind === "init") {
      if (variant.container !== "fmp4") throw new HttpAnswer(404, "no init segment in MPEG-TS");
      const init = segmenter.init() ??
        (await output.waitVariants(firstWaitMs), segmenter.init());
      if (!init) throw new HttpAnswer(404, "init segment not ready");
      return media(init, "mp4");
    }
    return media(await segmentOf(output, variant, target), target.ext);
  }

  /**
   * The bytes of a segment or part; one just ahead of the playlist (an LL-HLS preload hint)
   * is waited for, within the blocking bound; one out of the window is a 404.
   */
  async function segmentOf(
    output: HlsOutput,
    variant: HlsVariant,
    target: Extract<Target, { kind: "segment" }>,
  ): Promise<Uint8Array> {
    const wanted = variant.container === "fmp4" ? "m4s" : "ts";
    if (target.ext !== wanted) throw new HttpAnswer(404, `this variant's segments are .${wanted}`);
    const segmenter = variant.segmenter;
    const get = () =>
      target.part === undefined
        ? segmenter.segment(target.msn)
        : segmenter.part(target.msn, target.part);
    let data = get();
    if (!data && !segmenter.ended) {
      // Before the first complete segment, the first ones are ahead.
      const last = lastMsn(segmenter.playlist()) ?? -1;
      if (target.msn > last && target.msn <= last + msnAheadLimit) {
        await waitFor(output, () => segmenter.ready(target.msn, target.part, blockingWaitMs));
        data = get();
      }
    }
    if (!data) throw new HttpAnswer(404, "segment not in the window");
    return data;
  }
}

/** Counts the request as waiting on its output while `wait` runs. */
async function waitFor(output: HlsOutput, wait: () => Promise<boolean>): Promise<void> {
  output.waiting++;
  try {
    await wait();
  } finally {
    output.waiting--;
  }
}

/**
 * `_HLS_msn`, `_HLS_part` and `_HLS_skip` of a media playlist request; malformed ones are a
 * 400 (RFC 8216bis 6.2.5).
 */
function playlistRequest(rawQuery: string): { msn?: number; part?: number; skip: boolean } {
  if (rawQuery === "") return { skip: false };
  const query = new URLSearchParams(rawQuery);
  const msn = sequenceParam(query, "_HLS_msn");
  const part = sequenceParam(query, "_HLS_part");
  if (part !== undefined && msn === undefined) {
    throw new HttpAnswer(400, "_HLS_part needs _HLS_msn");
  }
  const skip = query.get("_HLS_skip");
  // v2 also allows skipping date ranges; there are none, so it is answered as YES.
  if (skip !== null && skip !== "YES" && skip !== "v2") {
    throw new HttpAnswer(400, "_HLS_skip must be YES or v2");
  }
  return { msn, part, skip: skip !== null };
}

function sequenceParam(query: URLSearchParams, name: string): number | undefined {
  const raw = query.get(name);
  if (raw === null) return undefined;
  if (!/^\d{1,10}$/.test(raw) || Number(raw) > maxSequence) {
    throw new HttpAnswer(400, `${name} must be a non-negative integer`);
  }
  return Number(raw);
}

/** The media sequence number of the last complete segment of a media playlist. */
function lastMsn(text: string): number | undefined {
  const match = /#EXT-X-MEDIA-SEQUENCE:(\d+)/.exec(text);
  const first = match ? Number(match[1]) : 0;
  let segments = 0;
  for (let i = text.indexOf("#EXTINF:"); i >= 0; i = text.indexOf("#EXTINF:", i + 8)) segments++;
  return segments > 0 ? first + segments - 1 : undefined;
}

/** The names in a request path: `/<name>/<file>` or `/<name>/<variant>/<file>`. */
interface Route {
  readonly name: string;
  readonly variant?: string;
  readonly file: string;
}

/** Routes of paths seen lately (a player asks for the same few again and again). */
const routes = new Map<string, Route>();
/** Most routes kept; beyond, all are dropped. */
const maxRoutes = 1024;
/** Longest path whose route is kept, in characters (bounds the memory of the routes). */
const maxKeptPathChars = 256;

/** parsePath of `path`, kept for the next request of it. */
function routeOf(path: string): Route {
  let route = routes.get(path);
  if (route) return route;
  route = parsePath(path);
  if (path.length > maxKeptPathChars) return route;
  if (routes.size >= maxRoutes) routes.clear();
  routes.set(path, route);
  return route;
}

/** The names of a path; path characters are a 400, other shapes a 404. */
function parsePath(path: string): Route {
  const segments = path.split("/").slice(1).map((raw) => {
    let segment: string;
    try {
      segment = decodeURIComponent(raw);
    } catch {
      throw new HttpAnswer(400, "malformed percent-encoding");
    }
    if (
      segment === "" || segment.includes("/") || segment.includes("\\") || segment.includes("..")
    ) {
      throw new HttpAnswer(400, "path characters in a name");
    }
    // deno-lint-ignore no-control-regex
    if (/[\u0000-\u001f\u007f]/.test(segment)) throw new HttpAnswer(400, "control characters");
    return segment;
  });
  if (segments.length === 2) return { name: segments[0], file: segments[1] };
  if (segments.length === 3) return { name: segments[0], variant: segments[1], file: segments[2] };
  throw new HttpAnswer(404, "not an HLS URL");
}

/** What a file of variant `variant` names: its playlist, init segment, a segment or part. */
function fileTarget(variant: string, file: string): Target {
  if (file === "index.m3u8") return { kind: "media", variant };
  if (file === "init.mp4") return { kind: "init", variant };
  const match = /^(\d{1,10})(?:\.(\d{1,10}))?\.(ts|m4s)$/.exec(file);
  if (match && Number(match[1]) <= maxSequence && Number(match[2] ?? 0) <= maxSequence) {
    return {
      kind: "segment",
      variant,
      msn: Number(match[1]),
      part: match[2] === undefined ? undefined : Number(match[2]),
      ext: match[3] as "ts" | "m4s",
    };
  }
  throw new HttpAnswer(404, "not an HLS URL");
}

function playlist(body: string): HlsHttpReply {
  return { status: 200, headers: playlistHeaders, body };
}

function media(data: Uint8Array, ext: string): HlsHttpReply {
  return { status: 200, headers: mediaHeaders[ext], body: data };
}
