/**
 * The stream id a caller sends (SRT access control, libsrt's docs/features/access-control.md):
 * `#!::r=live/cam1,m=publish,u=alice` with keys r (resource), m (mode: request, publish,
 * bidirectional), u (user), s (session), h (host), t (type); any other text is the resource
 * itself, and MediaMTX's `publish:<name>` / `read:<name>` name the mode too.
 */
import { ParseError } from "../../../core/errors.ts";

/** What a caller asks for. */
export type StreamIdMode = "request" | "publish" | "bidirectional";

/** A parsed stream id. */
export interface StreamId {
  /** The stream's name ("" when the caller sent none). */
  resource: string;
  /** What the caller wants to do; undefined when it did not say (the server decides). */
  mode?: StreamIdMode;
  user?: string;
  session?: string;
  host?: string;
  /** t=: stream, file or auth. */
  type?: string;
  /** Every key=value of an access control id, the ones above included. */
  params: Record<string, string>;
}

const accessControlPrefix = "#!::";
const modes: readonly StreamIdMode[] = ["request", "publish", "bidirectional"];

/** Reads a stream id; a malformed `#!::` list is a ParseError naming the bad part. */
export function parseStreamId(text: string): StreamId {
  if (!text.startsWith(accessControlPrefix)) {
    const legacy = /^(publish|read):(.+)$/.exec(text);
    if (legacy) {
      return {
        resource: legacy[2],
        mode: legacy[1] === "read" ? "request" : "publish",
        params: {},
      };
    }
    return { resource: text, params: {} };
  }
  const params: Record<string, string> = {};
  for (const pair of text.slice(accessControlPrefix.length).split(",")) {
    if (pair === "") continue;
    const eq = pair.indexOf("=");
    if (eq <= 0) throw new ParseError(`stream id part "${pair}" is not key=value`);
    params[pair.slice(0, eq)] = pair.slice(eq + 1);
  }
  const mode = params.m;
  if (mode !== undefined && !modes.includes(mode as StreamIdMode)) {
    throw new ParseError(`stream id mode "${mode}": request, publish or bidirectional`);
  }
  return {
    resource: params.r ?? "",
    mode: mode as StreamIdMode | undefined,
    user: params.u,
    session: params.s,
    host: params.h,
    type: params.t,
    params,
  };
}
