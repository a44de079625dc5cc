/**
 * One RTSP player of a stream: the tracks its session set up, where their packets go (the
 * RTSP connection's interleaved channels, or the client's UDP ports), and its place in the
 * stream's fan-out (rtsp_fanout.ts), which packetizes each frame once for all the players.
 * A TCP player writes the fan-out's bytes one bundle at a time, each waited for, so a slow
 * client falls behind (and skips to a keyframe) instead of its socket's queue growing; one
 * that stops reading entirely is dropped by the connection's write timeout. A player gets a
 * sender report of a track before its first packets of it, so it aligns the tracks at once.
 */
import type { Track } from "../frame.ts";
import type { RtspServerConn } from "../protocols/rtsp/server_conn.ts";
import type { UdpPortPair } from "../protocols/rtsp/udp_pair.ts";
import type { Stream } from "../stream.ts";
import { waitingForKey } from "./fanout_ring.ts";
import {
  interleavedHeaderBytes,
  type RtspBundle,
  RtspFanout,
  type RtspFanoutPlayer,
  type RtspLayout,
  unmapped,
} from "./rtsp_fanout.ts";

/** Where a track's packets go. */
export type RtspTrackTransport =
  | { protocol: "tcp"; interleaved: [number, number] }
  | { protocol: "udp"; pair: UdpPortPair; clientPorts: [number, number]; address: string };

/** The report before a bundle fails only when the bundle's write does too. */
const ignoreWrite = () => {};

/** A set-up track of the player. */
interface PlayTrack {
  readonly transport: RtspTrackTransport;
  /** Control URL the client set the track up with, for RTP-Info. */
  readonly url: string;
  /** A sender report of the track went out to this player since it started. */
  reported: boolean;
}

/** An RTSP player of one stream. */
export class RtspPlay implements RtspFanoutPlayer {
  readonly stream: Stream;
  next = waitingForKey;
  writing = false;
  started = false;
  readonly #conn: RtspServerConn;
  readonly #fanout: RtspFanout;
  readonly #tracks = new Map<number, PlayTrack>();
  #playing = false;
  /** RTP-Info values per track id of the last PLAY. */
  #info = new Map<number, string>();
  /** The interleaved channels of the TCP tracks, fixed at PLAY. */
  #layout: RtspLayout = { key: "", map: new Uint8Array(0) };
  /** Set-up UDP tracks by default channel (`RtspFanout.channel`), fixed at PLAY. */
  #udpByChannel = new Map<number, PlayTrack>();

  /** `cname`: the canonical name of the session, in every sender report. */
  constructor(stream: Stream, conn: RtspServerConn, cname: string) {
    this.stream = stream;
    this.#conn = conn;
    this.#fanout = RtspFanout.of(stream, cname);
  }

  /** Ids of the tracks set up. */
  get trackIds(): number[] {
    return [...this.#tracks.keys()];
  }

  /** True while frames are read and sent. */
  get playing(): boolean {
    return this.#playing;
  }

  /** The interleaved channels in use by set-up tracks other than `trackId`. */
  channelsInUse(trackId: number): Set<number> {
    const used = new Set<number>();
    for (const [id, t] of this.#tracks) {
      if (id === trackId || t.transport.protocol !== "tcp") continue;
      used.add(t.transport.interleaved[0]).add(t.transport.interleaved[1]);
    }
    return used;
  }

  /** Sets a track up (again); returns its SSRC (the stream's, shared by its players). */
  async setup(track: Track, transport: RtspTrackTransport, url: string): Promise<number> {
    const old = this.#tracks.get(track.id);
    if (old?.transport.protocol === "udp") await old.transport.pair.close();
    this.#tracks.set(track.id, { transport, url, reported: false });
    return this.#fanout.ssrc(track.id);
  }

  /**
   * Takes a place in the stream's fan-out at its last keyframe; returns the RTP-Info value:
   * per track its URL and, when the start is already known, the sequence number of its
   * first packet and the RTP time of the start.
   */
  play(): string {
    if (!this.#playing) {
      this.#playing = true;
      this.started = false;
      this.writing = false;
      this.next = waitingForKey;
      for (const t of this.#tracks.values()) t.reported = false;
      this.#route();
      this.#info = this.#fanout.add(this, this.trackIds);
    }
    return [...this.#tracks].map(([id, t]) => {
      const info = this.#info.get(id);
      return info ? `url=${t.url};${info}` : `url=${t.url}`;
    }).join(",");
  }

  /** Starts sending; call after the PLAY answer is written. */
  start(): void {
    if (!this.#playing || this.started) return;
    this.started = true;
    this.#fanout.feed(this);
  }

  /** Stops sending (PAUSE): the next PLAY starts again at a keyframe. */
  pause(): Promise<void> {
    if (this.#playing) {
      this.#playing = false;
      this.started = false;
      this.#fanout.remove(this);
    }
    return Promise.resolve();
  }

  /** Stops and frees the UDP sockets. */
  async close(): Promise<void> {
    await this.pause();
    await Promise.all(
      [...this.#tracks.values()].map((t) =>
        t.transport.protocol === "udp" ? t.transport.pair.close() : undefined
      ),
    );
  }

  /** Fixes where each default channel of the fan-out goes: the TCP layout, the UDP tracks. */
  #route(): void {
    const map = new Uint8Array(256).fill(unmapped);
    const keys: string[] = [];
    this.#udpByChannel.clear();
    for (const [id, t] of [...this.#tracks].sort(([a], [b]) => a - b)) {
      const channel = this.#fanout.channel(id);
      if (t.transport.protocol === "udp") {
        this.#udpByChannel.set(channel, t).set(channel + 1, t);
        continue;
      }
      const [rtp, rtcp] = t.transport.interleaved;
      map[channel] = rtp;
      map[channel + 1] = rtcp;
      keys.push(`${id}:${rtp}-${rtcp}`);
    }
    this.#layout = { key: keys.join(","), map };
  }

  /** Sends a bundle of the fan-out (see `RtspFanoutPlayer.send`). */
  send(bundle: RtspBundle): boolean {
    if (this.#conn.closed) return true;
    // A sender report of a track before the player's first packets of it.
    let reports: Uint8Array[] | undefined;
    for (const part of bundle.parts) {
      const track = this.#tracks.get(part.trackId);
      if (!track || track.reported) continue;
      track.reported = true;
      if (part.hasReport) continue;
      const transport = track.transport;
      if (transport.protocol === "tcp") {
        (reports ??= []).push(this.#fanout.reportAt(part, transport.interleaved[1]));
      } else {
        const framed = this.#fanout.reportAt(part, 1);
        const { pair, clientPorts, address } = transport;
        pair.send(framed.subarray(interleavedHeaderBytes), true, clientPorts[1], address);
      }
    }
    if (this.#udpByChannel.size > 0) this.#sendUdp(bundle.bytes);
    if (this.#layout.key === "") return true;
    const bytes = this.#fanout.bytesOn(bundle, this.#layout);
    if (bytes.length === 0) return true;
    // Written in order: the connection queues writes.
    for (const report of reports ?? []) this.#conn.writeThen(report, ignoreWrite);
    this.#conn.writeThen(bytes, this.#written);
    return false;
  }

  /** Sends the packets of the UDP tracks in `bytes` to the client's ports. */
  #sendUdp(bytes: Uint8Array): void {
    for (let at = 0; at < bytes.length;) {
      const end = at + interleavedHeaderBytes + ((bytes[at + 2] << 8) | bytes[at + 3]);
      const channel = bytes[at + 1];
      const transport = this.#udpByChannel.get(channel)?.transport;
      if (transport?.protocol === "udp") {
        // RTCP on the odd default channel.
        const rtcp = (channel & 1) === 1;
        transport.pair.send(
          bytes.subarray(at + interleavedHeaderBytes, end),
          rtcp,
          transport.clientPorts[rtcp ? 1 : 0],
          transport.address,
        );
      }
      at = end;
    }
  }

  /** The stream ended and everything was sent: the client learns it from the connection's end. */
  finished(): void {
    this.#playing = false;
    this.#conn.close();
  }

  /** Ends a bundle's write: the next goes out, or the player leaves when it failed. */
  #written = (err?: Error): void => {
    this.writing = false;
    if (!err) return this.#fanout.feed(this);
    void this.pause();
    this.#conn.close();
  };
}
