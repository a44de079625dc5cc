/**
 * Turns the audio, video and metadata messages of an RTMP publisher (or of a remote server
 * we play from) into Tracks and MediaFrames. Tracks are fixed when a Stream is made, so the
 * first messages are held until the codecs are known: the sequence header of every codec the
 * metadata announces, or of both kinds without metadata, or whatever is known when the
 * caller gives up waiting (`finishProbe`). An audio codec the server can neither carry nor
 * convert (Speex, Nellymoser, ...) is a BadRequestError naming it; MP3 makes an MP3 track,
 * which the ingest converts.
 */
import { BadRequestError, ParseError } from "../../core/errors.ts";
import { parseAsc } from "../codecs/aac.ts";
import { parseAvcC, parseH264Sps } from "../codecs/h264.ts";
import { parseH265Sps, parseHvcC } from "../codecs/h265.ts";
import { joinLengthPrefixed, splitLengthPrefixed } from "../codecs/nalu.ts";
import { opusClockRate, parseOpusHead } from "../codecs/opus.ts";
import type { AudioCodec, MediaFrame, Track, VideoCodec } from "../frame.ts";
import type { AmfObject } from "../protocols/rtmp/amf0.ts";
import { parseMetaData } from "../protocols/rtmp/command.ts";
import {
  type AudioTag,
  parseAudioTag,
  parseVideoTag,
  type VideoTag,
} from "../protocols/rtmp/flv_tag.ts";
import { MessageType, type RtmpMessage } from "../protocols/rtmp/message.ts";

/** Longest the codecs may take to show up after publishing starts, in milliseconds. */
export const probeTimeoutMs = 3_000;
/** Most media messages held while the codecs are not all known. */
export const probeMaxMessages = 300;
/** Clock of video frames, in Hz. */
const videoClockRate = 90_000;
/** Sample rate of G.711 over RTMP, in Hz. */
const g711SampleRate = 8_000;

type Held =
  | { video: true; tag: VideoTag & { kind: "frame" }; ms: number }
  | { video: false; tag: AudioTag & { kind: "frame" }; ms: number };

/** Builds tracks from the first messages, then converts every media message to a frame. */
export class RtmpMediaReceiver {
  #meta: AmfObject | undefined;
  #video: Track | undefined;
  #videoNalLengthBytes = 4;
  #audio: Track | undefined;
  #held: Held[] = [];
  #tracks: Track[] | undefined;
  #videoId = -1;
  #audioId = -1;

  /** The tracks, once known. */
  get tracks(): Track[] | undefined {
    return this.#tracks;
  }

  /**
   * Takes one message; returns the frames it completes (the held ones first, once the tracks
   * are known). Malformed codec data throws ParseError.
   */
  receive(message: RtmpMessage): MediaFrame[] {
    if (message.type === MessageType.dataAmf0) {
      this.#meta ??= parseMetaData(message.payload);
      this.#checkReady();
      return this.#flushHeld();
    }
    if (message.type === MessageType.video) {
      const tag = parseVideoTag(message.payload);
      if (tag.kind === "config") this.#videoConfig(tag.codec, tag.config);
      else if (tag.kind === "frame") this.#hold({ video: true, tag, ms: message.timestamp });
    } else if (message.type === MessageType.audio) {
      const tag = parseAudioTag(message.payload);
      if (tag.kind === "config") this.#audioConfig(tag.codec, tag.config);
      else if (tag.kind === "frame") {
        if (!this.#audio && (tag.codec === "PCMU" || tag.codec === "PCMA")) {
          this.#audio = g711Track(tag.codec);
        } else if (!this.#audio && tag.codec === "MP3") {
          this.#audio = mp3Track(tag.rateHz ?? mp3DefaultRateHz, tag.channels ?? 2);
        }
        this.#hold({ video: false, tag, ms: message.timestamp });
      } else if (tag.kind === "unsupported") {
        // Refused, never dropped: a stream without its audio would look fine and be wrong.
        throw new BadRequestError("audiocodecid", `audio codec ${tag.codec} is not supported`);
      }
    } else {
      return [];
    }
    this.#checkReady();
    return this.#flushHeld();
  }

  /** Fixes the tracks with what is known; throws ParseError when no codec is known at all. */
  finishProbe(): MediaFrame[] {
    if (!this.#tracks) this.#build();
    return this.#flushHeld();
  }

  #hold(item: Held): void {
    if (this.#tracks) {
      this.#held.push(item);
      return;
    }
    if (this.#held.length >= probeMaxMessages) this.#build();
    this.#held.push(item);
  }

  #checkReady(): void {
    if (this.#tracks) return;
    const meta = this.#meta;
    const haveVideo = this.#video !== undefined;
    const haveAudio = this.#audio !== undefined;
    if (meta) {
      const wantVideo = Boolean(meta.videocodecid);
      const wantAudio = Boolean(meta.audiocodecid);
      if ((!wantVideo || haveVideo) && (!wantAudio || haveAudio) && (haveVideo || haveAudio)) {
        this.#build();
      }
    } else if (haveVideo && haveAudio) {
      this.#build();
    }
  }

  #build(): void {
    const tracks: Track[] = [];
    if (this.#video) {
      this.#videoId = tracks.length;
      tracks.push({ ...this.#video, id: tracks.length });
    }
    if (this.#audio) {
      this.#audioId = tracks.length;
      tracks.push({ ...this.#audio, id: tracks.length });
    }
    if (tracks.length === 0) {
      throw new ParseError("the RTMP stream carries no codec the server knows");
    }
    this.#tracks = tracks;
  }

  #flushHeld(): MediaFrame[] {
    if (!this.#tracks || this.#held.length === 0) return [];
    const out: MediaFrame[] = [];
    for (const item of this.#held) {
      const frame = item.video
        ? this.#videoFrame(item.tag, item.ms)
        : this.#audioFrame(item.tag, item.ms);
      if (frame) out.push(frame);
    }
    this.#held.length = 0;
    return out;
  }

  #videoFrame(tag: VideoTag & { kind: "frame" }, ms: number): MediaFrame | undefined {
    const track = this.#tracks![this.#videoId];
    if (!track || track.codec !== tag.codec || tag.data.length === 0) return undefined;
    const data = this.#videoNalLengthBytes === 4
      ? tag.data
      : joinLengthPrefixed(splitLengthPrefixed(tag.data, this.#videoNalLengthBytes));
    return {
      trackId: track.id,
      codec: track.codec,
      dts: ms * (videoClockRate / 1000),
      pts: (ms + tag.ctsMs) * (videoClockRate / 1000),
      keyframe: tag.keyframe,
      data,
    };
  }

  #audioFrame(tag: AudioTag & { kind: "frame" }, ms: number): MediaFrame | undefined {
    const track = this.#tracks![this.#audioId];
    if (!track || track.codec !== tag.codec || tag.data.length === 0) return undefined;
    const ts = Math.round(ms * track.clockRate / 1000);
    return {
      trackId: track.id,
      codec: track.codec,
      dts: ts,
      pts: ts,
      keyframe: true,
      data: tag.data,
    };
  }

  #videoConfig(codec: VideoCodec, record: Uint8Array): void {
    // Tracks are fixed once built; a later sequence header of the same codec repeats the first.
    if (this.#tracks) return;
    if (codec === "H264") {
      const avcC = parseAvcC(record);
      if (avcC.sps.length === 0) throw new ParseError("avcC without an SPS");
      const sps = parseH264Sps(avcC.sps[0]);
      this.#videoNalLengthBytes = avcC.nalLengthSize;
      this.#video = {
        id: 0,
        kind: "video",
        codec,
        clockRate: videoClockRate,
        width: sps.width,
        height: sps.height,
        config: { codec, sps: avcC.sps.map((s) => s.slice()), pps: avcC.pps.map((p) => p.slice()) },
      };
    } else if (codec === "H265") {
      const hvcC = parseHvcC(record);
      if (hvcC.sps.length === 0) throw new ParseError("hvcC without an SPS");
      const sps = parseH265Sps(hvcC.sps[0]);
      this.#videoNalLengthBytes = hvcC.nalLengthSize;
      this.#video = {
        id: 0,
        kind: "video",
        codec,
        clockRate: videoClockRate,
        width: sps.width,
        height: sps.height,
        config: {
          codec,
          vps: hvcC.vps.map((s) => s.slice()),
          sps: hvcC.sps.map((s) => s.slice()),
          pps: hvcC.pps.map((s) => s.slice()),
        },
      };
    }
  }

  #audioConfig(codec: AudioCodec, config: Uint8Array): void {
    if (this.#tracks) return;
    if (codec === "AAC") {
      const asc = parseAsc(config);
      this.#audio = {
        id: 0,
        kind: "audio",
        codec,
        clockRate: asc.sampleRate,
        sampleRate: asc.sampleRate,
        channels: asc.channels,
        config: { codec, asc: config.slice() },
      };
    } else if (codec === "OPUS") {
      const head = parseOpusHead(config);
      this.#audio = {
        id: 0,
        kind: "audio",
        codec,
        clockRate: opusClockRate,
        sampleRate: opusClockRate,
        channels: head.channels,
        config: { codec, head: config.slice() },
      };
    }
  }
}

/** Clock of MP3 frames whose tag names no rate, in Hz. */
const mp3DefaultRateHz = 44_100;

/** The track of an RTMP publisher's MP3 audio; its clock is the rate its FLV tags name. */
function mp3Track(rateHz: number, channels: number): Track {
  return { id: 0, kind: "audio", codec: "MP3", clockRate: rateHz, sampleRate: rateHz, channels };
}

function g711Track(codec: "PCMU" | "PCMA"): Track {
  return {
    id: 0,
    kind: "audio",
    codec,
    clockRate: g711SampleRate,
    sampleRate: g711SampleRate,
    channels: 1,
  };
}
