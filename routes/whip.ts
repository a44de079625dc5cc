/**
 * WHIP (RFC 9725) and WHEP on the REST port: `POST <prefix>/<stream>` with an SDP offer
 * answers 201 with the SDP answer, `Location` (the session resource) and `ETag`; `PATCH` on
 * the resource adds trickled candidates (204) and refuses ICE restarts (422); `DELETE` ends
 * the session; `OPTIONS` answers CORS preflights with `Accept-Post`. REST auth (bearer
 * tokens) is checked before any route; the token also goes to the `connect` hook. The POST's
 * `?transport=tcp` (or `udp`) picks the media's transport (ICE-TCP: one TCP passive candidate
 * in the answer), `media.iceTransport` without it.
 */
import type { Context, Hono } from "hono";
import { BadRequestError, MediaServerError, NotFoundError, ParseError } from "../core/errors.ts";
import type { Services } from "../core/services.ts";
import type { WhipSession } from "../core/whip_registry.ts";
import type { IceTransport } from "../media/protocols/webrtc/ice_tcp.ts";
import { parseSdpFragment } from "../media/protocols/webrtc/sdpfrag.ts";
import { openWhipSession, UnprocessableOfferError } from "../signaling/whip_streams.ts";
import { readText } from "./http.ts";

/** Media type of offers and answers. */
const sdpType = "application/sdp";
/** Media type of trickle ICE fragments (RFC 8840). */
const sdpFragType = "application/trickle-ice-sdpfrag";
/** Response headers a browser client must be able to read. */
const exposedHeaders = "Location, ETag, Link, Accept-Post, Accept-Patch";
/** Request headers a browser client sends. */
const allowedHeaders = "Authorization, Content-Type, If-Match";
/** Seconds a browser may cache a preflight answer. */
const preflightMaxAgeSeconds = 86_400;
/** Info of a stream ended by DELETE. */
const deleteInfo = "Stopped by user";

const endpointMethods = ["POST", "GET", "HEAD", "OPTIONS"];
const resourceMethods = ["PATCH", "DELETE", "GET", "HEAD", "OPTIONS"];

/** The request's body has a media type the route does not take. */
class UnsupportedTypeError extends MediaServerError {
  constructor(wanted: string, got: string | undefined) {
    super(415, "unsupported media type", `Content-Type must be ${wanted}, got ${got ?? "(none)"}`);
  }
}

/** If-Match names another ICE session than the current one. */
class PreconditionFailedError extends MediaServerError {
  constructor() {
    super(412, "precondition failed", "If-Match does not name the session's current ETag");
  }
}

/** Adds the WHIP and WHEP routes of the configuration to the REST app. */
export function registerWhip(app: Hono, services: Services): void {
  const log = services.log.child({ component: "whip" });
  const { publishPath, playPath } = services.config.whip;
  for (const [prefix, kind] of [[publishPath, "publish"], [playPath, "play"]] as const) {
    app.all(`${prefix}/:name`, async (c) => {
      switch (c.req.method) {
        case "OPTIONS":
          return preflight(c, endpointMethods, { "Accept-Post": sdpType });
        case "GET":
        case "HEAD":
          // WHEP players probe a URL with HEAD; neither method has a body here.
          return c.body(null, 200, { "Content-Type": sdpType });
        case "POST": {
          if (!isType(c.req.header("Content-Type"), sdpType)) {
            throw new UnsupportedTypeError(sdpType, c.req.header("Content-Type"));
          }
          const sdp = await readText(c.req.raw, services.config.rest.maxBodyBytes);
          const name = c.req.param("name");
          const { session, answer } = await openWhipSession(services, {
            kind,
            name,
            sdp,
            transport: transportParam(c.req.query("transport")),
            token: bearerToken(c.req.header("Authorization")),
            origin: c.req.header("Origin") ?? "",
          }, log);
          log.info("session opened", { kind, name, mediaSessionId: session.stream.mediaSessionId });
          return c.body(answer, 201, {
            "Content-Type": sdpType,
            "Location": `${prefix}/${encodeURIComponent(name)}/${session.id}`,
            "ETag": session.etag,
            "Access-Control-Expose-Headers": exposedHeaders,
          });
        }
        default:
          return notAllowed(c, endpointMethods);
      }
    });
    app.all(`${prefix}/:name/:id`, async (c) => {
      if (c.req.method === "OPTIONS") {
        return preflight(c, resourceMethods, { "Accept-Patch": sdpFragType });
      }
      if (!resourceMethods.includes(c.req.method)) return notAllowed(c, resourceMethods);
      const session = services.whip.get(c.req.param("id"));
      if (!session || session.kind !== kind || session.urlName !== c.req.param("name")) {
        throw new NotFoundError(
          `no ${kind === "publish" ? "WHIP" : "WHEP"} session at ${c.req.path}`,
        );
      }
      switch (c.req.method) {
        case "DELETE":
          await session.stream.terminate(deleteInfo);
          services.whip.remove(session.id);
          return c.body(null, 200);
        case "PATCH":
          return await patch(c, session, services.config.rest.maxBodyBytes);
        default:
          return c.body(null, 200);
      }
    });
  }
}

/**
 * Trickle ICE: candidates of the client's current ICE session are added (204). A PATCH
 * without If-Match is taken (whip-whep's WHEP client never sends one); an ICE restart
 * (If-Match `*` or new credentials) is answered 422: the answer's candidates are final.
 */
async function patch(c: Context, session: WhipSession, maxBytes: number): Promise<Response> {
  if (!isType(c.req.header("Content-Type"), sdpFragType)) {
    throw new UnsupportedTypeError(sdpFragType, c.req.header("Content-Type"));
  }
  const ifMatch = c.req.header("If-Match");
  if (ifMatch !== undefined && ifMatch.trim() !== "*" && ifMatch.trim() !== session.etag) {
    throw new PreconditionFailedError();
  }
  const text = await readText(c.req.raw, maxBytes);
  let fragment;
  try {
    fragment = parseSdpFragment(text);
  } catch (err) {
    if (err instanceof ParseError) throw new BadRequestError("sdpfrag", err.message);
    throw err;
  }
  const restart = ifMatch?.trim() === "*" ||
    (fragment.ufrag !== undefined && fragment.ufrag !== session.clientUfrag);
  if (restart) throw new UnprocessableOfferError("ICE restarts are not supported");
  try {
    await session.stream.addRemoteCandidates(fragment.candidates);
  } catch (err) {
    if (err instanceof ParseError) throw new BadRequestError("sdpfrag", err.message);
    throw err;
  }
  return c.body(null, 204);
}

/** The answer to OPTIONS (a CORS preflight or a client's probe). */
function preflight(c: Context, methods: string[], extra: Record<string, string>): Response {
  return c.body(null, 200, {
    ...extra,
    "Allow": methods.join(", "),
    "Access-Control-Allow-Methods": methods.join(", "),
    "Access-Control-Allow-Headers": c.req.header("Access-Control-Request-Headers") ??
      allowedHeaders,
    "Access-Control-Expose-Headers": exposedHeaders,
    "Access-Control-Max-Age": String(preflightMaxAgeSeconds),
  });
}

function notAllowed(c: Context, methods: string[]): Response {
  return c.json(
    { error: "method not allowed", message: `${c.req.path} answers ${methods.join(", ")}` },
    405,
    { "Allow": methods.join(", ") },
  );
}

/** True when a Content-Type header names `type` (parameters aside). */
function isType(header: string | undefined, type: string): boolean {
  return header?.split(";")[0].trim().toLowerCase() === type;
}

/**
 * The `transport` query parameter of a POST: "udp" or "tcp" (any case), undefined without
 * one; anything else is a 400 naming it.
 */
function transportParam(value: string | undefined): IceTransport | undefined {
  if (value === undefined) return undefined;
  const lower = value.toLowerCase();
  if (lower === "udp" || lower === "tcp") return lower;
  throw new BadRequestError("transport", `transport must be udp or tcp, got ${value.slice(0, 20)}`);
}

/** The token of an `Authorization: Bearer` header. */
function bearerToken(header: string | undefined): string | undefined {
  const match = /^bearer\s+(\S+)\s*$/i.exec(header ?? "");
  return match?.[1];
}
