/**
 * One SIP call of the user agent (RFC 3261 §13-§15): an outgoing INVITE with its provisional
 * answers, digest retry, CANCEL and the 2xx ACK; or an incoming INVITE the application rings,
 * answers or rejects. Once the dialog is confirmed: BYE both ways, re-INVITE (hold, session
 * refresh, 491 glare retry), INFO, REFER with its NOTIFY, and the minimal session timer of
 * RFC 4028.
 */
import { ConflictError } from "../../../core/errors.ts";
import type { Logger } from "../../../core/log.ts";
import { type SipAccount } from "./account.ts";
import { DigestSession } from "./authentication.ts";
import { SipDialog, uriOf } from "./dialog.ts";
import { SipTimeoutError } from "./errors.ts";
import { parseCSeq } from "./headers.ts";
import { type SipMessage, sipMessageText, type SipRequest, type SipResponse } from "./message.ts";
import { formatSessionExpires, parseSessionExpires, SessionTimer } from "./session_timer.ts";
import type { ClientTransaction, ServerTransaction, SipTransactions } from "./transaction.ts";
import type { SipPeer, SipTransportName } from "./transport.ts";
import { formatSipUri, type SipUri } from "./uri.ts";

/** Where a call stands. */
export type SipCallState =
  | "TRYING"
  | "RINGING"
  | "EARLY_MEDIA"
  | "ESTABLISHED"
  | "HOLD"
  | "ENDED";

/** Why and how a call ended. */
export interface SipCallEnd {
  by: "local" | "remote" | "timeout" | "error";
  /** SIP status, e.g. 486, 408, 487, or 200 for a BYE received. */
  status?: number;
  reason: string;
}

/** A SIP call, incoming or outgoing. */
export interface SipCall {
  readonly callId: string;
  readonly incoming: boolean;
  readonly state: SipCallState;
  /** User part of the caller (or the full URI when it has no user). */
  readonly caller: string;
  /** User part of the callee (or the full URI when it has no user). */
  readonly callee: string;
  /** The account the call belongs to: the caller's, or the registered one called. */
  readonly account?: SipAccount;
  /** The latest SDP of the far end (offer for incoming, answer for outgoing, re-INVITEs). */
  readonly remoteSdp?: string;
  /** Last SIP status seen or sent as a final/provisional answer (180, 183, 200, 486...). */
  readonly lastStatus?: number;
  /** Text of the last SIP message received in this call. */
  readonly lastMessageText?: string;
  /** 1xx received (183 with SDP: early media). */
  onProgress?: (status: number, reason: string, sdp?: string) => void;
  /** Outgoing: 200 received (ACK sent); incoming: ACK received. */
  onEstablished?: (sdp: string) => void;
  /** Called exactly once. */
  onEnded?: (end: SipCallEnd) => void;
  /** INFO received in the dialog (answered 200 before this is called). */
  onInfo?: (contentType: string, body: string) => void;
  /** The far end's re-INVITE (or UPDATE) offer; returns our answer; a throw answers 488. */
  onReinvite?: (sdp: string) => string | Promise<string>;
  /** REFER received: true answers 202 (NOTIFY 100 then 200 follow), false 603. */
  onRefer?: (target: string) => boolean;
  /** Status of the far end's NOTIFY (message/sipfrag) about our REFER. */
  onReferStatus?: (status: number) => void;
  /** Incoming: 180 Ringing. */
  ring(): Promise<void>;
  /** Incoming: 200 with SDP; resolves when ACKed, rejects on ACK timeout (then BYE). */
  answer(sdp: string): Promise<void>;
  /** Incoming: a 3xx-6xx answer. */
  reject(status: number, reason: string): Promise<void>;
  /** CANCEL before a final answer (decline an incoming one), BYE once established. */
  hangup(): Promise<void>;
  /** re-INVITE with a new offer; resolves the answer SDP. */
  reinvite(sdp: string): Promise<string>;
  /** INFO in the dialog; resolves the final status. */
  info(contentType: string, body: string): Promise<number>;
  /** REFER (blind transfer); resolves the final status (202). */
  refer(target: string): Promise<number>;
}

/** A request in a dialog answered with a status that is not 2xx. */
export class SipStatusError extends Error {
  readonly status: number;
  readonly reason: string;
  constructor(status: number, reason: string) {
    super(`SIP ${status} ${reason}`);
    this.name = new.target.name;
    this.status = status;
    this.reason = reason;
  }
}

/** Methods we accept (the Allow header, RFC 3261 §20.5). */
export const allowedMethods = "INVITE, ACK, CANCEL, BYE, OPTIONS, INFO, REFER, NOTIFY, UPDATE";
/** Extensions we support (RFC 4028 session timers). */
export const supportedExtensions = "timer";
/** Most 491 retries of one re-INVITE. */
const maxGlareRetries = 3;
/** Content type of SDP bodies. */
const sdpType = "application/sdp";

/** What a call needs of its user agent. */
export interface CallContext {
  readonly transactions: SipTransactions;
  readonly log: Logger;
  /** Headers of every request and answer of ours (User-Agent). */
  readonly commonHeaders: [string, string][];
  /** Our Contact for `user` (and the account's contact params) over `transport`. */
  contact(account: SipAccount | undefined, user: string | undefined, t: SipTransportName): string;
  /** Where a request to `uri` goes for `account` (its outbound proxy, or the URI). */
  nextHop(account: SipAccount | undefined, uri: SipUri, t: SipTransportName): SipPeer;
  /** The call ended: it leaves the user agent's table. */
  ended(call: SipCallSession): void;
}

/** The SDP body of a message, undefined when it has none. */
function sdpOf(message: SipMessage): string | undefined {
  const type = message.headers.get("Content-Type")?.toLowerCase() ?? "";
  if (message.body.length === 0 || !type.startsWith(sdpType)) return undefined;
  return new TextDecoder().decode(message.body);
}

/** Whether an SDP offer puts the far end on hold (we only send, or nothing flows). */
function holds(sdp: string): boolean {
  return /^a=(sendonly|inactive)\s*$/m.test(sdp);
}

/** A copy of a request to send again with credentials: next CSeq, no Via of the earlier try. */
function retried(request: SipRequest, seq: number, auth: [string, string][]): SipRequest {
  const headers = request.headers.clone();
  headers.delete("Via");
  headers.delete("Authorization");
  headers.delete("Proxy-Authorization");
  headers.set("CSeq", `${seq} ${request.method}`);
  for (const [name, value] of auth) headers.add(name, value);
  return { ...request, headers };
}

/** A random delay in [fromMs, toMs). */
const randomMs = (fromMs: number, toMs: number) => fromMs + Math.random() * (toMs - fromMs);

/** One call; the user agent creates it with `outgoing()` or `incoming()`. */
export class SipCallSession implements SipCall {
  readonly callId: string;
  readonly incoming: boolean;
  readonly caller: string;
  readonly callee: string;
  readonly account?: SipAccount;
  remoteSdp?: string;
  lastStatus?: number;
  lastMessageText?: string;
  onProgress?: (status: number, reason: string, sdp?: string) => void;
  onEstablished?: (sdp: string) => void;
  onEnded?: (end: SipCallEnd) => void;
  onInfo?: (contentType: string, body: string) => void;
  onReinvite?: (sdp: string) => string | Promise<string>;
  onRefer?: (target: string) => boolean;
  onReferStatus?: (status: number) => void;

  readonly #ctx: CallContext;
  readonly #log: Logger;
  readonly #transport: SipTransportName;
  readonly #contactUser?: string;
  readonly #auth: DigestSession;
  readonly #abort = new AbortController();
  readonly #timer: SessionTimer;
  readonly #endedSignal: Promise<void>;
  #resolveEnded!: () => void;
  #state: SipCallState = "TRYING";
  #ended = false;
  #dialog?: SipDialog;
  #localSdp?: string;
  /** Our re-INVITE is in flight. */
  #reinviting = false;
  /** Our 2xx to an INVITE waits for its ACK. */
  #answering?: {
    seq: number;
    tx: ServerTransaction;
    resolve: () => void;
    reject: (e: Error) => void;
    /** Settles (never rejects) with the ACK or its timeout. */
    settled: Promise<void>;
  };
  // Outgoing.
  #inviteTx?: ClientTransaction;
  #provisional = false;
  #cancelling = false;
  #lastAck?: { seq: number; remoteTag: string; ack: SipRequest; to: SipPeer };
  // Incoming.
  #serverTx?: ServerTransaction;
  #finalSent = false;

  private constructor(o: {
    ctx: CallContext;
    callId: string;
    incoming: boolean;
    caller: string;
    callee: string;
    account?: SipAccount;
    transport: SipTransportName;
    contactUser?: string;
  }) {
    this.#ctx = o.ctx;
    this.callId = o.callId;
    this.incoming = o.incoming;
    this.caller = o.caller;
    this.callee = o.callee;
    this.account = o.account;
    this.#transport = o.transport;
    this.#contactUser = o.contactUser;
    this.#log = o.ctx.log.child({ sipCallId: o.callId });
    this.#auth = new DigestSession(
      o.account?.password === undefined ? undefined : {
        user: o.account.authenticationName || o.account.login,
        password: o.account.password,
      },
    );
    this.#timer = new SessionTimer(() => this.#refreshSession(), () => this.#sessionExpired());
    this.#endedSignal = new Promise((resolve) => this.#resolveEnded = resolve);
  }

  /** Sends `invite` (a complete out-of-dialog INVITE) to `to` and follows it. */
  static outgoing(
    ctx: CallContext,
    o: {
      invite: SipRequest;
      to: SipPeer;
      account: SipAccount;
      caller: string;
      callee: string;
      sdp: string;
    },
  ): SipCallSession {
    const call = new SipCallSession({
      ctx,
      callId: o.invite.headers.get("Call-ID")!,
      incoming: false,
      caller: o.caller,
      callee: o.callee,
      account: o.account,
      transport: o.to.transport,
      contactUser: o.account.login,
    });
    call.#localSdp = o.sdp;
    call.#dial(o.invite, o.to).catch((err) => {
      call.#log.error("SIP call failed", { err });
      call.#end({ by: "error", reason: String(err) });
    });
    return call;
  }

  /**
   * A call for an INVITE received out of any dialog; the dialog (with our new tag) is early
   * until the application answers. A ParseError when the INVITE lacks what a dialog needs.
   */
  static incoming(
    ctx: CallContext,
    o: {
      request: SipRequest;
      tx: ServerTransaction;
      from: SipPeer;
      localTag: string;
      account?: SipAccount;
      caller: string;
      callee: string;
      contactUser?: string;
    },
  ): SipCallSession {
    const dialog = SipDialog.forUas(o.request, o.localTag);
    const call = new SipCallSession({
      ctx,
      callId: dialog.callId,
      incoming: true,
      caller: o.caller,
      callee: o.callee,
      account: o.account,
      transport: o.from.transport,
      contactUser: o.contactUser,
    });
    call.#dialog = dialog;
    call.#serverTx = o.tx;
    call.#received(o.request);
    call.remoteSdp = sdpOf(o.request);
    o.tx.onCancel = () => {
      call.#finalSent = true;
      call.#end({ by: "remote", status: 487, reason: "Request Terminated" });
    };
    return call;
  }

  get state(): SipCallState {
    return this.#state;
  }

  /** Resolves once the call ended. */
  get ended(): Promise<void> {
    return this.#endedSignal;
  }

  // ---- incoming answers ----

  async ring(): Promise<void> {
    const tx = this.#pendingInvite();
    await tx.respond(180, "Ringing", {
      toTag: this.#dialog!.localTag,
      headers: this.#answerHeaders(),
    });
    this.lastStatus = 180;
    if (this.#state === "TRYING") this.#state = "RINGING";
  }

  async answer(sdp: string): Promise<void> {
    const tx = this.#pendingInvite();
    const dialog = this.#dialog!;
    this.#finalSent = true;
    this.#localSdp = sdp;
    const timer = this.#sessionTimerAnswer(tx.request);
    const acked = this.#awaitAck(dialog.remoteSeq!, tx);
    await tx.respond(200, "OK", {
      toTag: dialog.localTag,
      headers: [...this.#answerHeaders(), ...timer.headers],
      body: new TextEncoder().encode(sdp),
      contentType: sdpType,
    });
    this.lastStatus = 200;
    try {
      await acked;
    } catch (err) {
      if (err instanceof SipTimeoutError) {
        this.#bye({ by: "timeout", status: 408, reason: "ACK Timeout" });
      }
      throw err;
    }
    this.#state = "ESTABLISHED";
    timer.start();
    this.onEstablished?.(this.remoteSdp ?? "");
  }

  async reject(status: number, reason: string): Promise<void> {
    if (!Number.isInteger(status) || status < 300 || status > 699) {
      throw new RangeError(`a SIP rejection is 300-699, not ${status}`);
    }
    const tx = this.#pendingInvite();
    this.#finalSent = true;
    try {
      await tx.respond(status, reason, { toTag: this.#dialog!.localTag });
    } finally {
      this.lastStatus = status;
      this.#end({ by: "local", status, reason });
    }
  }

  #pendingInvite(): ServerTransaction {
    if (!this.incoming || !this.#serverTx) throw new ConflictError("not an incoming call");
    if (this.#finalSent || this.#ended) throw new ConflictError("the call was answered already");
    return this.#serverTx;
  }

  /** Contact and capabilities of our answers to the INVITE. */
  #answerHeaders(): [string, string][] {
    return [
      ["Contact", this.#contact()],
      ["Allow", allowedMethods],
      ["Supported", supportedExtensions],
      ...this.#ctx.commonHeaders,
    ];
  }

  #contact(): string {
    return this.#ctx.contact(this.account, this.#contactUser, this.#transport);
  }

  /**
   * The session timer of our 2xx to an INVITE (or UPDATE) that asked for one: the far end
   * refreshes unless it named us (RFC 4028 §9).
   */
  #sessionTimerAnswer(request: SipRequest): { headers: [string, string][]; start: () => void } {
    const asked = parseSessionExpires(
      request.headers.get("Session-Expires") ?? request.headers.get("x"),
    );
    if (!asked) return { headers: [], start: () => this.#timer.stop() };
    const refresher = asked.refresher ?? "uac";
    const headers: [string, string][] = [
      ["Session-Expires", formatSessionExpires({ seconds: asked.seconds, refresher })],
    ];
    const supported = request.headers.getAll("Supported").map((s) => s.trim().toLowerCase());
    if (supported.includes("timer")) headers.push(["Require", "timer"]);
    return { headers, start: () => this.#timer.start(asked.seconds, refresher === "uas") };
  }

  /** The session timer set by a 2xx answering our INVITE: refresher=uac means us. */
  #sessionTimerFrom2xx(response: SipResponse): void {
    const granted = parseSessionExpires(
      response.headers.get("Session-Expires") ?? response.headers.get("x"),
    );
    if (!granted) this.#timer.stop();
    else this.#timer.start(granted.seconds, (granted.refresher ?? "uac") === "uac");
  }

  #awaitAck(seq: number, tx: ServerTransaction): Promise<void> {
    let settle!: { resolve: () => void; reject: (e: Error) => void };
    const acked = new Promise<void>((resolve, reject) => settle = { resolve, reject });
    this.#answering = { seq, tx, ...settle, settled: acked.then(() => {}, () => {}) };
    tx.onAckTimeout = () => {
      const pending = this.#answering;
      if (pending?.tx !== tx) return;
      this.#answering = undefined;
      pending.reject(new SipTimeoutError("no ACK for our 2xx"));
    };
    return acked;
  }

  // ---- outgoing ----

  async #dial(invite: SipRequest, to: SipPeer): Promise<void> {
    let request = invite;
    for (;;) {
      this.#provisional = false;
      const tx = this.#ctx.transactions.request(request, to, (r) => this.#provisionalReceived(r));
      this.#inviteTx = tx;
      let response: SipResponse;
      try {
        response = await tx.response;
      } catch (err) {
        if (err instanceof SipTimeoutError) {
          this.#end({
            by: this.#cancelling ? "local" : "timeout",
            status: 408,
            reason: "Request Timeout",
          });
        } else {
          // RFC 3261 §8.1.3.1: a transport failure reads as 503 Service Unavailable.
          this.#end({ by: "error", status: 503, reason: (err as Error).message });
        }
        return;
      }
      this.#received(response);
      if (response.status < 300) {
        await this.#answered(response);
        return;
      }
      if (
        (response.status === 401 || response.status === 407) && !this.#cancelling &&
        this.#auth.accept(response)
      ) {
        const seq = parseCSeq(request.headers.get("CSeq")!).seq + 1;
        request = retried(request, seq, this.#auth.headers("INVITE", request.uri));
        continue;
      }
      this.#end({
        by: this.#cancelling ? "local" : "remote",
        status: response.status,
        reason: response.reason,
      });
      return;
    }
  }

  #provisionalReceived(response: SipResponse): void {
    this.#provisional = true;
    if (this.#ended || this.#cancelling) return;
    this.#received(response);
    if (response.status === 100) return;
    const sdp = sdpOf(response);
    if (sdp !== undefined) {
      this.remoteSdp = sdp;
      this.#state = "EARLY_MEDIA";
    } else if (this.#state === "TRYING") {
      this.#state = "RINGING";
    }
    this.onProgress?.(response.status, response.reason, sdp);
  }

  /** A 2xx to our INVITE: the dialog is confirmed by our ACK (or ended by a BYE after it). */
  async #answered(response: SipResponse): Promise<void> {
    const dialog = SipDialog.forUac(response);
    this.#dialog = dialog;
    const seq = dialog.localSeq;
    await this.#sendAck(dialog, seq);
    if (this.#ended || this.#cancelling) {
      // Our CANCEL lost the race with the 2xx (RFC 3261 §9.1): the call is ACKed, then ended.
      this.#bye({ by: "local", status: response.status, reason: "Cancelled" });
      return;
    }
    this.remoteSdp = sdpOf(response) ?? this.remoteSdp;
    this.#state = "ESTABLISHED";
    this.#sessionTimerFrom2xx(response);
    this.onEstablished?.(this.remoteSdp ?? "");
  }

  async #sendAck(dialog: SipDialog, seq: number): Promise<void> {
    const ack = dialog.ack(seq, this.#ctx.commonHeaders);
    const to = this.#peer(dialog);
    this.#lastAck = { seq, remoteTag: dialog.remoteTag, ack, to };
    await this.#ctx.transactions.sendAck(retried(ack, seq, []), to).catch((err) =>
      this.#log.warn("SIP ACK not sent", { err })
    );
  }

  /**
   * A 2xx to our INVITE after its transaction ended: our ACK was lost, so it goes again; a 2xx
   * of another dialog (a fork) is ACKed and ended with BYE. False when it is none of ours.
   */
  stray2xx(response: SipResponse): boolean {
    if (this.incoming) return false;
    const seq = parseCSeq(response.headers.get("CSeq")!).seq;
    const last = this.#lastAck;
    const dialog = SipDialog.forUac(response);
    if (last && last.seq === seq && last.remoteTag === dialog.remoteTag) {
      this.#ctx.transactions.sendAck(retried(last.ack, seq, []), last.to).catch(() => {});
      return true;
    }
    return false;
  }

  // ---- both ----

  async hangup(): Promise<void> {
    if (this.#ended) return;
    if (this.incoming) {
      if (!this.#finalSent) return await this.reject(603, "Decline");
      if (this.#answering && this.#state !== "ESTABLISHED") {
        // RFC 3261 §15: no BYE before our 2xx is ACKed (or its wait timed out).
        await this.#answering.settled;
        if (this.#ended) return;
      }
      await this.#bye({ by: "local", reason: "BYE" });
      return;
    }
    if (this.#dialog) {
      await this.#bye({ by: "local", reason: "BYE" });
      return;
    }
    this.#cancelling = true;
    const tx = this.#inviteTx!;
    this.#ctx.transactions.cancel(tx).catch((err) =>
      this.#log.debug("SIP CANCEL not sent", { err: String(err) })
    );
    if (!this.#provisional) {
      // Nothing to cancel until a provisional answer comes (RFC 3261 §9.1): the call is over
      // for us now; a late 2xx is ACKed and ended with BYE.
      this.#end({ by: "local", reason: "Cancelled" });
      return;
    }
    await this.#endedSignal;
  }

  async reinvite(sdp: string): Promise<string> {
    this.#established();
    // An offer of the far end still waiting for its ACK completes first (RFC 3261 §14.1).
    if (this.#answering) await this.#answering.settled;
    this.#established();
    if (this.#reinviting) throw new ConflictError("an offer is already pending in this call");
    this.#reinviting = true;
    try {
      for (let attempt = 0;; attempt++) {
        const headers: [string, string][] = [
          ["Contact", this.#contact()],
          ["Allow", allowedMethods],
          ["Supported", supportedExtensions],
          ...this.#ctx.commonHeaders,
        ];
        if (this.#timer.active) {
          headers.push([
            "Session-Expires",
            formatSessionExpires({
              seconds: this.#timer.seconds,
              refresher: "uac",
            }),
          ]);
        }
        const response = await this.#inDialog("INVITE", headers, sdp, sdpType);
        if (response.status < 300) {
          const dialog = this.#dialog!;
          dialog.refreshTarget(response);
          await this.#sendAck(dialog, parseCSeq(response.headers.get("CSeq")!).seq);
          this.#localSdp = sdp;
          this.remoteSdp = sdpOf(response) ?? this.remoteSdp;
          if (!this.#ended) this.#state = holds(sdp) ? "HOLD" : "ESTABLISHED";
          this.#sessionTimerFrom2xx(response);
          return this.remoteSdp ?? "";
        }
        if (response.status === 491 && attempt < maxGlareRetries) {
          // RFC 3261 §14.1: the owner of the Call-ID (the caller) waits 2.1-4 s, the other 0-2 s.
          await this.#sleep(this.incoming ? randomMs(0, 2000) : randomMs(2100, 4000));
          this.#established();
          continue;
        }
        throw new SipStatusError(response.status, response.reason);
      }
    } finally {
      this.#reinviting = false;
    }
  }

  async info(contentType: string, body: string): Promise<number> {
    this.#established();
    return await this.#status(
      this.#inDialog("INFO", this.#ctx.commonHeaders, body, contentType),
    );
  }

  async refer(target: string): Promise<number> {
    this.#established();
    const uri = /^sips?:/i.test(target) ? target : `sip:${target}`;
    uriOf(uri); // a ParseError for a bad target, before anything is sent
    const local = uriOf(this.#dialog!.localParty);
    return await this.#status(this.#inDialog("REFER", [
      ["Refer-To", `<${uri}>`],
      ["Referred-By", `<${formatSipUri({ ...local, params: new Map() })}>`],
      ["Contact", this.#contact()],
      ...this.#ctx.commonHeaders,
    ]));
  }

  /** The final status of a request in the dialog; a timeout reads as 408. */
  async #status(response: Promise<SipResponse>): Promise<number> {
    try {
      return (await response).status;
    } catch (err) {
      if (err instanceof SipTimeoutError) return 408;
      throw err;
    }
  }

  #established(): void {
    if (this.#ended || !this.#dialog || (this.#state !== "ESTABLISHED" && this.#state !== "HOLD")) {
      throw new ConflictError(`the call is ${this.#state}, not established`);
    }
  }

  /**
   * Sends a request in the dialog, answering one digest challenge. A 481 or 408 (or no
   * answer) ends the call (RFC 3261 §12.2.1.2).
   */
  async #inDialog(
    method: string,
    headers: [string, string][],
    body?: string,
    contentType?: string,
  ): Promise<SipResponse> {
    let response: SipResponse;
    try {
      response = await this.#send(this.#dialog!.request(method, headers, body, contentType));
    } catch (err) {
      if (err instanceof SipTimeoutError) {
        this.#end({ by: "timeout", status: 408, reason: `no answer to ${method}` });
      }
      throw err;
    }
    if (response.status === 481 || response.status === 408) {
      if (response.status === 408) this.#bye({ by: "error", status: 408, reason: response.reason });
      else this.#end({ by: "error", status: 481, reason: response.reason });
    }
    return response;
  }

  async #send(request: SipRequest): Promise<SipResponse> {
    const dialog = this.#dialog!;
    const to = this.#peer(dialog);
    let current = request;
    for (let attempt = 0;; attempt++) {
      const response = await this.#ctx.transactions.request(current, to).response;
      this.#received(response);
      if (
        attempt === 0 && (response.status === 401 || response.status === 407) &&
        this.#auth.accept(response)
      ) {
        dialog.localSeq += 1;
        current = retried(
          current,
          dialog.localSeq,
          this.#auth.headers(current.method, current.uri),
        );
        continue;
      }
      return response;
    }
  }

  /** The next hop of requests in the dialog. */
  #peer(dialog: SipDialog): SipPeer {
    return this.#ctx.nextHop(this.account, dialog.route().nextHop, this.#transport);
  }

  /** Ends the call and sends BYE (its answer does not matter to the call any more). */
  #bye(end: SipCallEnd): Promise<void> {
    const dialog = this.#dialog;
    this.#end(end);
    if (!dialog) return Promise.resolve();
    const bye = dialog.request("BYE", this.#ctx.commonHeaders);
    return this.#send(bye).then(
      () => {},
      (err) => this.#log.debug("SIP BYE unanswered", { err: String(err) }),
    );
  }

  #refreshSession(): void {
    if (this.#ended) return;
    if (this.#reinviting || this.#answering || !this.#localSdp) {
      this.#timer.start(this.#timer.seconds, true);
      return;
    }
    this.reinvite(this.#localSdp).catch((err) =>
      this.#log.warn("SIP session refresh failed", { err: String(err) })
    );
  }

  #sessionExpired(): void {
    if (this.#ended) return;
    this.#log.info("SIP session expired without refresh");
    this.#bye({ by: "timeout", reason: "Session Expired" });
  }

  #sleep(ms: number): Promise<void> {
    return new Promise((resolve, reject) => {
      const signal = this.#abort.signal;
      if (signal.aborted) return reject(new ConflictError("the call ended"));
      const timer = setTimeout(() => {
        signal.removeEventListener("abort", stop);
        resolve();
      }, ms);
      const stop = () => {
        clearTimeout(timer);
        reject(new ConflictError("the call ended"));
      };
      signal.addEventListener("abort", stop, { once: true });
    });
  }

  #received(message: SipMessage): void {
    this.lastMessageText = sipMessageText(message);
    if (message.kind === "response") this.lastStatus = message.status;
  }

  #end(end: SipCallEnd): void {
    if (this.#ended) return;
    this.#ended = true;
    this.#state = "ENDED";
    this.#timer.stop();
    this.#abort.abort();
    const pending = this.#answering;
    this.#answering = undefined;
    pending?.reject(new ConflictError(`the call ended: ${end.reason}`));
    this.#ctx.ended(this);
    this.#resolveEnded();
    this.#log.info("SIP call ended", { ...end });
    try {
      this.onEnded?.(end);
    } catch (err) {
      this.#log.error("SIP onEnded handler failed", { err });
    }
  }

  // ---- requests of the far end in the dialog ----

  /** Whether a request received belongs to this call's dialog. */
  matches(request: SipRequest): boolean {
    return this.#dialog?.matches(request) ?? false;
  }

  /** A request of the far end in our dialog (the user agent checked `matches`). */
  async handleRequest(request: SipRequest, tx: ServerTransaction): Promise<void> {
    this.#received(request);
    const dialog = this.#dialog!;
    if (request.method === "ACK") return this.#ackReceived(request);
    if (!dialog.acceptRemoteSeq(request)) {
      return await tx.respond(500, "Server Internal Error", { headers: [["Retry-After", "1"]] });
    }
    switch (request.method) {
      case "BYE":
        await tx.respond(200, "OK", { headers: this.#ctx.commonHeaders });
        if (this.incoming && !this.#finalSent) {
          this.#finalSent = true;
          await this.#serverTx!.respond(487, "Request Terminated").catch(() => {});
        }
        this.#end({ by: "remote", status: 200, reason: "BYE" });
        return;
      case "INVITE":
      case "UPDATE":
        return await this.#offerReceived(request, tx);
      case "INFO": {
        await tx.respond(200, "OK", { headers: this.#ctx.commonHeaders });
        const type = request.headers.get("Content-Type") ?? "";
        this.onInfo?.(type, new TextDecoder().decode(request.body));
        return;
      }
      case "REFER":
        return await this.#referReceived(request, tx);
      case "NOTIFY": {
        await tx.respond(200, "OK", { headers: this.#ctx.commonHeaders });
        const frag = /^SIP\/2\.0\s+(\d{3})/.exec(new TextDecoder().decode(request.body));
        if (/^\s*refer\b/i.test(request.headers.get("Event") ?? "") && frag) {
          this.onReferStatus?.(Number(frag[1]));
        }
        return;
      }
      case "OPTIONS":
        return await tx.respond(200, "OK", {
          headers: [["Allow", allowedMethods], ["Accept", sdpType], ...this.#ctx.commonHeaders],
        });
      default:
        return await tx.respond(405, "Method Not Allowed", {
          headers: [["Allow", allowedMethods]],
        });
    }
  }

  #ackReceived(request: SipRequest): void {
    const pending = this.#answering;
    if (!pending) return;
    if (parseCSeq(request.headers.get("CSeq")!).seq !== pending.seq) return;
    this.#answering = undefined;
    pending.tx.acknowledged();
    // An offer we made in a 2xx (the far end sent none) is answered in the ACK.
    this.remoteSdp = sdpOf(request) ?? this.remoteSdp;
    pending.resolve();
  }

  /** A re-INVITE or UPDATE: a session refresh, maybe with a new offer. */
  async #offerReceived(request: SipRequest, tx: ServerTransaction): Promise<void> {
    const invite = request.method === "INVITE";
    if (invite && this.#state !== "ESTABLISHED" && this.#state !== "HOLD") {
      return await tx.respond(491, "Request Pending");
    }
    if (this.#reinviting) return await tx.respond(491, "Request Pending");
    if (this.#answering) {
      // RFC 3261 §14.2: their earlier offer is still unacknowledged.
      return await tx.respond(500, "Server Internal Error", {
        headers: [["Retry-After", `${Math.floor(randomMs(0, 10))}`]],
      });
    }
    this.#dialog!.refreshTarget(request);
    const offer = sdpOf(request);
    let answer: string | undefined;
    if (offer !== undefined) {
      try {
        answer = this.onReinvite ? await this.onReinvite(offer) : this.#localSdp;
      } catch (err) {
        this.#log.info("SIP re-INVITE offer refused", { err: String(err) });
        return await tx.respond(488, "Not Acceptable Here", { headers: this.#ctx.commonHeaders });
      }
      if (this.#ended) return await tx.respond(481, "Call/Transaction Does Not Exist");
      this.remoteSdp = offer;
    } else if (invite) {
      answer = this.#localSdp; // an offer of ours in the 2xx, the answer in the ACK
    }
    const timer = this.#sessionTimerAnswer(request);
    const acked = invite ? this.#awaitAck(this.#dialog!.remoteSeq!, tx) : undefined;
    const body = answer === undefined ? undefined : new TextEncoder().encode(answer);
    await tx.respond(200, "OK", {
      headers: [
        ["Contact", this.#contact()],
        ["Allow", allowedMethods],
        ["Supported", supportedExtensions],
        ...this.#ctx.commonHeaders,
        ...timer.headers,
      ],
      ...(body ? { body, contentType: sdpType } : {}),
    });
    if (answer !== undefined) this.#localSdp = answer;
    timer.start();
    if (!acked) return;
    try {
      await acked;
    } catch (err) {
      if (err instanceof SipTimeoutError) {
        this.#bye({ by: "timeout", status: 408, reason: "ACK Timeout" });
      }
    }
  }

  async #referReceived(request: SipRequest, tx: ServerTransaction): Promise<void> {
    const referTo = request.headers.get("Refer-To");
    let target: string;
    try {
      if (!referTo) throw new Error("no Refer-To");
      const uri = uriOf(referTo);
      target = formatSipUri({ ...uri, headers: new Map() });
    } catch {
      return await tx.respond(400, "Bad Refer-To");
    }
    let accepted = false;
    try {
      accepted = this.onRefer?.(target) ?? false;
    } catch (err) {
      this.#log.warn("SIP onRefer handler failed", { err });
    }
    if (!accepted) return await tx.respond(603, "Decline", { headers: this.#ctx.commonHeaders });
    await tx.respond(202, "Accepted", {
      headers: [["Contact", this.#contact()], ...this.#ctx.commonHeaders],
    });
    // RFC 3515 §2.4.4: the implicit subscription reports the transfer's progress.
    for (
      const [frag, state] of [
        ["SIP/2.0 100 Trying", "active;expires=60"],
        ["SIP/2.0 200 OK", "terminated;reason=noresource"],
      ]
    ) {
      if (this.#ended) return;
      try {
        await this.#inDialog(
          "NOTIFY",
          [
            ["Event", "refer"],
            ["Subscription-State", state],
            ["Contact", this.#contact()],
            ...this.#ctx.commonHeaders,
          ],
          `${frag}\r\n`,
          "message/sipfrag;version=2.0",
        );
      } catch (err) {
        this.#log.debug("SIP NOTIFY of REFER failed", { err: String(err) });
        return;
      }
    }
  }
}
