/**
 * RTSP pull: a camera played over RTSP and published as a Stream. RTP is reordered,
 * depacketized and placed on the stream's timeline; when the camera drops, the provider
 * reconnects with backoff and the same Stream carries on from the next keyframe, so its
 * readers never notice more than a gap.
 */
import { ParseError } from "../../core/errors.ts";
import type { Logger } from "../../core/log.ts";
import { redactUri } from "../../core/redact.ts";
import type { MediaFrame, Track } from "../frame.ts";
import { VideoDtsDeriver } from "../codecs/dts_deriver.ts";
import { findH264ParameterSets, parseH264Sps } from "../codecs/h264.ts";
import { attribute } from "../formats/sdp/sdp.ts";
import { RtspClient, type RtspTransport } from "../protocols/rtsp/client.ts";
import { RtspError, RtspStatusError, RtspTimeoutError } from "../protocols/rtsp/errors.ts";
import type { RtpInfoEntry } from "../protocols/rtsp/headers.ts";
import { resolveControl } from "../protocols/rtsp/url.ts";
import type { UdpPortRange } from "../protocols/rtsp/udp_pair.ts";
import { parseRtpPacket } from "../rtp/packet.ts";
import { parseSenderReports } from "../rtp/rtcp.ts";
import { RtpReorderBuffer } from "../rtp/reorder.ts";
import { type SdpTrack, sdpTrack } from "../rtp/sdp_track.ts";
import { RtpTimeline } from "../rtp/timeline.ts";
import { Stream } from "../stream.ts";

/** Value of `mediaProvider` in the records of RTSP streams. */
export const rtspMediaProvider = "RTSP";
/** Longest wait for the first media packet after PLAY, in milliseconds. */
export const firstPacketTimeoutMs = 10_000;
/** With transport "auto": wait for a UDP packet before trying TCP instead, in milliseconds. */
export const udpFallbackTimeoutMs = 2000;
/** First delay before a reconnection attempt, in milliseconds. */
export const reconnectInitialDelayMs = 250;
/** Longest delay between reconnection attempts, in milliseconds. */
export const reconnectMaxDelayMs = 10_000;
/** Factor by which the delay grows after each failed attempt. */
export const reconnectBackoffFactor = 2;

/** How the pull asks for media: UDP first then TCP ("auto"), or only one of them. */
export type RtspTransportPolicy = "auto" | RtspTransport;

/** Status of a pull: playing, or waiting to get the camera back. */
export type RtspPullStatus = "PLAYING" | "RECONNECTING";

/** What an RTSP pull needs. */
export interface RtspPullOptions {
  /** Camera URL (credentials included). */
  uri: string;
  /** Name of the published stream. */
  name: string;
  mediaSessionId: string;
  transport: RtspTransportPolicy;
  /** Address and ports of UDP media sockets. */
  udp: UdpPortRange;
  /** Throws when a host (the camera's, or a redirect's) may not be reached. */
  checkHost?: (hostname: string) => void;
  log: Logger;
}

/** One received track of the current session. */
interface SessionTrack {
  sdp: SdpTrack;
  reorder: RtpReorderBuffer;
  control: string;
}

/** Reads an RTSP camera into a Stream, reconnecting when it drops. */
export class RtspPullProvider {
  /** Times the camera was reconnected. */
  reconnects = 0;
  /** Packets or payloads dropped as malformed. */
  malformed = 0;
  /** Transport of the current session. */
  transport: RtspTransport = "tcp";
  #options: RtspPullOptions;
  #log: Logger;
  #stream: Stream | undefined;
  #client: RtspClient | undefined;
  #byMedia: (SessionTrack | undefined)[] = [];
  #timeline: RtpTimeline | undefined;
  /** Decode times of each video track, by track id: RTP carries only presentation times. */
  #dts = new Map<number, VideoDtsDeriver>();
  #waitKeyframe = true;
  #status: RtspPullStatus = "PLAYING";
  #stopped = false;
  #loop: Promise<void> = Promise.resolve();
  #wake: (() => void) | undefined;
  #emit = (frame: MediaFrame) => this.#pushFrame(frame);
  /** Gaps in RTP sequence numbers (packets lost), over every session. */
  #sequenceGaps = 0;

  private constructor(options: RtspPullOptions) {
    this.#options = options;
    this.#log = options.log;
  }

  /**
   * Connects, sets up and plays the camera; resolves once media flows. Fails with the
   * RtspError or ParseError that stopped it, leaving nothing open.
   */
  static async start(options: RtspPullOptions): Promise<RtspPullProvider> {
    const provider = new RtspPullProvider(options);
    await provider.#connect();
    provider.#loop = provider.#run();
    return provider;
  }

  /** The published stream. */
  get stream(): Stream {
    return this.#stream!;
  }

  /** PLAYING, or RECONNECTING while the camera is away. */
  get status(): RtspPullStatus {
    return this.#status;
  }

  /** Settles when the pull has ended (stopped). */
  get done(): Promise<void> {
    return this.#loop;
  }

  /** Sends TEARDOWN, stops reconnecting and ends the stream. Idempotent. */
  async stop(): Promise<void> {
    if (this.#stopped) return await this.#loop;
    this.#stopped = true;
    this.#wake?.();
    await this.#client?.teardown();
    await this.#loop;
    this.#stream?.end();
    this.#log.info("rtsp pull stopped", {
      uri: this.#redacted(),
      reconnects: this.reconnects,
      malformed: this.malformed,
      sequenceGaps: this.#sequenceGaps,
      syncCorrections: this.#timeline?.corrections ?? 0,
      dtsCorrections: [...this.#dts.values()].reduce((n, d) => n + d.corrections, 0),
    });
  }

  /** Plays the camera over the configured transport(s), replacing the current session. */
  async #connect(): Promise<void> {
    const policy = this.#options.transport;
    const transports: RtspTransport[] = policy === "auto" ? ["udp", "tcp"] : [policy];
    for (const [i, transport] of transports.entries()) {
      const last = i === transports.length - 1;
      // Packets of a client that is no longer the current one (torn down) are ignored.
      const own: { client?: RtspClient } = {};
      const opened = await RtspClient.open({
        url: this.#options.uri,
        udp: this.#options.udp,
        checkHost: this.#options.checkHost,
        onRtp: (media, data) => {
          if (own.client === this.#client) this.#onRtp(media, data);
        },
        onRtcp: (media, data) => {
          if (own.client === this.#client) this.#onRtcp(media, data);
        },
        onPlay: (rtpInfo) => {
          if (own.client === this.#client) this.#onPlay(rtpInfo);
        },
      });
      const client = opened.client;
      own.client = client;
      try {
        const { sdp } = opened.description;
        const tracks: SessionTrack[] = [];
        this.#byMedia = [];
        for (const [media, section] of sdp.media.entries()) {
          const selected = sdpTrack(section, tracks.length);
          if (!selected) continue;
          const track: SessionTrack = {
            sdp: selected,
            control: resolveControl(opened.description.baseUrl, attribute(section, "control")),
            reorder: new RtpReorderBuffer((packet, afterGap) => {
              if (afterGap) {
                this.#sequenceGaps++;
                selected.depacketizer.reset();
              }
              try {
                selected.depacketizer.push(packet, this.#emit);
              } catch (err) {
                if (!(err instanceof ParseError)) throw err;
                this.malformed++;
              }
            }),
          };
          tracks.push(track);
          this.#byMedia[media] = track;
        }
        if (tracks.length === 0) {
          throw new RtspError("the camera offers no track in a codec the server carries");
        }
        this.#adoptTracks(tracks.map((t) => t.sdp.track));
        await client.setup(
          this.#byMedia.flatMap((t, media) => t ? [{ media, control: t.control }] : []),
          transport,
        );
        this.#client = client;
        this.#waitKeyframe = true;
        for (const deriver of this.#dts.values()) deriver.restart();
        await client.play();
        await client.firstPacket(last ? firstPacketTimeoutMs : udpFallbackTimeoutMs);
        this.transport = transport;
        return;
      } catch (err) {
        if (this.#client === client) this.#client = undefined;
        await client.teardown();
        const udpRefused = err instanceof RtspTimeoutError ||
          (err instanceof RtspStatusError && err.status === 461);
        if (last || !udpRefused) throw err;
        this.#log.info("rtsp udp gave no media, trying tcp", { uri: this.#redacted() });
      }
    }
  }

  /** First session: creates the stream. Later ones: the tracks must be the same codecs. */
  #adoptTracks(tracks: Track[]): void {
    if (!this.#stream) {
      this.#stream = new Stream({
        name: this.#options.name,
        mediaSessionId: this.#options.mediaSessionId,
        tracks,
        mediaProvider: rtspMediaProvider,
        stopProvider: () => this.stop(),
      });
      this.#timeline = new RtpTimeline(tracks);
      for (const track of tracks) {
        if (track.kind === "video") this.#dts.set(track.id, new VideoDtsDeriver(track));
      }
      return;
    }
    const old = this.#stream.tracks;
    if (old.length !== tracks.length || old.some((t, i) => t.codec !== tracks[i].codec)) {
      throw new RtspError("the camera came back with other tracks than before");
    }
  }

  #onPlay(rtpInfo: RtpInfoEntry[]): void {
    const tracks = this.#byMedia.filter((t) => t !== undefined);
    this.#timeline!.startSession(
      tracks.map((t) => rtpInfo.find((e) => sameControl(e.url, t.control))?.rtptime),
    );
  }

  #onRtp(media: number, data: Uint8Array): void {
    const track = this.#byMedia[media];
    if (!track) return;
    let packet;
    try {
      packet = parseRtpPacket(data);
    } catch (err) {
      if (!(err instanceof ParseError)) throw err;
      this.malformed++;
      return;
    }
    if (packet.payloadType !== track.sdp.payloadType) return;
    track.reorder.push(packet);
  }

  #onRtcp(media: number, data: Uint8Array): void {
    const track = this.#byMedia[media];
    if (!track) return;
    try {
      for (const report of parseSenderReports(data)) {
        this.#timeline!.senderReport(track.sdp.track.id, report);
      }
    } catch (err) {
      if (!(err instanceof ParseError)) throw err;
      this.malformed++;
    }
  }

  #pushFrame(frame: MediaFrame): void {
    const pts = this.#timeline!.pts(frame.trackId, frame.pts);
    // The first packets of a session can precede its RTP-Info anchor by a few ticks.
    if (pts < 0) return;
    const track = this.#stream!.tracks[frame.trackId];
    if (track.kind === "video") {
      if (this.#waitKeyframe && !frame.keyframe) return;
      this.#waitKeyframe = false;
      if (frame.keyframe && frame.codec === "H264") this.#learnH264Config(track, frame.data);
    }
    frame.pts = pts;
    frame.dts = pts;
    this.#dts.get(frame.trackId)?.derive(frame);
    this.#stream!.push(frame);
  }

  /** Cameras that leave sprop-parameter-sets out of the SDP send them in band. */
  #learnH264Config(track: Track, accessUnit: Uint8Array): void {
    if (track.config && track.width) return;
    try {
      const { sps, pps } = findH264ParameterSets(accessUnit);
      if (sps.length === 0 || pps.length === 0) return;
      const info = parseH264Sps(sps[0]);
      track.config = {
        codec: "H264",
        sps: sps.map((n) => n.slice()),
        pps: pps.map((n) => n.slice()),
      };
      track.width = info.width;
      track.height = info.height;
    } catch (err) {
      if (!(err instanceof ParseError)) throw err;
      this.malformed++;
    }
  }

  /** Waits for the session to drop, then reconnects with backoff, until stopped. */
  async #run(): Promise<void> {
    while (!this.#stopped) {
      const reason = await this.#client!.closed;
      if (this.#stopped) break;
      this.#status = "RECONNECTING";
      this.#client = undefined;
      this.#log.warn("rtsp camera dropped", { uri: this.#redacted(), reason: reason.message });
      let delayMs = reconnectInitialDelayMs;
      for (;;) {
        await this.#sleep(delayMs);
        if (this.#stopped) return;
        try {
          await this.#connect();
          if (this.#stopped) {
            // stop() ran while this session was being opened: it is not torn down yet.
            await (this.#client as RtspClient | undefined)?.teardown();
            return;
          }
          this.reconnects++;
          this.#status = "PLAYING";
          this.#log.info("rtsp camera back", { uri: this.#redacted(), transport: this.transport });
          break;
        } catch (err) {
          if (!(err instanceof RtspError || err instanceof ParseError)) throw err;
          this.#log.debug("rtsp reconnect failed", { uri: this.#redacted(), err: err.message });
          delayMs = Math.min(delayMs * reconnectBackoffFactor, reconnectMaxDelayMs);
        }
      }
    }
  }

  #sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(done, ms);
      function done() {
        clearTimeout(timer);
        resolve();
      }
      this.#wake = done;
    });
  }

  /** The camera URL without its secrets, for logs. */
  #redacted(): string {
    return redactUri(this.#options.uri);
  }
}

/** True when an RTP-Info url names the media whose control URL is `control`. */
function sameControl(url: string, control: string): boolean {
  if (url === control) return true;
  const tail = (u: string) => u.replace(/\/+$/, "").split("/").pop() ?? "";
  return tail(url) === tail(control);
}
