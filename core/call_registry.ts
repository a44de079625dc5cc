/**
 * The SIP calls of a server: one user agent on `ports.sip` (UDP and TCP), calls placed by
 * `/call/startup` and by Web SDK sessions, incoming INVITEs ringing the Web SDK session
 * attached with the callee's login. A call's RTP ports come from `sip.rtpPortMin`..`Max`.
 */
import type { Config } from "../config.ts";
import type { CodecEngine } from "../media/engine/engine.ts";
import { answerCallOffer, buildCallOffer } from "../media/protocols/sip/call_sdp.ts";
import { calleeUri, checkAccount } from "../media/protocols/sip/account.ts";
import {
  type SipAccount,
  type SipCall,
  type SipRegistration,
  type SipRegistrationStatus,
  SipUserAgent,
} from "../media/protocols/sip/user_agent.ts";
import { CallMedia } from "../media/providers/call_media.ts";
import { PortPool } from "../media/providers/port_pool.ts";
import { Stream } from "../media/stream.ts";
import { Call, type CallInit } from "./call.ts";
import {
  BadGatewayError,
  ConflictError,
  NotFoundError,
  ServiceUnavailableError,
} from "./errors.ts";
import type { HookRouter } from "./hook_router.ts";
import { randomToken } from "./ids.ts";
import type { Cap } from "./limits.ts";
import type { Logger } from "./log.ts";
import { existingFileInside } from "./paths.ts";
import type { PushRegistry } from "./push_registry.ts";
import type { CallRecord } from "./records.ts";
import type { StreamRegistry } from "./stream_registry.ts";

/** A SIP account as `/call/startup` and the Web SDK's sipOptions name its fields. */
export interface SipAccountFields {
  sipLogin: string;
  sipAuthenticationName?: string;
  sipPassword?: string;
  /** Registrar / domain host. */
  sipDomain: string;
  /** `host[:port]` every request goes through. */
  sipOutboundProxy?: string;
  /** Port of the domain (or proxy), default 5060. */
  sipPort?: number;
  /** Display name in From. */
  visibleName?: string;
}

/** What `/call/startup` (or a Web SDK `call`) asks for. */
export interface CallStartup extends SipAccountFields {
  /** Our id of the call; made when absent. */
  callId?: string;
  /** A user of the domain, or a full sip: URI. */
  callee: string;
  hasAudio: boolean;
  hasVideo: boolean;
  sessionId?: string;
  appKey?: string;
  /** RTMP server the call's received media is pushed to, with `rtmpStream` as its name. */
  rtmpUrl?: string;
  rtmpStream?: string;
  /** REGISTER the account (digest) before dialling; the registration ends with the call. */
  sipRegisterRequired?: boolean;
  /** Offer Opus first: the call's audio is Opus already (a browser's), so it may pass as is. */
  preferOpus?: boolean;
}

/** A Web SDK session's SIP account, attached while the session lives. */
interface Attachment {
  account: SipAccount;
  sessionId: string;
  appKey?: string;
  onIncoming: (call: Call) => void;
  registration?: SipRegistration;
}

/** Characters of a made-up callId. */
const callIdLength = 16;
/**
 * How long an ended call stays listed with its final status and SIP status, in ms: a REST
 * caller polling `/call/find` sees why it ended (BUSY, FAILED 408...) before it goes.
 */
export const endedCallListedMs = 10_000;

/** The SIP user agent and calls of a server. */
export class CallRegistry {
  #calls = new Map<string, Call>();
  #starting = new Set<string>();
  #attachments = new Set<Attachment>();
  /** Removal timers of ended calls still listed, by callId. */
  #lingering = new Map<string, ReturnType<typeof setTimeout>>();
  /** Registrations of ended calls being removed (Expires: 0). */
  #unregistering = new Set<Promise<void>>();
  #ua: SipUserAgent | undefined;
  #pool: PortPool;
  #closed = false;

  constructor(
    private readonly config: Config,
    private readonly streams: StreamRegistry,
    private readonly pushes: PushRegistry,
    private readonly engine: CodecEngine,
    private readonly hooks: HookRouter,
    private readonly nodeId: string,
    private readonly cap: Cap,
    private readonly log: Logger,
  ) {
    this.#pool = new PortPool(config.sip.rtpPortMin, config.sip.rtpPortMax);
    this.log = log.child({ component: "sip" });
  }

  /** Binds the user agent on `ports.sip`; resolves its port. */
  async start(): Promise<number> {
    const { config } = this;
    this.#ua = await SipUserAgent.start({
      hostname: config.binds.sip ?? config.bind,
      port: config.ports.sip,
      announcedAddress: config.sip.announcedAddress,
      log: this.log,
      timers: { t1Ms: config.sip.t1Ms },
    });
    this.#ua.onIncomingCall = (sip) => void this.#incoming(sip);
    this.log.info("SIP user agent listening", { port: this.#ua.port });
    return this.#ua.port;
  }

  /** Port of the user agent (after start). */
  get port(): number {
    return this.#agent().port;
  }

  #agent(): SipUserAgent {
    if (!this.#ua || this.#closed) throw new ConflictError("the SIP user agent is not running");
    return this.#ua;
  }

  /**
   * Dials `callee` from the account of `o`; resolves once the INVITE is on its way. With
   * `sipRegisterRequired` the account is registered first (kept until the call ends) and a
   * refused or unanswered REGISTER is a 502 naming it. A callId in use is a 409, a malformed
   * domain/callee a 400 naming the field, no RTP port or a call beyond `limits.calls` a 503.
   */
  async startup(o: CallStartup): Promise<Call> {
    const ua = this.#agent();
    const callId = o.callId ?? randomToken(callIdLength);
    if (this.#calls.get(callId)?.ended === false || this.#starting.has(callId)) {
      throw new ConflictError(`call ${callId} exists`);
    }
    const account = accountOf(o, this.config.sip.registerExpiresSec);
    calleeUri(account, o.callee); // a malformed callee is a 400 before any port is taken
    if (!this.cap.tryAcquire()) throw new ServiceUnavailableError(this.cap.refusal());
    this.#starting.add(callId);
    let registration: SipRegistration | undefined;
    let media: CallMedia;
    try {
      if (o.sipRegisterRequired) registration = await this.#registered(ua, account);
      media = await this.#openMedia(o.hasVideo);
    } catch (err) {
      this.cap.release();
      await registration?.close();
      throw err;
    } finally {
      this.#starting.delete(callId);
    }
    const offer = buildCallOffer({
      address: media.address,
      audioPort: media.audioPort,
      videoPort: media.videoPort,
      preferOpus: o.preferOpus,
    });
    let sip: SipCall;
    try {
      sip = ua.invite({ account, callee: o.callee, sdp: offer });
    } catch (err) {
      this.cap.release();
      await media.close();
      await registration?.close();
      throw err;
    }
    const call = this.#track(
      {
        callId,
        incoming: false,
        caller: account.login,
        callee: o.callee,
        visibleName: o.visibleName ?? account.login,
        hasAudio: o.hasAudio,
        hasVideo: o.hasVideo,
        nodeId: this.nodeId,
        appKey: o.appKey ?? null,
        sessionId: o.sessionId ?? null,
        rtmpUrl: o.rtmpUrl ?? null,
        rtmpStream: o.rtmpStream ?? null,
      },
      sip,
      media,
      registration,
    );
    this.log.info("call placed", { callId, callee: o.callee, from: account.login });
    return call;
  }

  /** The call `callId`, or NotFoundError. */
  get(callId: string): Call {
    const call = this.#calls.get(callId);
    if (!call) throw new NotFoundError(`call ${callId} not found`);
    return call;
  }

  /** Records of every call in progress, and of those ended in the last `endedCallListedMs`. */
  list(): CallRecord[] {
    return [...this.#calls.values()].map((c) => c.record());
  }

  /** Hangs a call up; resolves when it is over. */
  async terminate(callId: string): Promise<void> {
    await this.get(callId).hangup();
  }

  /** Plays `fileName` of the media folder into a call (answers once it started). */
  async injectSound(callId: string, fileName: string): Promise<void> {
    const call = this.get(callId);
    const path = await existingFileInside(this.config.folders.media, fileName, "fileName");
    const played = call.injectSound(path);
    // A bad file fails at once; a good one plays on after the answer.
    await Promise.race([played, new Promise((r) => setTimeout(r, 200))]);
    played.catch((err) => this.log.warn("sound not injected", { callId, fileName, err }));
  }

  /** Sends the published stream `streamName` into a call until `stopInjecting`. */
  injectStream(callId: string, streamName: string): void {
    const call = this.get(callId);
    const stream = this.streams.published(streamName);
    if (!(stream instanceof Stream) || stream.ended) {
      throw new NotFoundError(`stream ${streamName} not found`);
    }
    call.inject(stream);
  }

  /** Stops a stream injection. */
  stopInjecting(callId: string): void {
    const call = this.get(callId);
    if (!call.injecting) throw new NotFoundError(`no stream is injected into call ${callId}`);
    call.stopInjecting();
  }

  /**
   * A Web SDK session's SIP account: registered when `registerRequired` (status to
   * `onRegistration`), and the session rung (`onIncoming`) by INVITEs to its login.
   */
  attach(
    fields: SipAccountFields,
    o: {
      registerRequired: boolean;
      sessionId: string;
      appKey?: string;
      onRegistration: (s: { registered: boolean; status: number; reason: string }) => void;
      onIncoming: (call: Call) => void;
    },
  ): { close(): Promise<void> } {
    const ua = this.#agent();
    const attachment: Attachment = {
      account: accountOf(fields, this.config.sip.registerExpiresSec),
      sessionId: o.sessionId,
      appKey: o.appKey,
      onIncoming: o.onIncoming,
    };
    if (o.registerRequired) {
      attachment.registration = ua.register(attachment.account, o.onRegistration);
    }
    this.#attachments.add(attachment);
    return {
      close: async () => {
        this.#attachments.delete(attachment);
        await attachment.registration?.close();
      },
    };
  }

  /** Ends every call and closes the user agent (server stop). */
  async closeAll(): Promise<void> {
    this.#closed = true;
    await Promise.all([...this.#calls.values()].map((c) => c.close("server stopping")));
    for (const timer of this.#lingering.values()) clearTimeout(timer);
    this.#lingering.clear();
    this.#calls.clear();
    await Promise.all([...this.#attachments].map((a) => a.registration?.close()));
    this.#attachments.clear();
    await Promise.all(this.#unregistering);
    await this.#ua?.close();
  }

  async #openMedia(video: boolean): Promise<CallMedia> {
    const { config } = this;
    return await CallMedia.open({
      hostname: config.binds.sip ?? config.bind,
      announcedAddress: config.sip.announcedAddress,
      ports: this.#pool,
      video,
      engine: this.engine,
      log: this.log,
      idleSilence: true,
    });
  }

  /**
   * Registers `account`; resolves with the registration once the registrar accepted it, or
   * closes it and throws a BadGatewayError with the registrar's answer.
   */
  async #registered(ua: SipUserAgent, account: SipAccount): Promise<SipRegistration> {
    const { promise, resolve } = Promise.withResolvers<SipRegistrationStatus>();
    const registration = ua.register(account, resolve);
    const status = await promise;
    if (status.registered) return registration;
    await registration.close();
    throw new BadGatewayError(
      `SIP registration of ${account.login} at ${account.domain} failed: ` +
        `${status.status} ${status.reason}`,
    );
  }

  /** Tracks a call; `registration` (of sipRegisterRequired) is closed when the call ends. */
  #track(
    init: CallInit,
    sip: SipCall,
    media: CallMedia,
    registration?: SipRegistration,
  ): Call {
    const call = new Call(init, sip, media, {
      publish: (stream) => this.streams.add(stream),
      unpublish: (stream) => this.streams.remove(stream),
      changed: (c) => this.#changed(c),
      ended: (c) => {
        this.cap.release();
        if (registration) this.#closeRegistration(registration);
        clearTimeout(this.#lingering.get(c.callId));
        this.#lingering.set(
          c.callId,
          setTimeout(() => {
            this.#lingering.delete(c.callId);
            if (this.#calls.get(c.callId) === c) this.#calls.delete(c.callId);
          }, endedCallListedMs),
        );
      },
      log: this.log.child({ callId: init.callId }),
    });
    // No WCS hook carries received digits: DtmfEvent is ours, shaped like CallStatusEvent's.
    call.onDtmf((dtmf) =>
      void this.hooks.invoke("DtmfEvent", {
        nodeId: this.nodeId,
        appKey: init.appKey,
        sessionId: init.sessionId,
        callId: init.callId,
        dtmf,
      })
    );
    clearTimeout(this.#lingering.get(init.callId));
    this.#lingering.delete(init.callId);
    this.#calls.set(init.callId, call);
    return call;
  }

  /** Unregisters in the background; closeAll waits for what is still under way. */
  #closeRegistration(registration: SipRegistration): void {
    const closing = registration.close().catch((err) => {
      this.log.warn("SIP unregistration failed", { err });
    }).finally(() => this.#unregistering.delete(closing));
    this.#unregistering.add(closing);
  }

  #changed(call: Call): void {
    const record = call.record();
    void this.hooks.invoke("CallStatusEvent", {
      ...record,
      nodeId: this.nodeId,
      appKey: record.appKey,
      sessionId: record.sessionId,
    });
    if (call.status === "ESTABLISHED" && call.init.rtmpUrl && call.received) {
      void this.#pushToRtmp(call, call.received);
    }
  }

  async #pushToRtmp(call: Call, stream: Stream): Promise<void> {
    if (call.record().rtmpStreamStatus !== null) return;
    call.rtmpStreamStatus = "RTMP_STREAM_STARTING";
    const base = call.init.rtmpUrl!.replace(/\/+$/, "");
    const url = `${base}/${call.init.rtmpStream ?? call.callId}`;
    try {
      await this.pushes.startup(stream.name, url, true, this.engine);
      call.rtmpStreamStatus = "RTMP_STREAM_ACTIVE";
    } catch (err) {
      call.rtmpStreamStatus = "RTMP_STREAM_FAILED";
      this.log.warn("the call's RTMP push failed", { callId: call.callId, url, err });
    }
  }

  /** An INVITE from outside: rings the Web SDK session attached with the callee's login. */
  async #incoming(sip: SipCall): Promise<void> {
    const attachment = [...this.#attachments].find((a) => a.account.login === sip.callee);
    if (!attachment) {
      await sip.reject(404, "Not Found").catch(() => {});
      return;
    }
    if (!this.cap.tryAcquire()) {
      await sip.reject(503, "Service Unavailable").catch(() => {});
      return;
    }
    let media: CallMedia;
    try {
      media = await this.#openMedia(false);
    } catch (err) {
      this.cap.release();
      this.log.warn("no RTP ports for an incoming call", { err });
      await sip.reject(503, "Service Unavailable").catch(() => {});
      return;
    }
    let answer: ReturnType<typeof answerCallOffer>;
    try {
      answer = answerCallOffer(sip.remoteSdp ?? "", {
        address: media.address,
        audioPort: media.audioPort,
      });
    } catch (err) {
      this.cap.release();
      await media.close();
      this.log.info("incoming call without usable media", { err });
      await sip.reject(488, "Not Acceptable Here").catch(() => {});
      return;
    }
    const callId = randomToken(callIdLength);
    const call = this.#track(
      {
        callId,
        incoming: true,
        caller: sip.caller,
        callee: sip.callee,
        visibleName: sip.caller,
        hasAudio: true,
        hasVideo: false,
        nodeId: this.nodeId,
        appKey: attachment.appKey ?? null,
        sessionId: attachment.sessionId,
        rtmpUrl: null,
        rtmpStream: null,
      },
      sip,
      media,
    );
    const hook = await this.hooks.invoke("OnCallEvent", { ...call.record() });
    if (!hook.ok) {
      await call.reject(403, "Forbidden").catch(() => {});
      return;
    }
    await call.ring(answer.sdp, answer.media);
    attachment.onIncoming(call);
  }
}

/** The user agent's account of the REST/SDK fields; 400 naming the field when malformed. */
function accountOf(f: SipAccountFields, registerExpiresSec: number): SipAccount {
  const account: SipAccount = {
    login: f.sipLogin,
    authenticationName: f.sipAuthenticationName || undefined,
    password: f.sipPassword || undefined,
    domain: f.sipDomain,
    port: f.sipPort,
    outboundProxy: f.sipOutboundProxy || undefined,
    visibleName: f.visibleName || undefined,
    registerExpiresSec,
  };
  checkAccount(account);
  return account;
}
