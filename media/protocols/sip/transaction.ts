/**
 * The SIP transaction layer (RFC 3261 §17, with the INVITE fixes of RFC 6026): client
 * transactions retransmit over UDP (timers A and E), time out (B and F), ACK a 3xx-6xx to an
 * INVITE themselves and absorb retransmitted answers; server transactions answer
 * retransmitted requests with the last response, retransmit a final answer to an INVITE
 * until its ACK (G, and the 2xx until the UA matched its ACK), answer a CANCEL, and let a
 * new request only through once.
 *
 * Matching: responses by the top Via's branch and the CSeq method (§17.1.3); requests by
 * branch, sent-by and method, an ACK to its INVITE's transaction and a CANCEL to its INVITE by
 * branch (§17.2.3). A request whose branch lacks the magic cookie (RFC 2543) is matched by
 * Call-ID, CSeq number, From tag and method instead.
 *
 * Timers D (absorbing retransmitted 3xx-6xx to an INVITE) and the 2xx's Accepted state last
 * 64*T1 (32 s with the default T1, as RFC 3261 and RFC 6026 ask); over TCP no message is
 * retransmitted and the absorbing states end at once, except that of a 2xx, which still
 * waits for its ACK.
 */
import type { Logger } from "../../../core/log.ts";
import { SipTimeoutError, SipTransportError } from "./errors.ts";
import { branchMagicCookie, newBranch, newTag, parseCSeq, parseVia } from "./headers.ts";
import { SipHeaders, type SipMessage, type SipRequest, type SipResponse } from "./message.ts";
import {
  buildResponse,
  responsePeer,
  type SipPeer,
  type SipTransport,
  tagOf,
  withVias,
} from "./transport.ts";

/** The base timers of RFC 3261 §17.1.1.1, in ms. */
export interface TransactionTimers {
  /** RTT estimate: first retransmission interval (500). */
  t1Ms: number;
  /** Longest retransmission interval of non-INVITE requests and INVITE answers (4000). */
  t2Ms: number;
  /** Longest a message stays in the network (5000). */
  t4Ms: number;
}

/** RFC 3261's values. */
export const defaultTransactionTimers: TransactionTimers = { t1Ms: 500, t2Ms: 4000, t4Ms: 5000 };

/**
 * Most server transactions held at once (each lives up to 64*T1 after its answer); a new
 * request beyond is answered "503 Service Unavailable" without a transaction, so a flood
 * cannot grow the table without bound.
 */
export const maxSipServerTransactions = 8192;
/** Retry-After of that 503, in seconds. */
const overloadRetryAfterS = 5;

/** How long a server INVITE transaction waits for the UA's first answer before "100 Trying". */
export const tryingDelayMs = 200;

/** A request sent and its final answer. */
export interface ClientTransaction {
  readonly request: SipRequest;
  readonly branch: string;
  /** The final response; rejects with SipTimeoutError or SipTransportError. */
  readonly response: Promise<SipResponse>;
}

/** Options of ServerTransaction.respond. */
export interface RespondOptions {
  /** Tag added to a To without one (one is made up for a non-100 answer when none is given). */
  toTag?: string;
  headers?: [string, string][];
  body?: Uint8Array;
  contentType?: string;
}

/** A request received and the way to answer it. */
export interface ServerTransaction {
  readonly request: SipRequest;
  readonly from: SipPeer;
  /**
   * Builds and sends a response copying Via(s), From, To (with the tag), Call-ID, CSeq, then
   * the extra headers and body (Record-Route and Contact are the UA's). Provisional answers,
   * then one final; a second final rejects. An INVITE's 2xx is retransmitted over UDP until
   * `acknowledged()` or 64*T1 (then onAckTimeout); its 3xx-6xx until the ACK comes.
   */
  respond(status: number, reason: string, o?: RespondOptions): Promise<void>;
  /** The UA matched the ACK of its 2xx: retransmissions stop. */
  acknowledged(): void;
  /** Called when no ACK came for an INVITE's 2xx within 64*T1. */
  onAckTimeout?: () => void;
  /**
   * Called after a matching CANCEL of this INVITE was answered 200 and, if it was still
   * unanswered, the INVITE "487 Request Terminated".
   */
  onCancel?: () => void;
}

type Timer = ReturnType<typeof setTimeout>;

/** Named timers of one transaction. */
class Timers {
  readonly #timers = new Map<string, Timer>();

  set(name: string, ms: number, fire: () => void): void {
    this.clear(name);
    this.#timers.set(
      name,
      setTimeout(() => {
        this.#timers.delete(name);
        fire();
      }, ms),
    );
  }

  clear(name: string): void {
    clearTimeout(this.#timers.get(name));
    this.#timers.delete(name);
  }

  clearAll(): void {
    for (const timer of this.#timers.values()) clearTimeout(timer);
    this.#timers.clear();
  }
}

const emptyBody = new Uint8Array(0);

/** The state of a client transaction (§17.1.1, §17.1.2; "accepted" of RFC 6026). */
type ClientState = "calling" | "proceeding" | "completed" | "accepted" | "terminated";

class ClientTx implements ClientTransaction {
  readonly response: Promise<SipResponse>;
  readonly timers = new Timers();
  state: ClientState = "calling";
  final?: SipResponse;
  resolve!: (r: SipResponse) => void;
  reject!: (err: Error) => void;
  /** Resolves at the first provisional or final answer (CANCEL waits for it, §9.1). */
  readonly answered: Promise<void>;
  markAnswered!: () => void;
  /** The ACK of a 3xx-6xx, resent when the final comes again. */
  ack?: SipRequest;

  constructor(
    readonly request: SipRequest,
    readonly branch: string,
    readonly key: string,
    readonly to: SipPeer,
    readonly onProvisional?: (r: SipResponse) => void,
  ) {
    this.response = new Promise((resolve, reject) => {
      this.resolve = resolve;
      this.reject = reject;
    });
    // Handled here too, so a transaction nobody awaits cannot fail the process.
    this.response.catch(() => {});
    this.answered = new Promise((resolve) => this.markAnswered = resolve);
  }

  get invite(): boolean {
    return this.request.method === "INVITE";
  }
}

/** The state of a server transaction (§17.2.1, §17.2.2; "accepted" of RFC 6026). */
type ServerState = "trying" | "proceeding" | "completed" | "confirmed" | "accepted";

class ServerTx implements ServerTransaction {
  readonly timers = new Timers();
  state: ServerState = "trying";
  last?: SipResponse;
  toTag?: string;
  acked = false;
  onAckTimeout?: () => void;
  onCancel?: () => void;

  constructor(
    readonly request: SipRequest,
    readonly from: SipPeer,
    readonly key: string,
    readonly layer: ServerSide,
  ) {}

  get invite(): boolean {
    return this.request.method === "INVITE";
  }

  get finished(): boolean {
    return this.state !== "trying" && this.state !== "proceeding";
  }

  respond(status: number, reason: string, o?: RespondOptions): Promise<void> {
    return this.layer.respond(this, status, reason, o ?? {});
  }

  acknowledged(): void {
    this.acked = true;
    this.timers.clear("retransmit");
  }
}

/** What a ServerTx asks of the layer. */
interface ServerSide {
  respond(tx: ServerTx, status: number, reason: string, o: RespondOptions): Promise<void>;
}

/** The transaction of an ACK or of a request the layer no longer tracks: it cannot answer. */
class UnansweredTx implements ServerTransaction {
  constructor(readonly request: SipRequest, readonly from: SipPeer) {}

  respond(): Promise<void> {
    return Promise.reject(new Error(`a ${this.request.method} gets no response`));
  }

  acknowledged(): void {}
}

/** The `host:port` of our Via sent-by (IPv6 in brackets). */
function hostPort(host: string, port: number): string {
  return `${host.includes(":") ? `[${host}]` : host}:${port}`;
}

/** Whether a response is a 2xx. */
function isSuccess(res: SipResponse): boolean {
  return res.status >= 200 && res.status < 300;
}

/**
 * The transactions of one SIP endpoint over one SipTransport, whose `onMessage` it takes.
 * New requests go to `onRequest`; responses reach the client transaction they answer.
 */
export class SipTransactions implements ServerSide {
  /** Receives each new request (and the ACKs of 2xx, the CANCELs matching nothing). */
  onRequest: (req: SipRequest, tx: ServerTransaction, from: SipPeer) => void = (_r, tx) => {
    void tx.respond(501, "Not Implemented").catch(() => {});
  };
  /** Receives 2xx to an INVITE whose transaction ended (retransmitted or forked): re-ACK. */
  onStray2xx: (res: SipResponse, from: SipPeer) => void = () => {};

  readonly #transport: SipTransport;
  readonly #log: Logger;
  readonly #t: TransactionTimers;
  readonly #clients = new Map<string, ClientTx>();
  readonly #servers = new Map<string, ServerTx>();
  readonly #maxServers: number;
  #closed = false;
  /** New requests answered 503 because the server transactions were at their cap. */
  refusedRequests = 0;

  /**
   * Takes `transport.onMessage`. `timers` shortens RFC 3261's (tests);
   * `maxServerTransactions` defaults to maxSipServerTransactions.
   */
  constructor(
    transport: SipTransport,
    o: { log: Logger; timers?: Partial<TransactionTimers>; maxServerTransactions?: number },
  ) {
    this.#transport = transport;
    this.#log = o.log;
    this.#t = { ...defaultTransactionTimers, ...o.timers };
    this.#maxServers = o.maxServerTransactions ?? maxSipServerTransactions;
    transport.onMessage = (message, from) => this.#onMessage(message, from);
  }

  /** Client transactions in progress, and server transactions (for tests and /health). */
  get size(): { clients: number; servers: number } {
    return { clients: this.#clients.size, servers: this.#servers.size };
  }

  /**
   * Starts a client transaction: a top Via (transport, our host:port, a new branch, rport)
   * and Max-Forwards (70, when absent) are written into `req`, which is then sent and,
   * over UDP, retransmitted. 1xx go to `onProvisional`; `response` settles with the final,
   * or rejects after 64*T1 without one (timers B, F). An INVITE that got a provisional
   * answer waits for its final without a timer (RFC 3261 §17.1.1.2: timer B runs while
   * Calling only); the UA bounds the ringing with `cancel`.
   */
  request(
    req: SipRequest,
    to: SipPeer,
    onProvisional?: (r: SipResponse) => void,
  ): ClientTransaction {
    const branch = newBranch();
    this.#stamp(req, to, branch);
    return this.#start(req, to, branch, onProvisional);
  }

  /** Sends a request outside any transaction (the ACK of a 2xx) with a new branch. */
  async sendAck(ack: SipRequest, to: SipPeer): Promise<void> {
    if (this.#closed) throw new SipTransportError("SIP transactions closed");
    this.#stamp(ack, to, newBranch());
    await this.#transport.send(ack, to);
  }

  /**
   * CANCELs a pending INVITE (RFC 3261 §9.1) once it got a provisional answer, in a
   * transaction of its own; resolves with the CANCEL's final response. Rejects when the
   * INVITE got its final answer first (nothing left to cancel). Should the INVITE still get
   * no final answer within 64*T1, its `response` rejects with SipTimeoutError.
   */
  async cancel(tx: ClientTransaction): Promise<SipResponse> {
    const invite = this.#clients.get(`${tx.branch}|INVITE`);
    if (!invite || invite !== tx) throw new Error("no pending INVITE transaction to cancel");
    await invite.answered;
    // A second cancel() shares the first one's CANCEL.
    const pending = this.#clients.get(`${tx.branch}|CANCEL`);
    if (pending) return await pending.response;
    if (invite.state !== "proceeding") {
      throw new Error(
        "the INVITE transaction ended (answered or failed) before it could be cancelled",
      );
    }
    const req = invite.request;
    const headers = new SipHeaders();
    headers.add("Via", req.headers.get("Via")!);
    for (const route of req.headers.getAll("Route")) headers.add("Route", route);
    headers.add("Max-Forwards", "70");
    for (const name of ["From", "To", "Call-ID"]) headers.add(name, req.headers.get(name)!);
    headers.add("CSeq", `${parseCSeq(req.headers.get("CSeq")!).seq} CANCEL`);
    const cancel: SipRequest = {
      kind: "request",
      method: "CANCEL",
      uri: req.uri,
      headers,
      body: emptyBody,
    };
    invite.timers.set("cancelled", 64 * this.#t.t1Ms, () => {
      this.#failClient(invite, new SipTimeoutError("no final response to the cancelled INVITE"));
    });
    return await this.#start(cancel, invite.to, invite.branch).response;
  }

  /** Stops every timer; pending client transactions reject with SipTransportError("closed"). */
  close(): void {
    this.#closed = true;
    for (const tx of [...this.#clients.values()]) {
      this.#failClient(tx, new SipTransportError("closed"));
    }
    for (const tx of this.#servers.values()) tx.timers.clearAll();
    this.#servers.clear();
  }

  /** Writes our top Via and a Max-Forwards into a request we send. */
  #stamp(req: SipRequest, to: SipPeer, branch: string): void {
    const via = `SIP/2.0/${to.transport} ${
      hostPort(this.#transport.advertisedHost, this.#transport.port)
    };branch=${branch};rport`;
    req.headers = withVias(req.headers, [via, ...req.headers.getAll("Via")]);
    if (!req.headers.has("Max-Forwards")) req.headers.set("Max-Forwards", "70");
  }

  #start(
    req: SipRequest,
    to: SipPeer,
    branch: string,
    onProvisional?: (r: SipResponse) => void,
  ): ClientTx {
    const key = `${branch}|${req.method}`;
    const tx = new ClientTx(req, branch, key, to, onProvisional);
    if (this.#closed) {
      tx.reject(new SipTransportError("closed"));
      return tx;
    }
    this.#clients.set(key, tx);
    this.#sendClient(tx);
    const { t1Ms, t2Ms } = this.#t;
    if (to.transport === "UDP") {
      // Timer A doubles without bound (§17.1.1.2), timer E up to T2 (§17.1.2.2).
      const retransmit = (intervalMs: number) => {
        tx.timers.set("retransmit", intervalMs, () => {
          this.#sendClient(tx);
          const next = tx.invite ? intervalMs * 2 : Math.min(intervalMs * 2, t2Ms);
          retransmit(tx.state === "proceeding" ? t2Ms : next);
        });
      };
      retransmit(t1Ms);
    }
    tx.timers.set("timeout", 64 * t1Ms, () => {
      this.#failClient(
        tx,
        new SipTimeoutError(`no final response to ${req.method} within ${64 * t1Ms} ms`),
      );
    });
    return tx;
  }

  #sendClient(tx: ClientTx): void {
    this.#transport.send(tx.request, tx.to).catch((err) => {
      this.#failClient(
        tx,
        err instanceof SipTransportError ? err : new SipTransportError(String(err), { cause: err }),
      );
    });
  }

  #failClient(tx: ClientTx, err: Error): void {
    tx.timers.clearAll();
    if (this.#clients.get(tx.key) === tx) this.#clients.delete(tx.key);
    if (tx.final) return;
    tx.state = "terminated";
    tx.markAnswered();
    tx.reject(err);
  }

  #endClient(tx: ClientTx, afterMs: number): void {
    const end = () => {
      tx.timers.clearAll();
      tx.state = "terminated";
      if (this.#clients.get(tx.key) === tx) this.#clients.delete(tx.key);
    };
    if (afterMs <= 0) end();
    else tx.timers.set("end", afterMs, end);
  }

  #onMessage(message: SipMessage, from: SipPeer): void {
    if (this.#closed) return;
    if (message.kind === "response") this.#onResponse(message, from);
    else this.#onRequest(message, from);
  }

  #onResponse(res: SipResponse, from: SipPeer): void {
    const branch = parseVia(res.headers.get("Via")!).params.get("branch") ?? "";
    const cseq = parseCSeq(res.headers.get("CSeq")!);
    const tx = this.#clients.get(`${branch}|${cseq.method}`);
    if (!tx) {
      if (isSuccess(res) && cseq.method === "INVITE") this.onStray2xx(res, from);
      return;
    }
    const reliable = tx.to.transport === "TCP";
    if (res.status < 200) {
      if (tx.state !== "calling" && tx.state !== "proceeding") return;
      tx.state = "proceeding";
      // An INVITE that is ringing waits for its final answer (or a CANCEL) without timer B;
      // a non-INVITE keeps timer F and retransmits every T2 (§17.1.2.2).
      if (tx.invite) {
        tx.timers.clear("retransmit");
        tx.timers.clear("timeout");
      }
      tx.markAnswered();
      try {
        tx.onProvisional?.(res);
      } catch (err) {
        this.#log.error("SIP provisional handler failed", { err });
      }
      return;
    }
    if (tx.final) {
      // A retransmitted final: a 3xx-6xx to an INVITE is ACKed again, a 2xx goes to the UA.
      if (tx.ack && !isSuccess(res)) this.#sendAck(tx);
      else if (tx.invite && isSuccess(res)) this.onStray2xx(res, from);
      return;
    }
    tx.final = res;
    tx.timers.clearAll();
    tx.markAnswered();
    if (tx.invite && isSuccess(res)) {
      tx.state = "accepted";
      this.#endClient(tx, 64 * this.#t.t1Ms);
    } else if (tx.invite) {
      tx.state = "completed";
      tx.ack = this.#nonSuccessAck(tx.request, res);
      this.#sendAck(tx);
      this.#endClient(tx, reliable ? 0 : 64 * this.#t.t1Ms);
    } else {
      tx.state = "completed";
      this.#endClient(tx, reliable ? 0 : this.#t.t4Ms);
    }
    tx.resolve(res);
  }

  /** The ACK of a 3xx-6xx to an INVITE (RFC 3261 §17.1.1.3): same branch and Request-URI. */
  #nonSuccessAck(invite: SipRequest, res: SipResponse): SipRequest {
    const headers = new SipHeaders();
    headers.add("Via", invite.headers.get("Via")!);
    for (const route of invite.headers.getAll("Route")) headers.add("Route", route);
    headers.add("Max-Forwards", "70");
    headers.add("From", invite.headers.get("From")!);
    headers.add("To", res.headers.get("To")!);
    headers.add("Call-ID", invite.headers.get("Call-ID")!);
    headers.add("CSeq", `${parseCSeq(invite.headers.get("CSeq")!).seq} ACK`);
    return { kind: "request", method: "ACK", uri: invite.uri, headers, body: emptyBody };
  }

  #sendAck(tx: ClientTx): void {
    this.#transport.send(tx.ack!, tx.to).catch((err) => {
      this.#log.debug("SIP ACK not sent", { err });
    });
  }

  /** The transaction key of a request, `method` replacing its own (ACK and CANCEL lookups). */
  #serverKey(req: SipRequest, method: string): string {
    const via = parseVia(req.headers.get("Via")!);
    const branch = via.params.get("branch") ?? "";
    if (branch.startsWith(branchMagicCookie)) {
      return `${branch}|${via.host}:${via.port ?? ""}|${method}`;
    }
    // RFC 2543 peers: no usable branch, so the request's identity stands in for it.
    const seq = parseCSeq(req.headers.get("CSeq")!).seq;
    const fromTag = tagOf(req.headers.get("From")!) ?? "";
    return `2543|${req.headers.get("Call-ID")}|${seq}|${fromTag}|${method}`;
  }

  #onRequest(req: SipRequest, from: SipPeer): void {
    if (req.method === "ACK") {
      const tx = this.#servers.get(this.#serverKey(req, "INVITE"));
      if (tx?.state === "completed") {
        // The ACK of a 3xx-6xx: retransmissions stop; timer I absorbs its copies.
        tx.state = "confirmed";
        tx.timers.clear("retransmit");
        tx.timers.clear("timeout");
        this.#endServer(tx, from.transport === "TCP" ? 0 : this.#t.t4Ms);
        return;
      }
      if (tx?.state === "confirmed") return;
      this.#dispatch(req, new UnansweredTx(req, from), from);
      return;
    }
    const key = this.#serverKey(req, req.method);
    const existing = this.#servers.get(key);
    if (existing) {
      // A retransmission: the last answer again (§17.2.1, §17.2.2), or nothing yet.
      if (existing.last) this.#sendServer(existing, existing.last);
      return;
    }
    if (this.#servers.size >= this.#maxServers) {
      if (this.refusedRequests++ % 1000 === 0) {
        this.#log.warn("SIP server transactions at their cap; answering 503", {
          max: this.#maxServers,
          refused: this.refusedRequests,
        });
      }
      const res = buildResponse(req, 503, "Service Unavailable", {
        toTag: newTag(),
        headers: [["Retry-After", String(overloadRetryAfterS)]],
      });
      this.#transport.send(res, responsePeer(parseVia(req.headers.get("Via")!), from))
        .catch((err) => this.#log.debug("SIP response not sent", { err }));
      return;
    }
    const tx = new ServerTx(req, from, key, this);
    this.#servers.set(key, tx);
    if (req.method === "CANCEL") {
      const invite = this.#servers.get(this.#serverKey(req, "INVITE"));
      if (invite) {
        void this.#cancelInvite(tx, invite);
        return;
      }
    }
    if (tx.invite) {
      tx.timers.set("trying", tryingDelayMs, () => {
        if (!tx.last) tx.respond(100, "Trying").catch(() => {});
      });
    }
    this.#dispatch(req, tx, from);
  }

  #dispatch(req: SipRequest, tx: ServerTransaction, from: SipPeer): void {
    try {
      this.onRequest(req, tx, from);
    } catch (err) {
      this.#log.error("SIP request handler failed", { method: req.method, err });
      if (tx instanceof ServerTx && !tx.finished) {
        tx.respond(500, "Server Internal Error").catch(() => {});
      }
    }
  }

  /** A CANCEL matching a server INVITE (RFC 3261 §9.2): 200, then 487 to the INVITE. */
  async #cancelInvite(cancel: ServerTx, invite: ServerTx): Promise<void> {
    try {
      // The CANCEL's answer carries the To tag of the INVITE's answers.
      invite.toTag ??= newTag();
      await cancel.respond(200, "OK", { toTag: invite.toTag });
      if (invite.finished) return;
      await invite.respond(487, "Request Terminated", { toTag: invite.toTag });
      invite.onCancel?.();
    } catch (err) {
      this.#log.debug("SIP CANCEL not completed", { err });
    }
  }

  /** Sends a response of `tx` (ServerTransaction.respond). */
  async respond(tx: ServerTx, status: number, reason: string, o: RespondOptions): Promise<void> {
    if (!Number.isInteger(status) || status < 100 || status > 699) {
      throw new RangeError(`SIP status ${status} is out of range`);
    }
    if (tx.finished) throw new Error(`${tx.request.method} already has a final response`);
    if (this.#closed) throw new SipTransportError("SIP transactions closed");
    if (o.toTag !== undefined) tx.toTag = o.toTag;
    // Every answer but 100 carries a To tag (RFC 3261 §8.2.6.2), the same one throughout.
    if (status > 100 && tx.toTag === undefined) tx.toTag = newTag();
    const res = buildResponse(tx.request, status, reason, {
      ...o,
      toTag: status > 100 ? tx.toTag : undefined,
    });
    tx.timers.clear("trying");
    tx.last = res;
    const reliable = tx.from.transport === "TCP";
    const { t1Ms, t2Ms } = this.#t;
    if (status < 200) {
      tx.state = "proceeding";
    } else if (tx.invite) {
      tx.state = isSuccess(res) ? "accepted" : "completed";
      // Timer G for a 3xx-6xx, the UAS core's retransmission of a 2xx (§13.3.1.4): both
      // double from T1 up to T2, over UDP only.
      if (!reliable) {
        const retransmit = (intervalMs: number) => {
          tx.timers.set("retransmit", intervalMs, () => {
            this.#sendServer(tx, res);
            retransmit(Math.min(intervalMs * 2, t2Ms));
          });
        };
        retransmit(t1Ms);
      }
      tx.timers.set("timeout", 64 * t1Ms, () => {
        this.#endServer(tx, 0);
        if (isSuccess(res) && !tx.acked) {
          try {
            tx.onAckTimeout?.();
          } catch (err) {
            this.#log.error("SIP ACK timeout handler failed", { err });
          }
        }
      });
    } else {
      tx.state = "completed";
      this.#endServer(tx, reliable ? 0 : 64 * t1Ms);
    }
    await this.#transport.send(res, this.#responseTarget(tx));
  }

  #responseTarget(tx: ServerTx): SipPeer {
    return responsePeer(parseVia(tx.request.headers.get("Via")!), tx.from);
  }

  #sendServer(tx: ServerTx, res: SipResponse): void {
    this.#transport.send(res, this.#responseTarget(tx)).catch((err) => {
      this.#log.debug("SIP response not sent", { err });
    });
  }

  #endServer(tx: ServerTx, afterMs: number): void {
    const end = () => {
      tx.timers.clearAll();
      if (this.#servers.get(tx.key) === tx) this.#servers.delete(tx.key);
    };
    if (afterMs <= 0) end();
    else tx.timers.set("end", afterMs, end);
  }
}
