/**
 * An operation of the management API: its path, the zod schema of its body, the schema of
 * its answer and, once its capability is built, its handler. Group files declare their
 * operations with `operation()`; routes/http.ts serves them, routes/openapi.ts documents
 * them, and the contract test walks the same list.
 */
import { z } from "zod";
import { plainString } from "../core/records.ts";
import type { Services } from "../core/services.ts";

/** What a handler gets besides its body. */
export interface OperationContext {
  readonly services: Services;
}

/** One operation of the management API. */
export interface Operation<S extends z.ZodType = z.ZodType> {
  /** Path below /rest-api, e.g. "/stream/find". */
  readonly path: string;
  /** First segment of the path, e.g. "stream"; "pull/rtmp" for the RTMP pull group. */
  readonly group: string;
  /** One line saying what the operation does. */
  readonly summary: string;
  /** Schema of the JSON body; parameterless operations take an empty object. */
  readonly body: S;
  /** Schema of the JSON answer; null for operations that answer with an empty body. */
  readonly response: z.ZodType | null;
  /** Also answer GET (the Web SDK's REST helper calls find_all with GET). */
  readonly allowGet: boolean;
  /** Does the work; absent while the capability is not built, which answers 501. */
  readonly handle?: (body: z.output<S>, ctx: OperationContext) => unknown | Promise<unknown>;
}

/** Declares an operation; `group` is derived from the path, `allowGet` from find_all. */
export function operation<S extends z.ZodType>(
  def: Omit<Operation<S>, "group" | "allowGet"> & { group?: string },
): Operation<S> {
  const group = def.group ?? def.path.split("/")[1];
  return { ...def, group, allowGet: def.path.endsWith("/find_all") };
}

/** Body of operations without parameters: nothing, or an empty object. */
export const noParams = z.strictObject({});

export { plainString };

/** A required non-empty string without control characters. */
export const requiredString = plainString.min(1, "must not be empty");

/** A string URI with the given scheme, e.g. `uriWithScheme("mixer")` for mixer://name. */
export function uriWithScheme(...schemes: string[]): z.ZodString {
  const pattern = new RegExp(`^(${schemes.join("|")})://[^\\s]+$`);
  return plainString
    .regex(pattern, `must be a ${schemes.map((s) => s + "://").join(" or ")} URI`)
    .meta({ examples: [exampleUri(schemes[0])] });
}

/** Schemes whose URIs name a host the server would connect to. */
const networkSchemes = new Set(["rtsp", "rtsps", "rtmp", "rtmps", "ws", "wss", "srt"]);

/**
 * The documented example of a URI; network ones name a closed loopback port, so tests that
 * post the examples never send traffic (not even a DNS query) off the machine.
 */
function exampleUri(scheme: string): string {
  return networkSchemes.has(scheme)
    ? `${scheme}://127.0.0.1:1/live/example`
    : `${scheme}://example`;
}

/**
 * A find filter over a record: any subset of its fields, each compared for equality; an
 * unknown field is a 400 (a typo must not silently match everything).
 */
export function findFilter<T extends z.ZodRawShape, E extends z.ZodRawShape = Record<never, never>>(
  record: z.ZodObject<T>,
  extra?: E,
) {
  return z.strictObject({ ...record.partial().shape, ...(extra ?? {}) as E });
}
