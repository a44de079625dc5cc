/**
 * ffmpeg arguments of the pipeline's video encoder: raw I420 in, H.264 (constrained
 * baseline, for WebRTC and RTMP) in MPEG-TS or VP8 in IVF out, one frame per picture with
 * no reordering, no lookahead and no muxer buffering.
 *
 * Presets were picked by measurement (360p30, one thread, 800 kbit/s; see the encoder's
 * tests): native x264 `veryfast` costs ~0.06 s of CPU per second of video and is ~1 dB
 * better than `ultrafast` (which turns deblocking off) for ~0.03 s more; libvpx
 * `-cpu-used 8` is ~2 dB better than 16 for ~0.03 s more. ffmpeg.wasm is 4-5x slower, so
 * its runs take the fastest settings (`ultrafast`, `-cpu-used 16`) to stay real-time.
 */
import type { EngineKind } from "../engine/engine.ts";
import type { VideoEncoderSettings } from "./video_codec.ts";

/** Bits per pixel of the default bitrate (about WebRTC's: 360p30 gets ~700 kbit/s). */
const defaultBitsPerPixel = 0.1;
/** Bounds of the default bitrate, in kbit/s. */
const minDefaultBitrateKbps = 100;
const maxDefaultBitrateKbps = 20_000;
/** x264's quality target when no bitrate is given (its own default), capped by the VBV. */
const defaultCrf = 23;

/** The bitrate used when the settings leave it to the encoder, in kbit/s. */
export function defaultVideoBitrateKbps(width: number, height: number, fps: number): number {
  const kbps = Math.round(width * height * fps * defaultBitsPerPixel / 1000);
  return Math.min(maxDefaultBitrateKbps, Math.max(minDefaultBitrateKbps, kbps));
}

/**
 * H.264 levels (ISO 14496-10 Table A-1): largest frame and macroblock rate in macroblocks,
 * largest VCL bitrate of the Baseline profile in kbit/s.
 */
const h264Levels = [
  { level: "1", maxFrameMbs: 99, maxMbsPerSec: 1485, maxKbps: 64 },
  { level: "1.1", maxFrameMbs: 396, maxMbsPerSec: 3000, maxKbps: 192 },
  { level: "1.2", maxFrameMbs: 396, maxMbsPerSec: 6000, maxKbps: 384 },
  { level: "1.3", maxFrameMbs: 396, maxMbsPerSec: 11880, maxKbps: 768 },
  { level: "2", maxFrameMbs: 396, maxMbsPerSec: 11880, maxKbps: 2000 },
  { level: "2.1", maxFrameMbs: 792, maxMbsPerSec: 19800, maxKbps: 4000 },
  { level: "2.2", maxFrameMbs: 1620, maxMbsPerSec: 20250, maxKbps: 4000 },
  { level: "3", maxFrameMbs: 1620, maxMbsPerSec: 40500, maxKbps: 10000 },
  { level: "3.1", maxFrameMbs: 3600, maxMbsPerSec: 108000, maxKbps: 14000 },
  { level: "3.2", maxFrameMbs: 5120, maxMbsPerSec: 216000, maxKbps: 20000 },
  { level: "4", maxFrameMbs: 8192, maxMbsPerSec: 245760, maxKbps: 20000 },
  { level: "4.1", maxFrameMbs: 8192, maxMbsPerSec: 245760, maxKbps: 50000 },
  { level: "4.2", maxFrameMbs: 8704, maxMbsPerSec: 522240, maxKbps: 50000 },
  { level: "5", maxFrameMbs: 22080, maxMbsPerSec: 589824, maxKbps: 135000 },
  { level: "5.1", maxFrameMbs: 36864, maxMbsPerSec: 983040, maxKbps: 240000 },
  { level: "5.2", maxFrameMbs: 36864, maxMbsPerSec: 2073600, maxKbps: 240000 },
] as const;

/** The lowest H.264 level whose limits fit the picture size, frame rate and bitrate. */
export function h264LevelFor(
  width: number,
  height: number,
  fps: number,
  bitrateKbps: number,
): string {
  const mbsWide = Math.ceil(width / 16);
  const mbsHigh = Math.ceil(height / 16);
  const frameMbs = mbsWide * mbsHigh;
  const fits = h264Levels.find((l) =>
    frameMbs <= l.maxFrameMbs && frameMbs * fps <= l.maxMbsPerSec &&
    bitrateKbps <= l.maxKbps &&
    // Neither side may exceed sqrt(8 * MaxFS) macroblocks (A.3.1 h, A.3.2 f).
    Math.max(mbsWide, mbsHigh) ** 2 <= 8 * l.maxFrameMbs
  );
  return (fits ?? h264Levels[h264Levels.length - 1]).level;
}

/** What ffmpeg is run with to encode `settings`: `<inputArgs> -i <raw> <outputArgs> <out>`. */
export interface VideoEncoderArgs {
  inputArgs: string[];
  outputArgs: string[];
}

/**
 * ffmpeg's codec options (option, value pairs) for an encoder of `settings` on an engine of
 * the given kind, one thread included. `fps` 0 (the frames keep the source's own rate, see
 * the fused renditions) sizes the default bitrate for `unknownBitrateFps` and the H.264
 * level for `unknownLevelFps`.
 */
export function videoCodecArgs(settings: VideoEncoderSettings, engine: EngineKind): string[] {
  const { width, height, keyFrameInterval } = settings;
  const known = settings.fps > 0;
  const fps = known ? settings.fps : unknownLevelFps;
  const gop = String(Math.max(1, Math.round(keyFrameInterval)));
  const bitrateKbps = settings.bitrateKbps > 0
    ? settings.bitrateKbps
    : defaultVideoBitrateKbps(width, height, known ? fps : unknownBitrateFps);
  const rate = `${bitrateKbps}k`;
  const fast = engine === "wasm";
  const codecArgs = settings.codec === "H264"
    ? [
      ...["-c:v", "libx264", "-preset", fast ? "ultrafast" : "veryfast", "-tune", "zerolatency"],
      ...["-profile:v", "baseline", "-level:v", h264LevelFor(width, height, fps, bitrateKbps)],
      // A keyframe exactly every `gop` frames, each with SPS and PPS in front.
      ...["-bf", "0", "-g", gop, "-keyint_min", gop, "-sc_threshold", "0"],
      ...["-x264-params", "repeat-headers=1"],
      // No bitrate asked: x264's quality target, capped so keyframes stay sendable.
      ...(settings.bitrateKbps > 0 ? ["-b:v", rate] : ["-crf", String(defaultCrf)]),
      ...["-maxrate", rate, "-bufsize", rate],
    ]
    : [
      ...["-c:v", "libvpx", "-deadline", "realtime", "-cpu-used", fast ? "16" : "8"],
      ...["-lag-in-frames", "0", "-auto-alt-ref", "0", "-error-resilient", "1"],
      ...["-g", gop, "-keyint_min", gop],
      // Constant bitrate over a 1 s buffer, as WebRTC runs libvpx (it needs a bitrate).
      ...["-b:v", rate, "-minrate", rate, "-maxrate", rate, "-bufsize", rate],
    ];
  // One thread: the pipeline runs many encoders side by side, and threads add delay.
  return [...codecArgs, "-threads", "1"];
}

/**
 * Frame rates assumed when the frames keep the source's rate (not known in advance): for the
 * H.264 level the highest the pipeline outputs, so the level declared is never below what
 * the stream needs; for the default bitrate the usual 30.
 */
const unknownLevelFps = 60;
const unknownBitrateFps = 30;

/** ffmpeg's arguments for an encoder of `settings` on an engine of the given kind. */
export function videoEncoderArgs(
  settings: VideoEncoderSettings,
  engine: EngineKind,
): VideoEncoderArgs {
  const { width, height, fps } = settings;
  return {
    inputArgs: [
      ...["-f", "rawvideo", "-pix_fmt", "yuv420p", "-s", `${width}x${height}`],
      ...["-r", String(fps)],
    ],
    outputArgs: [
      ...videoCodecArgs(settings, engine),
      // Every picture in gives one frame out, neither dropped nor duplicated.
      ...["-fps_mode", "passthrough"],
      ...["-flush_packets", "1"],
      ...(settings.codec === "H264"
        // A PES that declares its length is demuxed as soon as it is in, not at the next one.
        ? ["-muxdelay", "0", "-muxpreload", "0", "-omit_video_pes_length", "0", "-f", "mpegts"]
        : ["-f", "ivf"]),
    ],
  };
}
