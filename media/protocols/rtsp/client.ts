/**
 * An RTSP 1.0 client that plays a camera (RFC 2326): OPTIONS, DESCRIBE (following
 * redirects, answering Basic and Digest challenges), SETUP over TCP interleaved channels or
 * UDP port pairs, PLAY, keepalives within the session timeout, TEARDOWN. Media packets go
 * to callbacks by media index; the client only watches that they keep coming.
 */
import { ParseError } from "../../../core/errors.ts";
import { attribute, parseSdp, type Sdp } from "../../formats/sdp/sdp.ts";
import { Authenticator, pickChallenge } from "./auth.ts";
import { RtspConnectionError, RtspError, RtspStatusError, RtspTimeoutError } from "./errors.ts";
import {
  formatTransport,
  parsePublic,
  parseRtpInfo,
  parseSession,
  parseTransport,
  type RtpInfoEntry,
  type TransportSpec,
} from "./headers.ts";
import { type RtspIncoming, type RtspResponse, RtspStreamParser, writeRequest } from "./message.ts";
import { parseRtspUrl, resolveControl, type RtspUrl } from "./url.ts";
import { UdpPortPair, type UdpPortRange } from "./udp_pair.ts";

/** Longest wait for the TCP (or TLS) connection to the camera, in milliseconds. */
export const connectTimeoutMs = 5000;
/** Longest wait for the answer to a request, in milliseconds. */
export const responseTimeoutMs = 10_000;
/** Longest wait for the answer to TEARDOWN before the connection is closed anyway, in ms. */
export const teardownTimeoutMs = 1000;
/** Most redirects (3xx with Location) followed for one DESCRIBE. */
export const maxRedirects = 3;
/** Time without any RTP packet after which a playing session counts as dropped, in ms. */
export const noPacketTimeoutMs = 5000;
/** Share of the session timeout after which a keepalive is sent. */
export const keepaliveTimeoutShare = 0.5;
/** Bytes read from the connection at once. */
export const readChunkBytes = 64 * 1024;
/** User-Agent of the requests. */
export const userAgent = "media-server-rtsp/1";

/** How RTP reaches the client. */
export type RtspTransport = "tcp" | "udp";

/** What a client needs besides its URL. */
export interface RtspClientOptions {
  /** Camera URL, credentials included when the camera needs them. */
  url: string;
  /** Address and ports for UDP media sockets. */
  udp: UdpPortRange;
  /**
   * Throws when a host may not be reached; asked before every connection, redirects
   * included, so a camera cannot send the client where the caller could not.
   */
  checkHost?: (hostname: string) => void;
  /** Receives the RTP packets of media `media` (index of the SDP media section). */
  onRtp: (media: number, data: Uint8Array) => void;
  /** Receives the RTCP packets of media `media`. */
  onRtcp: (media: number, data: Uint8Array) => void;
  /**
   * Called with the RTP-Info of the PLAY answer before any packet that follows it is
   * delivered, so timestamps can be anchored from the first packet on.
   */
  onPlay: (rtpInfo: RtpInfoEntry[]) => void;
}

/** A described camera stream. */
export interface RtspDescription {
  sdp: Sdp;
  /** Aggregate control URL: what PLAY and media controls are relative to. */
  baseUrl: string;
}

/** One media section to set up: its index in the SDP and its control URL. */
export interface RtspSetupItem {
  media: number;
  control: string;
}

interface Pending {
  method: string;
  resolve: (res: RtspResponse) => void;
  reject: (err: Error) => void;
}

async function connectTcp(url: RtspUrl): Promise<Deno.Conn> {
  const attempt = url.secure
    ? Deno.connectTls({ hostname: url.hostname, port: url.port })
    : Deno.connect({ hostname: url.hostname, port: url.port });
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () =>
        reject(
          new RtspTimeoutError(
            `no connection to ${url.hostname}:${url.port} within ${connectTimeoutMs} ms`,
          ),
        ),
      connectTimeoutMs,
    );
  });
  try {
    return await Promise.race([attempt, timeout]);
  } catch (err) {
    attempt.then((conn) => conn.close(), () => {});
    if (err instanceof RtspTimeoutError) throw err;
    throw new RtspConnectionError(
      `cannot connect to ${url.hostname}:${url.port}: ${(err as Error).message}`,
      { cause: err },
    );
  } finally {
    clearTimeout(timer);
  }
}

const sdpDecoder = new TextDecoder();

/** An RTSP session with one camera over one connection. */
export class RtspClient {
  #options: RtspClientOptions;
  #url: RtspUrl;
  #conn: Deno.Conn;
  #parser = new RtspStreamParser();
  #cseq = 0;
  #session: string | undefined;
  #sessionTimeoutSeconds = 60;
  #auth: Authenticator | undefined;
  #public = new Set<string>();
  #pending: Pending | undefined;
  #queue: Promise<unknown> = Promise.resolve();
  #channels = new Map<number, { media: number; rtcp: boolean }>();
  #udp: UdpPortPair[] = [];
  #baseUrl = "";
  #finished = false;
  #closed = Promise.withResolvers<Error>();
  #readLoop: Promise<void>;
  #keepalive: ReturnType<typeof setInterval> | undefined;
  #watchdog: ReturnType<typeof setInterval> | undefined;
  #lastPacketMs = 0;
  #firstPacket = Promise.withResolvers<void>();
  #gotPacket = false;

  private constructor(options: RtspClientOptions, url: RtspUrl, conn: Deno.Conn) {
    this.#options = options;
    this.#url = url;
    this.#conn = conn;
    this.#firstPacket.promise.catch(() => {});
    this.#readLoop = this.#read();
  }

  /**
   * Connects and describes the stream, following redirects. Fails with RtspConnectionError
   * (unreachable), RtspTimeoutError, RtspStatusError (DESCRIBE refused) or ParseError (bad
   * URL or SDP); nothing stays open then.
   */
  static async open(
    options: RtspClientOptions,
  ): Promise<{ client: RtspClient; description: RtspDescription }> {
    let url = parseRtspUrl(options.url);
    for (let redirects = 0;; redirects++) {
      options.checkHost?.(url.hostname);
      const client = new RtspClient(options, url, await connectTcp(url));
      try {
        const location = await client.#describe();
        if (typeof location !== "string") return { client, description: location };
        if (redirects >= maxRedirects) throw new RtspError(`more than ${maxRedirects} redirects`);
        const next = parseRtspUrl(location);
        // A redirect without credentials keeps the ones of the original URL.
        if (!next.user) Object.assign(next, { user: url.user, password: url.password });
        url = next;
      } catch (err) {
        await client.close();
        throw err;
      }
      await client.close();
    }
  }

  /** Settles with the reason once the session has ended (error, drop or close). */
  get closed(): Promise<Error> {
    return this.#closed.promise;
  }

  /** Sets up the given media sections over `transport`. */
  async setup(items: readonly RtspSetupItem[], transport: RtspTransport): Promise<void> {
    for (const [i, item] of items.entries()) {
      let spec: TransportSpec;
      let pair: UdpPortPair | undefined;
      if (transport === "tcp") {
        spec = { protocol: "tcp", interleaved: [2 * i, 2 * i + 1] };
      } else {
        pair = await UdpPortPair.open(this.#options.udp);
        this.#udp.push(pair);
        spec = { protocol: "udp", clientPorts: [pair.rtpPort, pair.rtpPort + 1] };
      }
      const res = await this.#request("SETUP", item.control, [[
        "Transport",
        formatTransport(spec),
      ]]);
      if (res.status !== 200) throw new RtspStatusError("SETUP", res.status, res.reason);
      const session = res.headers.get("session");
      if (session) {
        const parsed = parseSession(session);
        this.#session = parsed.id;
        this.#sessionTimeoutSeconds = parsed.timeoutSeconds;
      } else if (!this.#session) {
        throw new RtspError("SETUP answer without a Session");
      }
      const transportHeader = res.headers.get("transport");
      if (!transportHeader) throw new RtspError("SETUP answer without a Transport");
      const reply = parseTransport(transportHeader);
      if (reply.protocol !== spec.protocol) {
        throw new RtspError(`asked for ${spec.protocol} transport, the server chose another`);
      }
      if (reply.protocol === "tcp") {
        this.#channels.set(reply.interleaved[0], { media: item.media, rtcp: false });
        this.#channels.set(reply.interleaved[1], { media: item.media, rtcp: true });
      } else {
        const peer = (this.#conn.remoteAddr as Deno.NetAddr).hostname;
        pair!.listen(
          peer,
          (data) => this.#onRtp(item.media, data),
          (data) => this.#options.onRtcp(item.media, data),
        );
      }
    }
  }

  /** Starts playing (the RTP-Info of the answer goes to `onPlay`). */
  async play(): Promise<void> {
    const res = await this.#request("PLAY", this.#baseUrl, [["Range", "npt=0.000-"]]);
    if (res.status !== 200) throw new RtspStatusError("PLAY", res.status, res.reason);
    this.#lastPacketMs = performance.now();
    const keepaliveMethod = this.#public.has("GET_PARAMETER") ? "GET_PARAMETER" : "OPTIONS";
    this.#keepalive = setInterval(() => {
      this.#request(keepaliveMethod, this.#baseUrl).catch((err) => this.#finish(err));
    }, this.#sessionTimeoutSeconds * 1000 * keepaliveTimeoutShare);
    this.#watchdog = setInterval(() => {
      if (performance.now() - this.#lastPacketMs > noPacketTimeoutMs) {
        this.#finish(new RtspTimeoutError(`no media for ${noPacketTimeoutMs} ms`));
      }
    }, noPacketTimeoutMs / 4);
  }

  /** Resolves at the first RTP packet; rejects after `timeoutMs` or when the session ends. */
  async firstPacket(timeoutMs: number): Promise<void> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () => reject(new RtspTimeoutError(`no media within ${timeoutMs} ms of PLAY`)),
        timeoutMs,
      );
    });
    try {
      await Promise.race([this.#firstPacket.promise, timeout]);
    } finally {
      clearTimeout(timer);
    }
  }

  /** Sends TEARDOWN (waiting at most `teardownTimeoutMs`) and closes. */
  async teardown(): Promise<void> {
    if (this.#session && !this.#finished) {
      try {
        await this.#request("TEARDOWN", this.#baseUrl, [], teardownTimeoutMs);
      } catch {
        // The camera may be gone; the connection closes either way.
      }
    }
    await this.close();
  }

  /** Closes the connection and the UDP sockets. Idempotent. */
  async close(): Promise<void> {
    this.#finish(new RtspError("closed"));
    await this.#readLoop;
    await Promise.all(this.#udp.map((p) => p.close()));
  }

  /** OPTIONS then DESCRIBE; the description, or the Location of a redirect. */
  async #describe(): Promise<RtspDescription | string> {
    const href = this.#url.href;
    const options = await this.#request("OPTIONS", href);
    if (options.status === 200) this.#public = parsePublic(options.headers.get("public"));
    const res = await this.#request("DESCRIBE", href, [["Accept", "application/sdp"]]);
    const location = res.headers.get("location");
    if (res.status >= 300 && res.status < 400 && location) return location;
    if (res.status !== 200) throw new RtspStatusError("DESCRIBE", res.status, res.reason);
    const sdp = parseSdp(sdpDecoder.decode(res.body));
    const base = res.headers.get("content-base") ?? res.headers.get("content-location") ?? href;
    this.#baseUrl = resolveControl(base, attribute(sdp, "control"));
    return { sdp, baseUrl: this.#baseUrl };
  }

  /** Sends a request after the ones before it have been answered; answers a 401 once. */
  #request(
    method: string,
    url: string,
    extra: [string, string][] = [],
    timeoutMs = responseTimeoutMs,
  ): Promise<RtspResponse> {
    const run = async () => {
      let res = await this.#exchange(method, url, extra, timeoutMs);
      if (res.status === 401 && this.#url.user) {
        const challenge = pickChallenge(res.headers.getAll("www-authenticate"));
        if (challenge) {
          this.#auth = new Authenticator(this.#url.user, this.#url.password, challenge);
          res = await this.#exchange(method, url, extra, timeoutMs);
        }
      }
      return res;
    };
    const result = this.#queue.then(run, run);
    this.#queue = result.catch(() => {});
    return result;
  }

  #exchange(
    method: string,
    url: string,
    extra: [string, string][],
    timeoutMs: number,
  ): Promise<RtspResponse> {
    if (this.#finished) return Promise.reject(new RtspConnectionError("connection closed"));
    const headers: [string, string][] = [["CSeq", String(++this.#cseq)], ["User-Agent", userAgent]];
    if (this.#auth) headers.push(["Authorization", this.#auth.authorization(method, url)]);
    if (this.#session) headers.push(["Session", this.#session]);
    headers.push(...extra);
    const bytes = writeRequest({ method, url, headers });
    return new Promise<RtspResponse>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#pending = undefined;
        reject(new RtspTimeoutError(`${method} got no answer within ${timeoutMs} ms`));
      }, timeoutMs);
      this.#pending = {
        method,
        resolve: (res) => {
          clearTimeout(timer);
          resolve(res);
        },
        reject: (err) => {
          clearTimeout(timer);
          reject(err);
        },
      };
      this.#write(bytes).catch((err) => {
        this.#finish(new RtspConnectionError(`write failed: ${(err as Error).message}`));
      });
    });
  }

  async #write(bytes: Uint8Array): Promise<void> {
    let written = 0;
    while (written < bytes.length) written += await this.#conn.write(bytes.subarray(written));
  }

  async #read(): Promise<void> {
    const buf = new Uint8Array(readChunkBytes);
    let reason: Error = new RtspConnectionError("the server closed the connection");
    try {
      for (;;) {
        const n = await this.#conn.read(buf);
        if (n === null) break;
        this.#parser.push(buf.subarray(0, n));
        for (let m = this.#parser.next(); m !== undefined; m = this.#parser.next()) {
          this.#dispatch(m);
        }
      }
    } catch (err) {
      reason = err instanceof ParseError
        ? new RtspError(`malformed data from the server: ${err.message}`, { cause: err })
        : err instanceof RtspError
        ? err
        : new RtspConnectionError(`connection failed: ${(err as Error).message}`, { cause: err });
    }
    this.#finish(reason);
  }

  #dispatch(m: RtspIncoming): void {
    if (m.kind === "interleaved") {
      const channel = this.#channels.get(m.channel);
      if (!channel) return;
      if (channel.rtcp) this.#options.onRtcp(channel.media, m.data);
      else this.#onRtp(channel.media, m.data);
    } else if (m.kind === "response") {
      const pending = this.#pending;
      this.#pending = undefined;
      if (pending?.method === "PLAY" && m.status === 200) {
        this.#options.onPlay(parseRtpInfo(m.headers.get("rtp-info") ?? ""));
      }
      pending?.resolve(m);
    }
    // Requests of the server (ANNOUNCE, GET_PARAMETER) need nothing from a player.
  }

  #onRtp(media: number, data: Uint8Array): void {
    this.#lastPacketMs = performance.now();
    if (!this.#gotPacket) {
      this.#gotPacket = true;
      this.#firstPacket.resolve();
    }
    this.#options.onRtp(media, data);
  }

  #finish(reason: Error): void {
    if (this.#finished) return;
    this.#finished = true;
    clearInterval(this.#keepalive);
    clearInterval(this.#watchdog);
    const pending = this.#pending;
    this.#pending = undefined;
    pending?.reject(reason);
    this.#firstPacket.reject(reason);
    try {
      this.#conn.close();
    } catch {
      // closed already
    }
    for (const pair of this.#udp) pair.close();
    this.#closed.resolve(reason);
  }
}
