/**
 * The binding of one account at its registrar (RFC 3261 §10): REGISTER with digest
 * authentication, refreshed before the granted expiry, tried again with a growing backoff
 * after a failure, removed (Expires: 0) on close.
 */
import type { Logger } from "../../../core/log.ts";
import { accountUri, domainUri, type SipAccount } from "./account.ts";
import { DigestSession } from "./authentication.ts";
import { allowedMethods } from "./call.ts";
import { maxForwards, sipRequest } from "./dialog.ts";
import { newCallId, newTag } from "./headers.ts";
import type { SipResponse } from "./message.ts";
import type { SipTransactions } from "./transaction.ts";
import type { SipPeer, SipTransportName } from "./transport.ts";
import { formatNameAddr, formatSipUri, parseNameAddr, type SipUri } from "./uri.ts";

/** A registration of an account. */
export interface SipRegistration {
  /** Whether the registrar holds our binding now. */
  readonly registered: boolean;
  /** Stops refreshing and removes the binding (Expires: 0). */
  close(): Promise<void>;
}

/** The outcome of a REGISTER. */
export interface SipRegistrationStatus {
  registered: boolean;
  /** SIP status of the last answer (408 when none came). */
  status: number;
  reason: string;
}

/** What a registration needs of its user agent. */
export interface RegistrationContext {
  readonly transactions: SipTransactions;
  readonly log: Logger;
  /** Our address (announced or bound), for the Call-ID. */
  readonly address: string;
  readonly commonHeaders: [string, string][];
  contact(account: SipAccount | undefined, user: string | undefined, t: SipTransportName): string;
  nextHop(account: SipAccount | undefined, uri: SipUri, t: SipTransportName): SipPeer;
  /** The registration closed: it leaves the user agent's table. */
  closed(registration: SipRegistrationSession): void;
}

/** Expires asked by default, in s. */
export const defaultRegisterExpiresSec = 3600;
/** First wait before trying again after a failed REGISTER, in ms; it doubles each time. */
export const registerRetryFirstMs = 5_000;
/** Longest wait between tries after failures, in ms. */
export const registerRetryMaxMs = 300_000;
/** A refresh goes at least this long before the binding expires, in s. */
const refreshMarginSec = 5;
/** Digest challenges answered for one REGISTER (a second one may come with stale=true). */
const maxChallenges = 2;

/** One account's registration. */
export class SipRegistrationSession implements SipRegistration {
  readonly account: SipAccount;
  #registered = false;
  readonly #ctx: RegistrationContext;
  readonly #log: Logger;
  readonly #onStatus: (s: SipRegistrationStatus) => void;
  readonly #callId: string;
  readonly #fromTag = newTag();
  readonly #auth: DigestSession;
  #seq = 0;
  #expiresSec: number;
  #timer?: ReturnType<typeof setTimeout>;
  #failures = 0;
  #closed = false;
  #lastReport?: string;
  #inFlight?: Promise<void>;

  constructor(
    ctx: RegistrationContext,
    account: SipAccount,
    onStatus: (s: SipRegistrationStatus) => void,
  ) {
    this.#ctx = ctx;
    this.account = account;
    this.#onStatus = onStatus;
    this.#log = ctx.log.child({ sipLogin: account.login, sipDomain: account.domain });
    this.#callId = newCallId(ctx.address);
    this.#expiresSec = account.registerExpiresSec ?? defaultRegisterExpiresSec;
    this.#auth = new DigestSession(
      account.password === undefined ? undefined : {
        user: account.authenticationName || account.login,
        password: account.password,
      },
    );
  }

  get registered(): boolean {
    return this.#registered;
  }

  /** Sends the first REGISTER. */
  start(): void {
    this.#run();
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    clearTimeout(this.#timer);
    this.#ctx.closed(this);
    await this.#inFlight;
    if (!this.#registered) return;
    this.#registered = false;
    try {
      await this.#register(0);
    } catch (err) {
      this.#log.debug("SIP unregister unanswered", { err: String(err) });
    }
  }

  #run(): void {
    const cycle = this.#cycle().catch((err) => this.#log.error("SIP REGISTER failed", { err }));
    this.#inFlight = cycle.finally(() => {
      if (this.#inFlight === cycle) this.#inFlight = undefined;
    });
  }

  async #cycle(): Promise<void> {
    let response: SipResponse;
    try {
      response = await this.#register(this.#expiresSec);
    } catch (err) {
      this.#failed(408, `Request Timeout (${(err as Error).message})`);
      return;
    }
    if (response.status >= 300) {
      this.#failed(response.status, response.reason);
      return;
    }
    // Registered even when closed meanwhile: close() then removes the binding.
    this.#registered = true;
    if (this.#closed) return;
    const granted = this.#granted(response);
    this.#failures = 0;
    this.#report({ registered: true, status: response.status, reason: response.reason });
    const refreshSec = Math.max(1, Math.min(granted / 2, granted - refreshMarginSec));
    this.#schedule(refreshSec * 1000);
  }

  #failed(status: number, reason: string): void {
    if (this.#closed) return;
    this.#registered = false;
    this.#log.warn("SIP registration failed", { status, reason });
    this.#report({ registered: false, status, reason });
    const waitMs = Math.min(registerRetryMaxMs, registerRetryFirstMs * 2 ** this.#failures);
    this.#failures++;
    this.#schedule(waitMs);
  }

  #schedule(ms: number): void {
    clearTimeout(this.#timer);
    this.#timer = setTimeout(() => this.#run(), ms);
  }

  /** Reports a first outcome or a change; quiet refreshes are not reported. */
  #report(status: SipRegistrationStatus): void {
    const key = `${status.registered}|${status.status}`;
    if (key === this.#lastReport) return;
    this.#lastReport = key;
    try {
      this.#onStatus(status);
    } catch (err) {
      this.#log.error("SIP registration status handler failed", { err });
    }
  }

  /** The expiry the registrar granted our Contact (its expires param, else Expires). */
  #granted(response: SipResponse): number {
    const ours = this.#contact();
    const ourUri = parseNameAddr(ours).uri;
    for (const value of response.headers.getAll("Contact")) {
      try {
        const contact = parseNameAddr(value);
        const expires = Number(contact.params.get("expires"));
        if (
          contact.uri.user === ourUri.user && contact.uri.host === ourUri.host &&
          contact.uri.port === ourUri.port && Number.isFinite(expires) && expires > 0
        ) return expires;
      } catch {
        // Someone else's malformed binding is not ours.
      }
    }
    const expires = Number(response.headers.get("Expires"));
    return Number.isFinite(expires) && expires > 0 ? expires : this.#expiresSec;
  }

  #contact(): string {
    return this.#ctx.contact(this.account, this.account.login, this.account.transport ?? "UDP");
  }

  /** One REGISTER with `expiresSec`, answering digest challenges and one 423. */
  async #register(expiresSec: number): Promise<SipResponse> {
    const uri = domainUri(this.account);
    const requestUri = formatSipUri(uri);
    const to = this.#ctx.nextHop(this.account, uri, this.account.transport ?? "UDP");
    const aor = formatSipUri(accountUri(this.account));
    let challenges = 0;
    let tooBrief = false;
    for (;;) {
      this.#seq += 1;
      const from = formatNameAddr({
        displayName: this.account.visibleName,
        uri: accountUri(this.account),
        params: new Map([["tag", this.#fromTag]]),
      });
      const request = sipRequest("REGISTER", requestUri, [
        ["Max-Forwards", maxForwards],
        ["From", from],
        ["To", `<${aor}>`],
        ["Call-ID", this.#callId],
        ["CSeq", `${this.#seq} REGISTER`],
        ["Contact", this.#contact()],
        ["Expires", `${expiresSec}`],
        ["Allow", allowedMethods],
        ...this.#ctx.commonHeaders,
        ...this.#auth.headers("REGISTER", requestUri),
      ]);
      const response = await this.#ctx.transactions.request(request, to).response;
      if (
        (response.status === 401 || response.status === 407) && challenges < maxChallenges &&
        this.#auth.accept(response)
      ) {
        challenges++;
        continue;
      }
      const minExpires = Number(response.headers.get("Min-Expires"));
      if (response.status === 423 && !tooBrief && minExpires > expiresSec) {
        tooBrief = true;
        expiresSec = minExpires;
        this.#expiresSec = minExpires;
        continue;
      }
      return response;
    }
  }
}
