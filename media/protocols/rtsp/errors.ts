/**
 * Failures of an RTSP session with a server (a camera). Parse failures of its bytes are the
 * core ParseError/TruncatedError; these say what the server did or did not do.
 */

/** Base of the failures of an RTSP session. */
export class RtspError extends Error {
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** The server answered a request with a status other than 2xx. */
export class RtspStatusError extends RtspError {
  /** RTSP status code, e.g. 404. */
  readonly status: number;
  /** The request method that was refused. */
  readonly method: string;

  constructor(method: string, status: number, reason: string) {
    super(`${method} answered ${status} ${reason}`);
    this.method = method;
    this.status = status;
  }
}

/** The server could not be reached, or closed the connection. */
export class RtspConnectionError extends RtspError {}

/** The server did not answer (or send media) in time. */
export class RtspTimeoutError extends RtspError {}
