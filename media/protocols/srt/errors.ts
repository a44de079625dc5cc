/**
 * Failures of SRT connections. Parse failures of wire bytes are the core ParseError; these say
 * what a peer did: refused the handshake, or did not answer.
 */

/** Base of the failures of an SRT connection. */
export class SrtError extends Error {
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** The listener refused the handshake; `reason` is the libsrt code (see RejectReason). */
export class SrtRejectedError extends SrtError {
  readonly reason: number;

  constructor(reason: number, message: string) {
    super(message);
    this.reason = reason;
  }
}

/** The peer did not answer the handshake in time. */
export class SrtTimeoutError extends SrtError {}
