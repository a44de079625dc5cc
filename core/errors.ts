/**
 * Typed errors of the domain. Routes map them to HTTP in one place (routes/http.ts); media
 * code throws them so the reason travels unchanged to the operator.
 */

/** Base of every error the server raises on purpose. */
export class MediaServerError extends Error {
  /** HTTP status the REST layer answers with. */
  readonly status: number;
  /** Short machine-readable error name, the `error` field of the JSON body. */
  readonly code: string;

  constructor(status: number, code: string, message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = new.target.name;
    this.status = status;
    this.code = code;
  }

  /** The JSON body of the REST answer. */
  toJSON(): Record<string, unknown> {
    return { error: this.code, message: this.message };
  }
}

/** Malformed input: the request (or wire data) names something wrong. */
export class BadRequestError extends MediaServerError {
  /** Dotted path of the offending field ("body" when the whole body is wrong). */
  readonly field: string;

  constructor(field: string, message: string, options?: ErrorOptions) {
    super(400, "bad request", message, options);
    this.field = field;
  }

  override toJSON(): Record<string, unknown> {
    return { error: this.code, field: this.field, message: this.message };
  }
}

/** The request is understood but refused by policy (a host not allowed, a foreign Host). */
export class ForbiddenError extends MediaServerError {
  /** Dotted path of the field that named the refused target, when a field did. */
  readonly field?: string;

  constructor(message: string, field?: string, options?: ErrorOptions) {
    super(403, "forbidden", message, options);
    this.field = field;
  }

  override toJSON(): Record<string, unknown> {
    return this.field === undefined
      ? { error: this.code, message: this.message }
      : { error: this.code, field: this.field, message: this.message };
  }
}

/** The target of an operation does not exist. */
export class NotFoundError extends MediaServerError {
  constructor(message: string, options?: ErrorOptions) {
    super(404, "not found", message, options);
  }
}

/** The entry to create exists already, or the target is in a state that forbids it. */
export class ConflictError extends MediaServerError {
  constructor(message: string, options?: ErrorOptions) {
    super(409, "conflict", message, options);
  }
}

/** The upstream source of an operation (a camera, a remote server) failed or refused it. */
export class BadGatewayError extends MediaServerError {
  constructor(message: string, options?: ErrorOptions) {
    super(502, "bad gateway", message, options);
  }
}

/** A cap of the server (connections, streams, jobs, disk space) is reached; try again later. */
export class ServiceUnavailableError extends MediaServerError {
  constructor(message: string, options?: ErrorOptions) {
    super(503, "service unavailable", message, options);
  }
}

/** The capability behind an operation is not built yet. */
export class NotImplementedError extends MediaServerError {
  /** The operation path, e.g. "/call/startup". */
  readonly operation: string;

  constructor(operation: string, message = "this operation is not built yet") {
    super(501, "not implemented", message);
    this.operation = operation;
  }

  override toJSON(): Record<string, unknown> {
    return { error: this.code, operation: this.operation, message: this.message };
  }
}

/** Wire data (a packet, a file, a message) could not be parsed. Never reaches a client as is. */
export class ParseError extends Error {
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** Wire data ended before a complete unit could be read; more bytes may complete it. */
export class TruncatedError extends ParseError {}
