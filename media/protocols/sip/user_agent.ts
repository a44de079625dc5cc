/**
 * The SIP user agent (RFC 3261 §8, §12-§15) over the transaction layer: registers accounts,
 * places and receives calls, routes requests of the far end to their dialog, and answers the
 * rest (OPTIONS 200, unknown dialogs 481, methods we do not serve 405).
 */
import { BadRequestError, ConflictError, ParseError } from "../../../core/errors.ts";
import type { Logger } from "../../../core/log.ts";
import {
  accountTransport,
  accountUri,
  calleeUri,
  checkAccount,
  contactValue,
  nextHop,
  partyName,
  type SipAccount,
} from "./account.ts";
import { allowedMethods, type SipCall, SipCallSession, supportedExtensions } from "./call.ts";
import type { CallContext } from "./call.ts";
import { settledWithin } from "./deadline.ts";
import { maxForwards, SipDialog, sipRequest } from "./dialog.ts";
import { newCallId, newTag } from "./headers.ts";
import type { SipRequest, SipResponse } from "./message.ts";
import {
  type RegistrationContext,
  type SipRegistration,
  SipRegistrationSession,
  type SipRegistrationStatus,
} from "./registration.ts";
import { type ServerTransaction, SipTransactions, type TransactionTimers } from "./transaction.ts";
import { type SipPeer, SipTransport, type SipTransportName, tagOf } from "./transport.ts";
import { formatNameAddr, formatSipUri, parseNameAddr, parseSipUri, type SipUri } from "./uri.ts";

export type { SipAccount } from "./account.ts";
export type { SipCall, SipCallEnd, SipCallState } from "./call.ts";
export { SipStatusError } from "./call.ts";
export type { SipRegistration, SipRegistrationStatus } from "./registration.ts";

/** Options of SipUserAgent.start. */
export interface SipUserAgentOptions {
  /** Address bound (UDP and TCP). */
  hostname: string;
  /** Port bound, 0 for any free one. */
  port: number;
  /** Put in Via/Contact/From instead of hostname (a public or 0.0.0.0-bound address). */
  announcedAddress?: string;
  log: Logger;
  /** RFC 3261 T1/T2/T4 in ms (tests shorten them). */
  timers?: Partial<TransactionTimers>;
  /** User-Agent header. */
  userAgent?: string;
}

/** Longest close() waits for each BYE or un-REGISTER, in ms. */
export const closeWaitMs = 2_000;

/** The user agent: one SIP port, its registrations and calls. */
export class SipUserAgent {
  /** Port we are reachable at (UDP and TCP). */
  readonly port: number;
  /** Address we are reachable at (announced or bound). */
  readonly address: string;
  /**
   * An INVITE out of any dialog for any user at our address, or for a registered account's
   * login; the handler must ring(), answer() or reject() it. Without one: 480.
   */
  onIncomingCall?: (call: SipCall) => void;

  readonly #log: Logger;
  readonly #transport: SipTransport;
  readonly #transactions: SipTransactions;
  readonly #calls = new Map<string, SipCallSession>();
  readonly #registrations = new Set<SipRegistrationSession>();
  readonly #context: CallContext & RegistrationContext;
  #closing?: Promise<void>;

  private constructor(
    o: SipUserAgentOptions,
    log: Logger,
    transport: SipTransport,
    transactions: SipTransactions,
  ) {
    this.#log = log;
    this.#transport = transport;
    this.#transactions = transactions;
    this.port = transport.port;
    this.address = o.announcedAddress ?? transport.hostname;
    const commonHeaders: [string, string][] = o.userAgent ? [["User-Agent", o.userAgent]] : [];
    this.#context = {
      transactions,
      log,
      address: this.address,
      commonHeaders,
      contact: (account, user, t) =>
        contactValue(user, this.address, this.port, t, account?.contactParams),
      nextHop,
      ended: (call) => {
        if (this.#calls.get(call.callId) === call) this.#calls.delete(call.callId);
      },
      closed: (registration) => this.#registrations.delete(registration),
    };
    transactions.onRequest = (req, tx, from) => this.#onRequest(req, tx, from);
    transactions.onStray2xx = (res, from) => this.#onStray2xx(res, from);
  }

  /** Binds the SIP port (UDP and TCP) and starts serving. */
  static async start(o: SipUserAgentOptions): Promise<SipUserAgent> {
    const log = o.log.child({ component: "sip" });
    const transport = await SipTransport.open({
      hostname: o.hostname,
      port: o.port,
      log,
      advertisedHost: o.announcedAddress,
    });
    const transactions = new SipTransactions(transport, { log, timers: o.timers });
    return new SipUserAgent(o, log, transport, transactions);
  }

  /** Calls in progress by SIP Call-ID. */
  get calls(): ReadonlyMap<string, SipCall> {
    return this.#calls;
  }

  /**
   * Registers `account` (digest on 401/407), refreshing at about half the granted expiry and
   * retrying after failures with backoff; `onStatus` gets the first outcome and each change.
   * A BadRequestError names a bad account field.
   */
  register(account: SipAccount, onStatus: (s: SipRegistrationStatus) => void): SipRegistration {
    this.#open();
    checkAccount(account);
    const registration = new SipRegistrationSession(this.#context, account, onStatus);
    this.#registrations.add(registration);
    registration.start();
    return registration;
  }

  /**
   * An outgoing INVITE from `account` to `callee` (a user at the account's domain, or a full
   * sip: URI). A BadRequestError names a bad field; a Call-ID in use is a ConflictError.
   */
  invite(o: {
    account: SipAccount;
    callee: string;
    sdp: string;
    callId?: string;
    headers?: [string, string][];
  }): SipCall {
    this.#open();
    const { account } = o;
    checkAccount(account);
    const callee = calleeUri(account, o.callee);
    const callId = o.callId ?? newCallId(this.address);
    if (!/^[\x21-\x7e]+$/.test(callId)) {
      throw new BadRequestError("callId", "a SIP Call-ID is printable ASCII without spaces");
    }
    if (this.#calls.has(callId)) throw new ConflictError(`SIP Call-ID ${callId} is in use`);
    const transport = accountTransport(account);
    const to = nextHop(account, callee, transport);
    let invite: SipRequest;
    try {
      invite = sipRequest(
        "INVITE",
        formatSipUri(callee),
        [
          ["Max-Forwards", maxForwards],
          [
            "From",
            formatNameAddr({
              displayName: account.visibleName,
              uri: accountUri(account),
              params: new Map([["tag", newTag()]]),
            }),
          ],
          ["To", formatNameAddr({ uri: { ...callee, headers: new Map() }, params: new Map() })],
          ["Call-ID", callId],
          ["CSeq", "1 INVITE"],
          ["Contact", this.#context.contact(account, account.login, to.transport)],
          ["Allow", allowedMethods],
          ["Supported", supportedExtensions],
          ...this.#context.commonHeaders,
          ...(o.headers ?? []),
        ],
        o.sdp,
        "application/sdp",
      );
    } catch (err) {
      if (err instanceof ParseError) throw new BadRequestError("headers", err.message);
      throw err;
    }
    const call = SipCallSession.outgoing(this.#context, {
      invite,
      to,
      account,
      caller: account.login,
      callee: partyName(callee),
      sdp: o.sdp,
    });
    this.#calls.set(callId, call);
    return call;
  }

  /** Ends every call (BYE or CANCEL), unregisters every account, closes the port. */
  close(): Promise<void> {
    this.#closing ??= this.#close();
    return this.#closing;
  }

  async #close(): Promise<void> {
    await Promise.all([...this.#calls.values()].map((c) => settledWithin(c.hangup(), closeWaitMs)));
    await Promise.all(
      [...this.#registrations].map((r) => settledWithin(r.close(), closeWaitMs)),
    );
    this.#transactions.close();
    await this.#transport.close();
  }

  #open(): void {
    if (this.#closing) throw new ConflictError("the SIP user agent is closed");
  }

  #onRequest(req: SipRequest, tx: ServerTransaction, from: SipPeer): void {
    this.#route(req, tx, from).catch((err) => {
      this.#log.warn("SIP request not handled", { method: req.method, err: String(err) });
      if (req.method === "ACK") return;
      const status = err instanceof ParseError ? 400 : 500;
      tx.respond(status, status === 400 ? "Bad Request" : "Server Internal Error").catch(() => {});
    });
  }

  async #route(req: SipRequest, tx: ServerTransaction, from: SipPeer): Promise<void> {
    const call = this.#calls.get(req.headers.get("Call-ID") ?? "");
    if (req.method === "ACK") {
      if (call?.matches(req)) await call.handleRequest(req, tx);
      return;
    }
    if (tagOf(req.headers.get("To") ?? "") !== undefined) {
      if (call?.matches(req)) return await call.handleRequest(req, tx);
      return await tx.respond(481, "Call/Transaction Does Not Exist");
    }
    if (this.#closing) return await tx.respond(503, "Service Unavailable");
    switch (req.method) {
      case "INVITE":
        return await this.#incomingInvite(req, tx, from);
      case "OPTIONS":
        return await tx.respond(200, "OK", {
          headers: [
            ["Allow", allowedMethods],
            ["Accept", "application/sdp"],
            ["Supported", supportedExtensions],
            ...this.#context.commonHeaders,
          ],
        });
      case "CANCEL":
      case "BYE":
      case "INFO":
      case "REFER":
      case "NOTIFY":
      case "UPDATE":
      case "PRACK":
        // Requests that only make sense inside a dialog or transaction we do not have.
        return await tx.respond(481, "Call/Transaction Does Not Exist");
      default:
        return await tx.respond(405, "Method Not Allowed", {
          headers: [["Allow", allowedMethods]],
        });
    }
  }

  async #incomingInvite(req: SipRequest, tx: ServerTransaction, from: SipPeer): Promise<void> {
    const callId = req.headers.get("Call-ID") ?? "";
    if (this.#calls.has(callId)) return await tx.respond(482, "Loop Detected");
    let target: SipUri;
    try {
      target = parseSipUri(req.uri);
    } catch {
      return await tx.respond(416, "Unsupported URI Scheme");
    }
    const unsupported = req.headers.getAll("Require").map((r) => r.trim())
      .filter((r) => r.toLowerCase() !== "timer");
    if (unsupported.length > 0) {
      return await tx.respond(420, "Bad Extension", {
        headers: [["Unsupported", unsupported.join(", ")]],
      });
    }
    const account = [...this.#registrations].find((r) => r.account.login === target.user)
      ?.account;
    const ours = target.host === this.address || target.host === this.#transport.hostname;
    if (!account && !ours) return await tx.respond(404, "Not Found");
    if (!this.onIncomingCall) return await tx.respond(480, "Temporarily Unavailable");
    const call = SipCallSession.incoming(this.#context, {
      request: req,
      tx,
      from,
      localTag: newTag(),
      account,
      caller: partyName(parseNameAddr(req.headers.get("From") ?? "").uri),
      callee: partyName(parseNameAddr(req.headers.get("To") ?? "").uri),
      contactUser: target.user ?? account?.login,
    });
    this.#calls.set(callId, call);
    try {
      this.onIncomingCall(call);
    } catch (err) {
      this.#log.error("SIP onIncomingCall handler failed", { err });
      if (call.state !== "ENDED") await call.reject(500, "Server Internal Error").catch(() => {});
    }
  }

  /**
   * A 2xx to an INVITE of ours after its transaction ended: the call re-sends its ACK; a 2xx
   * nobody wants (its call ended, another fork) is ACKed and ended with BYE (§13.2.2.4).
   */
  #onStray2xx(res: SipResponse, from: SipPeer): void {
    try {
      const call = this.#calls.get(res.headers.get("Call-ID") ?? "");
      if (call?.stray2xx(res)) return;
      const dialog = SipDialog.forUac(res);
      const to = nextHop(undefined, dialog.route().nextHop, from.transport as SipTransportName);
      const common = this.#context.commonHeaders;
      this.#transactions.sendAck(dialog.ack(dialog.localSeq, common), to)
        .then(() => this.#transactions.request(dialog.request("BYE", common), to).response)
        .catch((err) => this.#log.debug("SIP stray 2xx not ended", { err: String(err) }));
    } catch (err) {
      this.#log.debug("SIP stray 2xx dropped", { err: String(err) });
    }
  }
}
