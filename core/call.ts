/**
 * One SIP call as the REST API and the Web SDK see it: the SIP leg (a dialog of the user
 * agent), the RTP media of the call, the far end's media published as a Stream named by the
 * callId, what the far end hears (a local stream, a sound file, DTMF) and the WCS status
 * (TRYING ... ESTABLISHED ... FINISH/FAILED) reported to listeners and the CallStatusEvent
 * hook.
 */
import type { Stream } from "../media/stream.ts";
import { Stream as MediaStream } from "../media/stream.ts";
import type { CallMedia } from "../media/providers/call_media.ts";
import {
  answerCallOffer,
  buildCallOffer,
  type CallMediaOffer,
  negotiateAnswer,
  type NegotiatedMedia,
} from "../media/protocols/sip/call_sdp.ts";
import type { SipCall, SipCallEnd } from "../media/protocols/sip/user_agent.ts";
import { BadRequestError, ConflictError } from "./errors.ts";
import type { Logger } from "./log.ts";
import type { CallRecord } from "./records.ts";

/** WCS call statuses, as the Web SDK and the Call record carry them. */
export type CallStatus =
  | "TRYING"
  | "RING"
  | "RING_MEDIA"
  | "SESSION_PROGRESS"
  | "ESTABLISHED"
  | "HOLD"
  | "BUSY"
  | "FINISH"
  | "FAILED";

/** Statuses after which a call is over. */
const finalStatuses = new Set<CallStatus>(["BUSY", "FINISH", "FAILED"]);
/** SIP answers a WCS call reports as BUSY rather than FAILED. */
const busyStatuses = new Set([486, 600]);
/** `Duration` of a DTMF digit sent in SIP INFO (application/dtmf-relay), in ms. */
const infoDigitDurationMs = 160;

/** How DTMF digits are sent into a call. */
export type DtmfType = "RFC2833" | "INFO" | "INFO_RELAY" | "INBAND";

/** What a status listener gets besides the status. */
export interface CallStatusInfo {
  /** Last SIP status of the call (180, 200, 486...), or null before any. */
  sipStatus: number | null;
  /** Why the call ended or failed, when it did. */
  reason?: string;
}

/** Fields of a call that do not change over its life. */
export interface CallInit {
  callId: string;
  incoming: boolean;
  caller: string;
  callee: string;
  visibleName: string;
  hasAudio: boolean;
  hasVideo: boolean;
  nodeId: string;
  appKey: string | null;
  /** The Web SDK session of the call, if one placed or took it. */
  sessionId: string | null;
  rtmpUrl: string | null;
  rtmpStream: string | null;
}

/** What a call needs from the server around it. */
export interface CallContext {
  /** Publishes the far end's media stream (StreamRegistry.add). */
  publish(stream: Stream): void;
  /** Withdraws it (StreamRegistry.remove). */
  unpublish(stream: Stream): void;
  /** Called at each status change, after the listeners (the hook, the RTMP push). */
  changed(call: Call): void;
  /** Called once when the call is over and its resources are freed. */
  ended(call: Call): void;
  log: Logger;
}

/** A SIP call with its media. */
export class Call {
  readonly callId: string;
  readonly incoming: boolean;
  readonly caller: string;
  readonly callee: string;
  readonly init: CallInit;
  #status: CallStatus;
  #sipStatus: number | null = null;
  #reason: string | undefined;
  #sip: SipCall;
  #media: CallMedia;
  #context: CallContext;
  #received: Stream | undefined;
  #source: Stream | undefined;
  #injected: Stream | undefined;
  #started = false;
  #offerVersion = 1;
  #rtmpStreamStatus: string | null = null;
  #statusListeners = new Set<(status: CallStatus, info: CallStatusInfo) => void>();
  #dtmfListeners = new Set<(digit: string) => void>();
  #ending: Promise<void> | undefined;
  /** Our SDP answer to an incoming call's offer, and the media it agreed on. */
  #answerSdp: string | undefined;
  #pendingMedia: NegotiatedMedia | undefined;

  constructor(init: CallInit, sip: SipCall, media: CallMedia, context: CallContext) {
    this.init = init;
    this.callId = init.callId;
    this.incoming = init.incoming;
    this.caller = init.caller;
    this.callee = init.callee;
    this.#sip = sip;
    this.#media = media;
    this.#context = context;
    this.#status = init.incoming ? "RING" : "TRYING";
    media.onDtmf = (digit) => this.#dtmf(digit);
    sip.onProgress = (status, _reason, sdp) => this.#progress(status, sdp);
    sip.onEstablished = (sdp) => {
      this.#sipStatus = 200;
      try {
        this.#startMedia(this.incoming ? undefined : negotiateAnswer(sdp));
      } catch (err) {
        this.#context.log.warn("the far end's SDP has no usable media", { err });
        void this.hangup();
        return;
      }
      this.#setStatus("ESTABLISHED");
    };
    sip.onEnded = (end) => void this.#end(end);
    sip.onInfo = (contentType, body) => this.#info(contentType, body);
    sip.onReinvite = (sdp) => this.#reinvited(sdp);
  }

  /** The WCS status. */
  get status(): CallStatus {
    return this.#status;
  }

  /** Last SIP status seen, or null. */
  get sipStatus(): number | null {
    return this.#sipStatus;
  }

  /** Whether the call is over. */
  get ended(): boolean {
    return finalStatuses.has(this.#status);
  }

  /** The far end's media as a Stream named by the callId, while media flows. */
  get received(): Stream | undefined {
    return this.#received;
  }

  /** The call's RTP media (ports, stats). */
  get media(): CallMedia {
    return this.#media;
  }

  /** The REST record. */
  record(): CallRecord {
    const i = this.init;
    return {
      custom: {},
      nodeId: i.nodeId,
      appKey: i.appKey,
      sessionId: i.sessionId,
      callId: i.callId,
      parentCallId: null,
      incoming: i.incoming,
      status: this.#status,
      sipStatus: this.#sipStatus,
      rtmpUrl: i.rtmpUrl,
      rtmpStream: i.rtmpStream,
      rtmpStreamStatus: this.#rtmpStreamStatus,
      caller: i.caller,
      callee: i.callee,
      hasAudio: i.hasAudio,
      hasVideo: i.hasVideo,
      sdp: this.#sip.remoteSdp ?? null,
      visibleName: i.visibleName,
      inviteParameters: null,
      mediaProvider: "WebRTC",
      sipMessageRaw: this.#sip.lastMessageText ?? null,
      isMsrp: false,
      target: null,
      holdForTransfer: false,
    };
  }

  /** Why the call ended, once it did. */
  get reason(): string | undefined {
    return this.#reason;
  }

  /** Calls `listener` at every status change until the returned function is called. */
  onStatus(listener: (status: CallStatus, info: CallStatusInfo) => void): () => void {
    this.#statusListeners.add(listener);
    return () => this.#statusListeners.delete(listener);
  }

  /** Calls `listener` with every DTMF digit the far end sends (RFC 2833 or SIP INFO). */
  onDtmf(listener: (digit: string) => void): () => void {
    this.#dtmfListeners.add(listener);
    return () => this.#dtmfListeners.delete(listener);
  }

  /** Sets the RTMP push's status of the record (`RTMP_STREAM_ACTIVE`, ...). */
  set rtmpStreamStatus(status: string) {
    this.#rtmpStreamStatus = status;
  }

  /** What the far end hears (and sees): a local stream, or nothing. */
  sendFrom(source: Stream | undefined): void {
    this.#source = source;
    if (!this.#injected) this.#media.send(source);
  }

  /** Sends a local stream into the call in place of `sendFrom`'s, until `stopInjecting`. */
  inject(stream: Stream): void {
    this.#assertLive("inject a stream");
    this.#injected = stream;
    this.#media.send(stream);
  }

  /** Goes back to the `sendFrom` source. */
  stopInjecting(): void {
    this.#injected = undefined;
    this.#media.send(this.#source);
  }

  /** Whether a stream is injected. */
  get injecting(): boolean {
    return this.#injected !== undefined;
  }

  /** Plays a sound file into the call; resolves when it has played. */
  async injectSound(path: string): Promise<void> {
    this.#assertLive("inject a sound");
    await this.#media.injectSound(path);
  }

  /** Answers an incoming call with `answerSdp` (made when it rang). */
  async answer(): Promise<void> {
    if (!this.incoming) throw new ConflictError(`call ${this.callId} is not an incoming call`);
    if (this.#status !== "RING" || !this.#answerSdp) {
      throw new ConflictError(`call ${this.callId} is ${this.#status}, not ringing`);
    }
    await this.#sip.answer(this.#answerSdp);
  }

  /** Rings an incoming call: 180 to the far end, our answer to its offer kept for answer(). */
  async ring(answerSdp: string, media: NegotiatedMedia): Promise<void> {
    this.#answerSdp = answerSdp;
    this.#pendingMedia = media;
    await this.#sip.ring();
  }

  /** Rejects an incoming call that was not answered. */
  async reject(status: number, reason: string): Promise<void> {
    await this.#sip.reject(status, reason);
  }

  /** Hangs up: CANCEL before an answer, BYE after, a reject for an incoming call ringing. */
  async hangup(): Promise<void> {
    if (this.ended) return;
    if (this.incoming && this.#status === "RING") {
      await this.#sip.reject(603, "Decline").catch(() => {});
      await this.#end({ by: "local", reason: "Declined" });
      return;
    }
    await this.#sip.hangup().catch((err) => {
      this.#context.log.warn("hangup failed", { err });
    });
    await this.#end({ by: "local", reason: "Hung up" });
  }

  /** Puts the far end on hold: a re-INVITE with our audio sendonly. */
  async hold(): Promise<void> {
    this.#assertEstablished("hold");
    await this.#reoffer("sendonly");
    this.#setStatus("HOLD");
  }

  /** Takes the far end off hold. */
  async unhold(): Promise<void> {
    if (this.#status !== "HOLD") {
      throw new ConflictError(`call ${this.callId} is ${this.#status}, not on hold`);
    }
    await this.#reoffer("sendrecv");
    this.#setStatus("ESTABLISHED");
  }

  /** Blind transfer: asks the far end to call `target` (REFER). */
  async transfer(target: string): Promise<void> {
    this.#assertEstablished("transfer");
    const status = await this.#sip.refer(target);
    if (status >= 300) throw new ConflictError(`the far end refused the transfer: ${status}`);
  }

  /** Sends DTMF `digits` the way `type` says. */
  async sendDtmf(digits: string, type: DtmfType): Promise<void> {
    this.#assertEstablished("send DTMF");
    if (type === "RFC2833" || type === "INBAND") {
      await this.#media.sendDtmf(digits, type);
      return;
    }
    for (const digit of digits) {
      const body = `Signal=${digit}\r\nDuration=${infoDigitDurationMs}\r\n`;
      const status = await this.#sip.info("application/dtmf-relay", body);
      if (status >= 300) throw new ConflictError(`the far end refused SIP INFO: ${status}`);
    }
  }

  /** Hangs up (if not over) and frees everything; resolves when done. */
  close(reason: string): Promise<void> {
    if (this.ended) return this.#ending ?? Promise.resolve();
    return this.hangup().then(() => {
      this.#reason ??= reason;
    });
  }

  #assertLive(what: string): void {
    if (this.ended) throw new ConflictError(`call ${this.callId} is over: cannot ${what}`);
  }

  #assertEstablished(what: string): void {
    if (this.#status !== "ESTABLISHED" && this.#status !== "HOLD") {
      throw new ConflictError(`call ${this.callId} is ${this.#status}: cannot ${what}`);
    }
  }

  #progress(sipStatus: number, sdp: string | undefined): void {
    this.#sipStatus = sipStatus;
    if (sipStatus === 100) return this.#setStatus("TRYING");
    if (sdp !== undefined) {
      try {
        this.#startMedia(negotiateAnswer(sdp));
      } catch (err) {
        this.#context.log.warn("early media SDP unusable", { err });
      }
    }
    if (sipStatus === 180) this.#setStatus(sdp !== undefined ? "RING_MEDIA" : "RING");
    else if (sipStatus === 183) this.#setStatus("SESSION_PROGRESS");
    else this.#setStatus(this.#status);
  }

  /** Starts RTP once and publishes what the far end sends. */
  #startMedia(media: NegotiatedMedia | undefined): void {
    const negotiated = media ?? this.#pendingMedia;
    if (!negotiated) throw new BadRequestError("sdp", "no negotiated media");
    if (this.#started) {
      this.#media.update(negotiated);
      return;
    }
    this.#started = true;
    this.#media.start(negotiated, (frame) => this.#received?.push(frame));
    const stream = new MediaStream({
      name: this.callId,
      mediaSessionId: crypto.randomUUID(),
      tracks: this.#media.tracks,
      mediaProvider: "SIP",
      stopProvider: async () => await this.hangup(),
    });
    try {
      this.#context.publish(stream);
      this.#received = stream;
    } catch (err) {
      this.#context.log.warn("the call's stream was not published", { err });
    }
    this.#media.send(this.#injected ?? this.#source);
  }

  async #reoffer(direction: CallMediaOffer["direction"]): Promise<void> {
    const m = this.#media;
    const offer = buildCallOffer({
      address: m.address,
      audioPort: m.audioPort,
      videoPort: m.videoPort,
      direction,
      sessionVersion: ++this.#offerVersion,
      // The codec in use stays first, so a hold does not switch the call's codec.
      preferOpus: m.media.audio?.codec === "OPUS",
    });
    const answer = await this.#sip.reinvite(offer);
    m.update(negotiateAnswer(answer));
  }

  /** The far end's re-INVITE (its hold or unhold): the media follows, we answer. */
  #reinvited(offer: string): string {
    const m = this.#media;
    const { sdp, media } = answerCallOffer(offer, {
      address: m.address,
      audioPort: m.audioPort,
      videoPort: m.videoPort,
      sessionVersion: ++this.#offerVersion,
    });
    m.update(media);
    return sdp;
  }

  #info(contentType: string, body: string): void {
    const type = contentType.toLowerCase();
    if (type === "application/dtmf-relay") {
      const signal = /^\s*signal\s*=\s*(\S)/im.exec(body);
      if (signal) this.#dtmf(signal[1]);
    } else if (type === "application/dtmf") {
      const digit = body.trim();
      if (digit) this.#dtmf(digit[0]);
    }
  }

  #dtmf(digit: string): void {
    this.#context.log.info("DTMF received", { callId: this.callId, digit });
    for (const listener of this.#dtmfListeners) listener(digit);
  }

  #setStatus(status: CallStatus): void {
    if (this.ended) return;
    this.#status = status;
    const info = { sipStatus: this.#sipStatus, reason: this.#reason };
    for (const listener of this.#statusListeners) listener(status, info);
    this.#context.changed(this);
  }

  #end(end: SipCallEnd): Promise<void> {
    this.#ending ??= (async () => {
      if (end.status !== undefined) this.#sipStatus = end.status;
      this.#reason = end.reason;
      const failed = end.by === "timeout" || end.by === "error" ||
        (end.status !== undefined && end.status >= 300);
      const status: CallStatus = end.status !== undefined && busyStatuses.has(end.status)
        ? "BUSY"
        : failed
        ? "FAILED"
        : "FINISH";
      this.#context.log.info("call ended", { callId: this.callId, ...end, status });
      this.#setStatus(status);
      const stream = this.#received;
      if (stream) {
        stream.end();
        this.#context.unpublish(stream);
      }
      await this.#media.close();
      this.#context.ended(this);
    })();
    return this.#ending;
  }
}
