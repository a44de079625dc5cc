/**
 * The Web SDK phone: a session created with `sipOptions` gets its SIP account attached to the
 * call registry (registered when `sipRegisterRequired`, `registered` told to the SDK), places
 * calls with `call` (the browser's offer answered by a sendrecv peer bridged to the SIP leg),
 * is rung by INVITEs to its login (`setRemoteSDP` with the server's offer, then
 * `notifyIncomingCall`, in that order: the SDK caches an SDP of an unknown id, but an SDP of
 * a call it knows goes to a media connection `answer` has not made yet), and drives its calls
 * with `answer`, `hangup`, `hold`, `unhold`, `sendDtmf` and `transfer`. Statuses reach the SDK
 * as `notifyTryingResponse`, `ring`, `talk`, `hold` and `finish`; the session's end hangs its
 * calls up and unregisters.
 */
import { z } from "zod";
import type { Call, CallStatus, CallStatusInfo, DtmfType } from "../core/call.ts";
import type { SipAccountFields } from "../core/call_registry.ts";
import { BadRequestError, MediaServerError, NotFoundError, ParseError } from "../core/errors.ts";
import type { Logger } from "../core/log.ts";
import type { Services } from "../core/services.ts";
import { WebRtcCallPeer } from "../media/providers/webrtc_call_peer.ts";
import type { HandlerTable, SignalingContext } from "./handlers.ts";
import { parsePayload } from "./payload.ts";
import { peerAddress } from "./play_plan.ts";
import type { SignalingSession } from "./session.ts";

/** The SDK message of each call status (the SDK reads only `status` from any of them). */
const statusMessages: Record<CallStatus, string> = {
  TRYING: "notifyTryingResponse",
  RING: "ring",
  RING_MEDIA: "ring",
  SESSION_PROGRESS: "ring",
  ESTABLISHED: "talk",
  HOLD: "hold",
  BUSY: "finish",
  FINISH: "finish",
  FAILED: "finish",
};

/** Statuses after which the SDK forgets the call. */
const finalStatuses = new Set<CallStatus>(["BUSY", "FINISH", "FAILED"]);

/** Info of a call refused before it reached the SIP side. */
export const callRefusal = {
  noAccount: "no SIP account: the session was created without sipOptions",
  restricted: "Restricted access",
  idInUse: "callId is already in use",
} as const;

/** The SIP fields of an agreed connection object (sipOptions of createSession). */
const accountObject = z.looseObject({
  sipLogin: z.string().optional(),
  sipAuthenticationName: z.string().nullish(),
  sipPassword: z.string().nullish(),
  sipDomain: z.string().nullish(),
  sipOutboundProxy: z.string().nullish(),
  sipPort: z.number().nullish(),
  sipRegisterRequired: z.boolean().nullish(),
  sipVisibleName: z.string().nullish(),
});

const callObject = z.looseObject({
  callId: z.string().min(1),
  callee: z.string().min(1),
  sdp: z.string().min(1),
  visibleName: z.string().nullish(),
  hasVideo: z.boolean().optional(),
});
const answerObject = z.looseObject({ callId: z.string().min(1), sdp: z.string().min(1) });
const callIdObject = z.looseObject({ callId: z.string().min(1) });
const dtmfObject = z.looseObject({
  callId: z.string().min(1),
  dtmf: z.union([z.string().regex(/^[0-9A-Da-d*#]+$/), z.int().nonnegative()]),
  type: z.enum(["RFC2833", "INFO", "INFO_RELAY", "INBAND"]).default("RFC2833"),
});
const transferObject = z.looseObject({ callId: z.string().min(1), target: z.string().min(1) });

/** One call of a phone: its peer towards the browser and, once dialled, the SIP call. */
interface PhoneCall {
  readonly callId: string;
  readonly peer: WebRtcCallPeer;
  call?: Call;
  /** The SDK hung up while the call was being placed. */
  hangupAsked?: boolean;
  /** The browser's microphone is what the far end hears. */
  sending?: boolean;
  unsubscribe: (() => void)[];
}

/** The SIP side of one Web SDK session. */
class SipPhone {
  readonly #session: SignalingSession;
  readonly #services: Services;
  readonly #log: Logger;
  readonly #account: SipAccountFields | undefined;
  readonly #calls = new Map<string, PhoneCall>();
  #attachment?: { close(): Promise<void> };
  #registered = false;
  #closed = false;

  constructor(session: SignalingSession, services: Services, log: Logger, connection: unknown) {
    this.#session = session;
    this.#services = services;
    this.#log = log.child({ sessionId: session.sessionId, component: "sip-phone" });
    const parsed = accountObject.safeParse(connection);
    const c = parsed.success ? parsed.data : undefined;
    if (!c?.sipDomain || !c.sipLogin) return;
    this.#account = {
      sipLogin: c.sipLogin,
      sipAuthenticationName: c.sipAuthenticationName ?? undefined,
      sipPassword: c.sipPassword ?? undefined,
      sipDomain: c.sipDomain,
      sipOutboundProxy: c.sipOutboundProxy ?? undefined,
      sipPort: c.sipPort || undefined,
      visibleName: c.sipVisibleName ?? undefined,
    };
    try {
      this.#attachment = services.calls.attach(this.#account, {
        registerRequired: c.sipRegisterRequired === true,
        sessionId: session.sessionId,
        appKey: session.record().appKey,
        onRegistration: (s) => this.#onRegistration(s),
        onIncoming: (call) => void this.#onIncoming(call),
      });
    } catch (err) {
      // A malformed account or no user agent: the session lives on without its phone.
      const info = (err as Error).message;
      this.#log.info("SIP account not attached", { info });
      this.#registration("FAILED", null, info);
    }
  }

  /** Places the SDK's call: answers its offer, dials, bridges once established. */
  async call(payload: unknown, ctx: SignalingContext): Promise<void> {
    const o = parsePayload(callObject, payload);
    const fail = (info: string) =>
      this.#send("finish", { ...callFields(o), status: "FAILED", info });
    if (!this.#account) return fail(callRefusal.noAccount);
    if (this.#calls.has(o.callId)) return fail(callRefusal.idInUse);
    const hook = await this.#invoke("call", o);
    if (!hook.ok) return fail(callRefusal.restricted);
    const phoneCall = this.#open(o.callId);
    let answer: string;
    try {
      answer = await phoneCall.peer.answer(o.sdp);
    } catch (err) {
      await this.#drop(phoneCall);
      if (err instanceof ParseError || err instanceof MediaServerError) return fail(err.message);
      throw err;
    }
    let call: Call;
    try {
      call = await this.#services.calls.startup({
        ...this.#account,
        visibleName: o.visibleName ?? this.#account.visibleName,
        callId: o.callId,
        callee: o.callee,
        hasAudio: true,
        hasVideo: phoneCall.peer.hasVideo,
        // The browser sends Opus: a far end taking Opus gets it without transcoding.
        preferOpus: true,
        sessionId: this.#session.sessionId,
        appKey: this.#session.record().appKey,
      });
    } catch (err) {
      await this.#drop(phoneCall);
      if (err instanceof MediaServerError) return fail(err.message);
      throw err;
    }
    ctx.log.info("SDK call placed", { callId: o.callId, callee: o.callee });
    this.#session.send("setRemoteSDP", o.callId, answer, true);
    this.#bridge(phoneCall, call);
    if (phoneCall.hangupAsked || this.#closed) await call.hangup();
  }

  /** The browser answers an incoming call with its SDP answer. */
  async answer(payload: unknown): Promise<void> {
    const o = parsePayload(answerObject, payload);
    const phoneCall = this.#own(o.callId);
    const hook = await this.#invoke("answer", o);
    if (!hook.ok) {
      await phoneCall.call?.hangup();
      return;
    }
    await phoneCall.peer.acceptAnswer(o.sdp);
    await phoneCall.call!.answer();
  }

  /** Hangs a call up (a call still being placed is hung up once dialled). */
  async hangup(payload: unknown): Promise<void> {
    const { callId } = parsePayload(callIdObject, payload);
    const phoneCall = this.#calls.get(callId);
    // The SDK sends hangup for calls it failed locally too: nothing to do then.
    if (!phoneCall) return;
    await this.#invoke("hangup", { callId });
    if (!phoneCall.call) {
      phoneCall.hangupAsked = true;
      return;
    }
    await phoneCall.call.hangup();
  }

  async hold(payload: unknown): Promise<void> {
    const o = parsePayload(callIdObject, payload);
    const call = this.#ownCall(o.callId);
    if ((await this.#invoke("hold", o)).ok) await call.hold();
  }

  async unhold(payload: unknown): Promise<void> {
    const o = parsePayload(callIdObject, payload);
    const call = this.#ownCall(o.callId);
    if ((await this.#invoke("unhold", o)).ok) await call.unhold();
  }

  async sendDtmf(payload: unknown): Promise<void> {
    const o = parsePayload(dtmfObject, payload);
    const call = this.#ownCall(o.callId);
    if (!(await this.#invoke("sendDtmf", o)).ok) return;
    await call.sendDtmf(String(o.dtmf), o.type as DtmfType);
  }

  /** Blind transfer; the SDK hears how it went with `notifyTransferEvent`. */
  async transfer(payload: unknown): Promise<void> {
    const o = parsePayload(transferObject, payload);
    const call = this.#ownCall(o.callId);
    if (!(await this.#invoke("transfer", o)).ok) return;
    const event = (status: string, info = "") => {
      const body = { callId: o.callId, target: o.target, status, info };
      this.#send("notifyTransferEvent", body);
      void this.#invoke("TransferStatusEvent", body);
    };
    try {
      await call.transfer(o.target);
    } catch (err) {
      if (!(err instanceof MediaServerError)) throw err;
      event("FAILED", err.message);
      return;
    }
    event("ACCEPTED");
    event("COMPLETED");
  }

  /** The session ended: its calls are hung up, its account unregistered. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    const calls = [...this.#calls.values()];
    await Promise.allSettled(calls.map(async (c) => {
      await c.call?.hangup();
      await this.#drop(c);
    }));
    await this.#attachment?.close();
  }

  /** An INVITE to this session's login: the server's offer, then the ring. */
  async #onIncoming(call: Call): Promise<void> {
    if (this.#closed) {
      await call.hangup();
      return;
    }
    const phoneCall = this.#open(call.callId);
    let offer: string;
    try {
      offer = await phoneCall.peer.offer(call.init.hasVideo);
    } catch (err) {
      this.#log.warn("no offer for an incoming call", { callId: call.callId, err });
      await this.#drop(phoneCall);
      await call.hangup();
      return;
    }
    this.#bridge(phoneCall, call);
    if (call.ended) return;
    this.#session.send("setRemoteSDP", call.callId, offer, false);
    this.#session.send("notifyIncomingCall", this.#callObject(call, call.status));
  }

  /** Follows the SIP call: statuses to the SDK, media bridged, the peer closed at the end. */
  #bridge(phoneCall: PhoneCall, call: Call): void {
    phoneCall.call = call;
    phoneCall.unsubscribe.push(
      call.onStatus((status, info) => this.#onStatus(phoneCall, status, info)),
    );
    if (!call.incoming) this.#onStatus(phoneCall, call.status, { sipStatus: call.sipStatus });
  }

  #onStatus(phoneCall: PhoneCall, status: CallStatus, info: CallStatusInfo): void {
    const { call, peer } = phoneCall;
    if (!call) return;
    // Early media (RING_MEDIA, SESSION_PROGRESS) reaches the browser before the answer.
    if (call.received) peer.play(call.received);
    // Once: an unhold is ESTABLISHED again, and the far end hears the same microphone.
    if (status === "ESTABLISHED" && !phoneCall.sending) {
      phoneCall.sending = true;
      call.sendFrom(peer.received);
    }
    this.#send(statusMessages[status], this.#callObject(call, status, info));
    if (finalStatuses.has(status)) void this.#drop(phoneCall);
  }

  /** A new call of this phone with its peer; its failure hangs the call up. */
  #open(callId: string): PhoneCall {
    const services = this.#services;
    const phoneCall: PhoneCall = {
      callId,
      unsubscribe: [],
      peer: new WebRtcCallPeer({
        callId,
        sessionId: this.#session.sessionId,
        appKey: this.#session.record().appKey,
        nodeId: services.nodeId,
        address: peerAddress(services),
        engine: services.engine,
        sendPaths: services.sendPaths,
        log: this.#log,
        onFailed: (info) => {
          this.#log.info("the browser's media of a call failed", { callId, info });
          if (phoneCall.call) void phoneCall.call.hangup();
          else phoneCall.hangupAsked = true;
        },
      }),
    };
    this.#calls.set(callId, phoneCall);
    return phoneCall;
  }

  async #drop(phoneCall: PhoneCall): Promise<void> {
    if (this.#calls.get(phoneCall.callId) === phoneCall) this.#calls.delete(phoneCall.callId);
    for (const unsubscribe of phoneCall.unsubscribe) unsubscribe();
    phoneCall.unsubscribe = [];
    await phoneCall.peer.close();
  }

  #own(callId: string): PhoneCall {
    const phoneCall = this.#calls.get(callId);
    if (!phoneCall) throw new NotFoundError(`call ${callId} not found`);
    return phoneCall;
  }

  #ownCall(callId: string): Call {
    const call = this.#own(callId).call;
    if (!call) throw new BadRequestError("callId", `call ${callId} is not dialled yet`);
    return call;
  }

  /** The call object of the SDK's call messages. */
  #callObject(call: Call, status: CallStatus, info?: CallStatusInfo): Record<string, unknown> {
    const { sdp: _sdp, ...record } = call.record();
    return {
      ...record,
      status,
      sipStatus: info?.sipStatus ?? call.sipStatus,
      info: info?.reason ?? "",
    };
  }

  #onRegistration(s: { registered: boolean; status: number; reason: string }): void {
    if (this.#closed) return;
    if (s.registered) {
      const first = !this.#registered;
      this.#registered = true;
      // Refreshes are not told: each `registered` fires the SDK's REGISTERED callback again.
      if (first) this.#registration("REGISTERED", s.status, s.reason);
      return;
    }
    this.#registered = false;
    this.#registration("FAILED", s.status, s.reason);
  }

  /** Tells the SDK and the RegistrationStatusEvent hook how registration went. */
  #registration(status: "REGISTERED" | "FAILED", sipStatus: number | null, info: string): void {
    const body = {
      sipLogin: this.#account?.sipLogin ?? "",
      sipDomain: this.#account?.sipDomain ?? "",
      status,
      sipStatus,
      info,
    };
    if (status === "REGISTERED") this.#send("registered", body);
    // The SDK has no message for a failed registration: `fail` raises its WARN.
    else this.#send("fail", { apiMethod: "RegistrationStatusEvent", ...body });
    void this.#invoke("RegistrationStatusEvent", body);
  }

  #send(message: string, body: Record<string, unknown>): void {
    if (!this.#closed) this.#session.send(message, body);
  }

  /** A hook with the session's context fields and policy. */
  #invoke(hook: string, body: Record<string, unknown>) {
    const session = this.#session;
    return this.#services.hooks.invoke(hook, {
      ...body,
      nodeId: this.#services.nodeId,
      appKey: session.record().appKey,
      sessionId: session.sessionId,
    }, session.restClientConfig);
  }
}

/** The fields of the SDK's call object a refusal echoes. */
function callFields(o: z.output<typeof callObject>): Record<string, unknown> {
  const { sdp: _sdp, ...fields } = o;
  return fields;
}

const phones = new WeakMap<SignalingSession, SipPhone>();

/**
 * Gives an established session its phone (`connection`: the agreed connection object); the
 * session's end closes it. Without sipOptions the phone refuses calls.
 */
export function attachSipPhone(
  session: SignalingSession,
  connection: unknown,
  ctx: SignalingContext,
): void {
  const phone = new SipPhone(session, ctx.services, ctx.log, connection);
  phones.set(session, phone);
  void session.ended.then(() => phone.close()).catch((err) =>
    ctx.log.error("closing a session's phone failed", { err })
  );
}

function phoneOf(session: SignalingSession): SipPhone {
  const phone = phones.get(session);
  if (!phone) throw new NotFoundError("the session has no SIP phone");
  return phone;
}

/** Registers the SIP phone's messages. */
export function registerSipPhone(handlers: HandlerTable): void {
  handlers.register("call", (s, p, ctx) => phoneOf(s).call(p, ctx));
  handlers.register("answer", (s, p) => phoneOf(s).answer(p));
  handlers.register("hangup", (s, p) => phoneOf(s).hangup(p));
  handlers.register("hold", (s, p) => phoneOf(s).hold(p));
  handlers.register("unhold", (s, p) => phoneOf(s).unhold(p));
  handlers.register("sendDtmf", (s, p) => phoneOf(s).sendDtmf(p));
  handlers.register("transfer", (s, p) => phoneOf(s).transfer(p));
}
