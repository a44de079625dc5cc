/**
 * An RTSP publisher (ANNOUNCE then RECORD, as `ffmpeg -f rtsp` sends): the announced SDP's
 * tracks become a Stream, and the RTP the client sends (interleaved on the connection or to
 * the server's UDP ports) is reordered, depacketized and placed on the stream's timeline,
 * aligned by the client's sender reports. The stream ends with the session.
 */
import { ParseError } from "../../core/errors.ts";
import type { Logger } from "../../core/log.ts";
import { VideoDtsDeriver } from "../codecs/dts_deriver.ts";
import type { MediaFrame } from "../frame.ts";
import { attribute, parseSdp } from "../formats/sdp/sdp.ts";
import { resolveControl } from "../protocols/rtsp/url.ts";
import { parseRtpPacket } from "../rtp/packet.ts";
import { parseSenderReports } from "../rtp/rtcp.ts";
import { RtpReorderBuffer } from "../rtp/reorder.ts";
import { type SdpTrack, sdpTrack } from "../rtp/sdp_track.ts";
import { RtpTimeline } from "../rtp/timeline.ts";
import { Stream } from "../stream.ts";

/** Value of `mediaProvider` in the records of streams published over RTSP. */
export const rtspRecordMediaProvider = "RTSP";

/** One announced track. */
interface RecordTrack {
  readonly sdp: SdpTrack;
  /** Absolute control URL the client sets the track up with. */
  readonly control: string;
  readonly reorder: RtpReorderBuffer;
}

/** Drops a trailing slash, so `.../a/` and `.../a` name the same control. */
function sameUrl(a: string, b: string): boolean {
  return a.replace(/\/+$/, "") === b.replace(/\/+$/, "");
}

/** The media of one announced publish. */
export class RtspRecord {
  readonly stream: Stream;
  /** RTP packets that could not be parsed or depacketized. */
  malformed = 0;
  readonly #tracks: RecordTrack[] = [];
  readonly #timeline: RtpTimeline;
  readonly #dts = new Map<number, VideoDtsDeriver>();
  #waitKeyframe = true;

  /**
   * Reads the ANNOUNCE of `name` at `url`: a broken SDP is a ParseError, one without a
   * track in a codec the server carries too. `stop` ends the publisher's session.
   */
  constructor(name: string, url: string, sdpText: string, stop: () => void, log: Logger) {
    const sdp = parseSdp(sdpText);
    const base = attribute(sdp, "control") && attribute(sdp, "control") !== "*"
      ? resolveControl(url, attribute(sdp, "control"))
      : url;
    for (const section of sdp.media) {
      const selected = sdpTrack(section, this.#tracks.length);
      if (!selected) continue;
      this.#tracks.push({
        sdp: selected,
        control: resolveControl(base, attribute(section, "control")),
        reorder: new RtpReorderBuffer((packet, afterGap) => {
          if (afterGap) selected.depacketizer.reset();
          try {
            selected.depacketizer.push(packet, this.#emit);
          } catch (err) {
            if (!(err instanceof ParseError)) throw err;
            this.malformed++;
          }
        }),
      });
    }
    if (this.#tracks.length === 0) {
      throw new ParseError("the SDP has no track in a codec the server carries");
    }
    const tracks = this.#tracks.map((t) => t.sdp.track);
    this.stream = new Stream({
      name,
      mediaSessionId: crypto.randomUUID(),
      tracks,
      mediaProvider: rtspRecordMediaProvider,
      stopProvider: () => {
        log.info("rtsp publisher stopped by terminate", { stream: name });
        stop();
        return Promise.resolve();
      },
    });
    this.#timeline = new RtpTimeline(tracks);
    this.#timeline.startSession(tracks.map(() => undefined));
    for (const track of tracks) {
      if (track.kind === "video") this.#dts.set(track.id, new VideoDtsDeriver(track));
    }
  }

  /** The track set up with control URL `url`, if one is. */
  trackFor(url: string): number | undefined {
    const index = this.#tracks.findIndex((t) => sameUrl(t.control, url));
    return index < 0 ? undefined : index;
  }

  /** An RTP packet of track `id`. */
  rtp(id: number, data: Uint8Array): void {
    const track = this.#tracks[id];
    if (!track) return;
    let packet;
    try {
      packet = parseRtpPacket(data);
    } catch (err) {
      if (!(err instanceof ParseError)) throw err;
      this.malformed++;
      return;
    }
    if (packet.payloadType === track.sdp.payloadType) track.reorder.push(packet);
  }

  /** An RTCP packet of track `id`: its sender reports align the tracks. */
  rtcp(id: number, data: Uint8Array): void {
    if (!this.#tracks[id]) return;
    try {
      for (const report of parseSenderReports(data)) this.#timeline.senderReport(id, report);
    } catch (err) {
      if (!(err instanceof ParseError)) throw err;
      this.malformed++;
    }
  }

  #emit = (frame: MediaFrame): void => {
    const pts = this.#timeline.pts(frame.trackId, frame.pts);
    if (pts < 0) return;
    if (this.stream.tracks[frame.trackId].kind === "video") {
      // Readers start at a keyframe; what comes before one decodes to nothing.
      if (this.#waitKeyframe && !frame.keyframe) return;
      this.#waitKeyframe = false;
    }
    frame.pts = pts;
    frame.dts = pts;
    this.#dts.get(frame.trackId)?.derive(frame);
    this.stream.push(frame);
  };
}
