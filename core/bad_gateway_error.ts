/**
 * The upstream source of an operation (a camera, a remote server) failed or refused it.
 * Kept apart from core/errors.ts, which is shared; routes/http.ts maps it like any
 * MediaServerError.
 */
import { MediaServerError } from "./errors.ts";

/** The source could not be reached or refused the request: a 502 saying why. */
export class BadGatewayError extends MediaServerError {
  constructor(message: string, options?: ErrorOptions) {
    super(502, "bad gateway", message, options);
  }
}
