/** Tracks and frames of the unit tests' streams: H.264 video and AAC audio. */
import { buildAsc } from "../../media/codecs/aac.ts";
import type { MediaFrame, Track } from "../../media/frame.ts";

/** An H.264 video track, id 0, 90 kHz; `extra` adds its picture size or parameter sets. */
export function h264Track(extra: Partial<Track> = {}): Track {
  return { id: 0, kind: "video", codec: "H264", clockRate: 90000, ...extra };
}

/** An H.264 track (see h264Track) whose configuration is the parameter sets `sps` and `pps`. */
export function h264TrackOf(sps: Uint8Array, pps: Uint8Array): Track {
  return h264Track({ config: { codec: "H264", sps: [sps], pps: [pps] } });
}

/** An AAC-LC audio track, id 1, at 48 kHz with `channels`, and its AudioSpecificConfig. */
export function aacTrack(channels: number): Track {
  return {
    id: 1,
    kind: "audio",
    codec: "AAC",
    clockRate: 48000,
    sampleRate: 48000,
    channels,
    config: { codec: "AAC", asc: buildAsc(2, 48000, channels) },
  };
}

/** A two-byte AAC frame of track 1 at `ms` (in 48 kHz ticks); its last byte is `ms`'s low byte. */
export function aacFrame(ms: number): MediaFrame {
  return {
    trackId: 1,
    codec: "AAC",
    pts: ms * 48,
    dts: ms * 48,
    keyframe: true,
    data: new Uint8Array([0x21, ms & 0xff]),
  };
}
