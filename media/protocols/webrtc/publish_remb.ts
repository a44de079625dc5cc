/**
 * REMB to a WebRTC publisher (a Web SDK publish, WHIP). The server negotiates neither
 * transport-cc nor abs-send-time with publishers, so a browser's send-side estimator has no
 * delay-based estimate and, told nothing, stays near its starting rate (about 470 kbit/s in
 * Chromium, whatever the camera). Chromium takes a REMB that comes in its first seconds
 * without loss as its estimate, and afterwards as a cap: the publisher is told the configured
 * bitrate, or its own `maxBitrate` when lower, cut on loss as SFU publishers are
 * (media/sfu/uplink_estimate.ts).
 */
import type { RTCRtpReceiver, RTCRtpTransceiver, RtpPacket } from "werift";
import { ReceptionStats } from "../../rtp/receiver_report.ts";
import { rembPacket } from "../../rtp/remb.ts";
import { UplinkEstimate, uplinkRembIntervalMs } from "../../sfu/uplink_estimate.ts";
import type { NegotiatedCodec } from "./codecs.ts";
import { fmtpParameter, type SdpMedia } from "./sdp.ts";

/** The bounds of what a publisher is told it may send, in kbit/s. */
export interface PublishBitrate {
  readonly maxKbps: number;
  readonly minKbps: number;
}

/** The server's bounds: config `media.maxPublishBitrateKbps` and `minPublishBitrateKbps`. */
export interface PublishBitrateConfig {
  readonly maxPublishBitrateKbps: number;
  readonly minPublishBitrateKbps: number;
}

/** The bitrate fields of a publish's stream object (Web SDK `constraints.video`), in kbit/s. */
export interface PublishBitrateFields {
  readonly maxBitrate?: unknown;
  readonly minBitrate?: unknown;
}

/** A positive bitrate in kbit/s from a number or a numeric string, else undefined. */
function kbpsOf(value: unknown): number | undefined {
  const n = typeof value === "string" ? Number(value) : value;
  return typeof n === "number" && Number.isFinite(n) && n > 0 ? n : undefined;
}

/**
 * The bounds for one publish of the offer's `media` with the `codecs` picked from it: at most
 * the server's cap and the lowest limit the publisher set (the stream's `maxBitrate`, the
 * video codec's `x-google-max-bitrate`, the video section's `b=AS`/`b=TIAS`); at least the
 * server's floor or the publisher's own `minBitrate` (`x-google-min-bitrate`), never above
 * that maximum.
 */
export function publishBitrate(
  config: PublishBitrateConfig,
  media: readonly SdpMedia[],
  codecs: readonly (NegotiatedCodec | undefined)[],
  stream: PublishBitrateFields,
): PublishBitrate {
  const index = media.findIndex((m) => m.kind === "video");
  const fmtp = codecs[index]?.params.parameters ?? "";
  const limits = [
    kbpsOf(stream.maxBitrate),
    kbpsOf(fmtpParameter(fmtp, "x-google-max-bitrate")),
    media[index]?.bandwidthKbps,
  ].filter((kbps) => kbps !== undefined);
  const maxKbps = Math.max(1, Math.round(Math.min(config.maxPublishBitrateKbps, ...limits)));
  const floors = [
    kbpsOf(stream.minBitrate),
    kbpsOf(fmtpParameter(fmtp, "x-google-min-bitrate")),
  ].filter((kbps) => kbps !== undefined);
  const minKbps = Math.round(Math.min(maxKbps, Math.max(config.minPublishBitrateKbps, ...floors)));
  return { maxKbps, minKbps };
}

/** True when the transceiver's negotiated video codecs take REMB (goog-remb feedback). */
export function negotiatesRemb(transceiver: RTCRtpTransceiver): boolean {
  return transceiver.codecs.some((c) => c.rtcpFeedback.some((f) => f.type === "goog-remb"));
}

/**
 * Sends a publisher a REMB for its video as soon as its transport connects (Chromium sizes
 * its first pictures by the rate it has then: a REMB that comes later leaves them downscaled
 * on content that stays expensive), then every `uplinkRembIntervalMs`, estimated from the
 * packets `count` saw and naming the SSRC they came on (none before the first).
 */
export class PublishRemb {
  readonly #estimate: UplinkEstimate;
  readonly #receiver: RTCRtpReceiver;
  readonly #timer: ReturnType<typeof setInterval>;
  readonly #connected?: { unSubscribe(): void };
  #stats?: ReceptionStats;
  /** RTP payload and padding bytes since the last REMB. */
  #bytes = 0;
  #lastSentMs = performance.now();

  /** `receiver`: the receiver of the publisher's video (its transport carries the REMB). */
  constructor(bitrate: PublishBitrate, receiver: RTCRtpReceiver) {
    this.#estimate = new UplinkEstimate(bitrate.maxKbps, bitrate.minKbps);
    this.#receiver = receiver;
    this.#timer = setInterval(() => this.#send(), uplinkRembIntervalMs);
    this.#connected = receiver.dtlsTransport?.onStateChange.subscribe((state) => {
      if (state === "connected") this.#send();
    });
  }

  /** Counts a video packet of the publisher (padding-only ones too: they take sequence numbers). */
  count(packet: RtpPacket, nowMs: number): void {
    const { ssrc, sequenceNumber, timestamp, paddingSize } = packet.header;
    if (this.#stats?.ssrc !== ssrc) this.#stats = new ReceptionStats(ssrc, 90_000);
    this.#stats.update(sequenceNumber, timestamp, nowMs);
    this.#bytes += packet.payload.length + paddingSize;
  }

  /** Stops sending. */
  close(): void {
    clearInterval(this.#timer);
    this.#connected?.unSubscribe();
  }

  #send(): void {
    const transport = this.#receiver.dtlsTransport;
    if (transport?.state !== "connected") return;
    const stats = this.#stats;
    const nowMs = performance.now();
    const receivedKbps = this.#bytes * 8 / Math.max(1, nowMs - this.#lastSentMs);
    this.#bytes = 0;
    this.#lastSentMs = nowMs;
    const kbps = stats
      ? this.#estimate.update(stats.expected, stats.received, receivedKbps, nowMs)
      : this.#estimate.kbps;
    const remb = rembPacket(this.#receiver.rtcpSsrc, kbps * 1000, stats ? [stats.ssrc] : []);
    transport.sendRtcp([remb]).catch(() => {});
  }
}
