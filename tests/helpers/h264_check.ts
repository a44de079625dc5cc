/** Checks of a received H.264 elementary stream with ffmpeg and ffprobe. */
import { Buffer } from "node:buffer";
import type { RTCPeerConnection, RtpPacket } from "werift";
import { lengthPrefixedToAnnexB } from "../../media/codecs/nalu.ts";
import { run } from "../../media/formats/test_fixtures.ts";
import { TrackMeter } from "../../media/protocols/webrtc/track_meter.ts";
import { H264Depacketizer } from "../../media/rtp/h264_depacketizer.ts";

/**
 * Decodes the Annex B file with ffmpeg and lists each frame's `width,height` with ffprobe:
 * `errors` is ffmpeg's error output ("" when the whole stream decodes).
 */
export async function decodeH264(file: string): Promise<{ errors: string; sizes: string[] }> {
  const decode = await run("ffmpeg", ["-v", "error", "-f", "h264", "-i", file, "-f", "null", "-"]);
  const sizes = (await run("ffprobe", [
    ...["-v", "error", "-f", "h264", "-select_streams", "v:0", "-show_entries"],
    ...["frame=width,height", "-of", "csv=p=0", file],
  ])).out.split("\n").flatMap((line) => /^\d+,\d+/.exec(line) ?? []);
  return { errors: decode.err.trim(), sizes };
}

/**
 * The H.264 video a werift peer receives: its RTP metered (picture size of each keyframe), its
 * SSRCs, and its access units depacketized to Annex B for `decode`.
 */
export class H264Receiver {
  /** Meters the video packets (`meter.width` is the last keyframe's width). */
  readonly meter = new TrackMeter("H264", 102);
  /** Access units received, in Annex B. */
  readonly annexB: Uint8Array[] = [];
  /** SSRCs of the video packets received. */
  readonly ssrcs = new Set<number>();
  readonly #depacketizer = new H264Depacketizer(0);

  /** Takes every video track of `pc`; `onPacket` sees each of its packets too. */
  constructor(pc: RTCPeerConnection, onPacket?: (packet: RtpPacket) => void) {
    pc.onTrack.subscribe((track) => {
      if (track.kind !== "video") return;
      track.onReceiveRtp.subscribe((p) => {
        this.meter.add(p, performance.now());
        const { ssrc, sequenceNumber, timestamp, marker, payloadType } = p.header;
        this.ssrcs.add(ssrc);
        onPacket?.(p);
        this.#depacketizer.push(
          { ssrc, sequenceNumber, timestamp, marker, payloadType, payload: p.payload },
          (frame) => this.annexB.push(lengthPrefixedToAnnexB(frame.data)),
        );
      });
    });
  }

  /** Writes what was received to `file` and decodes it (see decodeH264). */
  async decode(file: string): Promise<{ errors: string; sizes: string[] }> {
    await Deno.writeFile(file, Buffer.concat(this.annexB));
    return await decodeH264(file);
  }
}
