/**
 * Sentinel errors of the SIP stack beyond the core ParseError: a transaction that got no
 * answer in time (RFC 3261 §17 timers B/F/H), and a transport that could not carry a message.
 */

/** A SIP transaction timed out without a final answer (RFC 3261 §17.1.1.2 timer B, §17.1.2.2 timer F). */
export class SipTimeoutError extends Error {
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** A SIP message could not be sent or the connection carrying it failed (RFC 3261 §18.4). */
export class SipTransportError extends Error {
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = new.target.name;
  }
}
