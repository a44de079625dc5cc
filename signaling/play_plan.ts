/**
 * How an offer to play a stream is served, whoever sent it (the Web SDK's `playStream`, a
 * WHEP POST): RTP forwarded as it came from a WebRTC publisher, packets made from the
 * frames of any other stream (audio converted to Opus where the player lacks the source's
 * codec), or a rendition of the picture when the request asks for a size or bitrate.
 */
import type { Logger } from "../core/log.ts";
import type { RegisteredStream } from "../core/stream_registry.ts";
import type { Services } from "../core/services.ts";
import { convertedAudio } from "../media/engine/audio_conversion.ts";
import type { StreamClient } from "../media/protocols/webrtc/client.ts";
import {
  matchFramePlayCodec,
  matchPlayCodec,
  type NegotiatedCodec,
  pickPublishCodec,
} from "../media/protocols/webrtc/codecs.ts";
import { requestedIceTransport } from "../media/protocols/webrtc/ice_tcp.ts";
import type { PeerAddress } from "../media/protocols/webrtc/peer.ts";
import type { SdpMedia } from "../media/protocols/webrtc/sdp.ts";
import type { TrickleCandidate } from "../media/protocols/webrtc/sdpfrag.ts";
import { WebRtcPublisher } from "../media/providers/webrtc_publisher.ts";
import { WebRtcFramePlayer } from "../media/publishers/webrtc_frame_player.ts";
import { WebRtcPlayer } from "../media/publishers/webrtc_player.ts";
import { Stream } from "../media/stream.ts";
import { PlayRenditions, type PlayRequest } from "../media/transcoder/play_renditions.ts";

/** Standard `info` texts of the Web SDK (STREAM_STATUS_INFO) a play can fail with. */
export const playRefusal = {
  noCodecs: "No common codecs",
  transcodingRequired: "Transcoding required, but disabled",
} as const;

/** What every player is built from besides its source and codecs. */
export interface PlayerCommon {
  mediaSessionId: string;
  sessionId: string;
  appKey: string;
  nodeId: string;
  clientStream: Record<string, unknown>;
  sdp: string;
  address: PeerAddress;
  client: StreamClient;
}

/** A player as signaling and WHEP drive it. */
export interface Player extends RegisteredStream {
  answer(): Promise<string>;
  /** Adds candidates the client trickled (WHEP PATCH). */
  addRemoteCandidates(candidates: readonly TrickleCandidate[]): Promise<void>;
}

/** How to build the player of an offer, or why the offer cannot be played. */
export type PlayPlan =
  | { ok: true; build: (common: PlayerCommon) => Player }
  | { ok: false; info: string };

/**
 * The media address of the configuration, on the server's ICE mux when it has one (without
 * it, each peer binds ports of the media range).
 */
export function peerAddress(services: Pick<Services, "config" | "iceMux">): PeerAddress {
  const { media, bind, binds } = services.config;
  return {
    bind: binds.media ?? bind,
    announced: media.announcedAddress,
    portMin: media.udpPortMin,
    portMax: media.udpPortMax,
    mux: services.iceMux,
  };
}

/**
 * Where the peer of a Web SDK stream object binds: on TCP when its `transport` is "TCP", or
 * when it names none and `media.iceTransport` is `tcp`.
 */
export function streamPeerAddress(
  services: Pick<Services, "config" | "iceMux">,
  stream: Record<string, unknown>,
): PeerAddress {
  return {
    ...peerAddress(services),
    transport: requestedIceTransport(stream.transport, services.config.media.iceTransport),
  };
}

/** The offer's m-lines in a log line. */
export function describeMedia(media: SdpMedia[]): string {
  return media.map((m) => `${m.kind}: ${m.codecs.map((c) => c.name).join(",") || "(none)"}`)
    .join("; ");
}

/** Chooses the player of `source` for an offer with `media` and a play `request`. */
export function planPlay(
  services: Services,
  source: RegisteredStream,
  media: SdpMedia[],
  request: PlayRequest,
  log: Logger,
): PlayPlan {
  const name = source.name;
  if (source instanceof Stream && PlayRenditions.wanted(source, request)) {
    const video = media.find((m) => m.kind === "video" && m.direction !== "inactive");
    const codec = video && pickPublishCodec(video)?.codec;
    if (codec !== "H264" && codec !== "VP8") return { ok: false, info: playRefusal.noCodecs };
    let rendition: Stream;
    try {
      rendition = services.playRenditions.get(source, request, codec);
    } catch (err) {
      log.info("play rendition refused", { name, reason: (err as Error).message });
      return { ok: false, info: (err as Error).message };
    }
    return planFrames(services, source, media, log, rendition);
  }
  if (!(source instanceof WebRtcPublisher)) {
    if (!(source instanceof Stream)) {
      log.info("play refused: the source gives no frames", { name });
      return { ok: false, info: playRefusal.transcodingRequired };
    }
    return planFrames(services, source, media, log);
  }
  const codecs: NegotiatedCodec[] = [];
  for (const m of media) {
    const wanted = source.codecOf(m.kind);
    if (!wanted || m.direction === "inactive") continue;
    const match = matchPlayCodec(m, wanted);
    if (!match) {
      log.info("play refused: player lacks the stream's codec", {
        name,
        codec: wanted.params.mimeType,
        offered: describeMedia([m]),
      });
      return { ok: false, info: playRefusal.transcodingRequired };
    }
    codecs.push(match);
  }
  if (codecs.length === 0) return { ok: false, info: playRefusal.noCodecs };
  return {
    ok: true,
    build: (common) =>
      new WebRtcPlayer({ ...common, publisher: source, codecs, sendPaths: services.sendPaths }),
  };
}

/**
 * Plays a stream that did not come over WebRTC, or a rendition (`base`) of any source:
 * packets are made from its frames, and audio the player cannot take is read from the
 * shared Opus conversion.
 */
function planFrames(
  services: Services,
  source: Stream,
  media: SdpMedia[],
  log: Logger,
  base: Stream = source,
): PlayPlan {
  const codecs: NegotiatedCodec[] = [];
  let convert = false;
  for (const m of media) {
    const track = base.tracks.find((t) => t.kind === m.kind);
    if (!track || m.direction === "inactive") continue;
    const match = matchFramePlayCodec(m, track);
    if (!match) {
      log.info("play refused: player takes the stream's codec neither as is nor converted", {
        name: source.name,
        codec: track.codec,
        offered: describeMedia([m]),
      });
      return { ok: false, info: playRefusal.transcodingRequired };
    }
    codecs.push(match.codec);
    convert ||= match.convertToOpus;
  }
  if (codecs.length === 0) return { ok: false, info: playRefusal.noCodecs };
  return {
    ok: true,
    build: (common) => {
      // The conversion starts only once a player is built (it holds an engine job).
      const frames = convert ? convertedAudio(base, "OPUS", services.engine, log) : base;
      return new WebRtcFramePlayer({
        ...common,
        source,
        frames,
        codecs,
        sendPaths: services.sendPaths,
      });
    },
  };
}
