/**
 * RTSP players of the RTSP server tests: ffprobe, ffmpeg (decoding to per-frame checksums
 * that are counted) and GStreamer's rtspsrc (decoding into fakesinks whose buffers are
 * counted). Each reports what a user would check: codecs, decoded frames, errors.
 */
import assert from "node:assert/strict";
import { run } from "../../media/formats/test_fixtures.ts";

/** Streams of an RTSP URL as ffprobe reports them. */
export async function probeRtsp(
  url: string,
): Promise<{ codec_type: string; codec_name: string; width?: number; height?: number }[]> {
  const { out } = await run("ffprobe", [
    ...["-v", "error", "-rtsp_transport", "tcp"],
    ...["-show_entries", "stream=codec_type,codec_name,width,height", "-of", "json", url],
  ]);
  return JSON.parse(out).streams;
}

/** What a player decoded. */
export interface Decoded {
  video: number;
  audio: number;
  /** Error output of the player (ffmpeg at `-v error`), empty when clean. */
  errors: string;
}

/** Decodes `seconds` of an RTSP URL with ffmpeg over `transport`. */
export async function decodeWithFfmpeg(
  url: string,
  transport: "tcp" | "udp",
  seconds: number,
): Promise<Decoded> {
  const out = await new Deno.Command("ffmpeg", {
    args: [
      ...["-nostdin", "-v", "error", "-rtsp_transport", transport, "-i", url],
      ...["-t", String(seconds), "-map", "0", "-f", "framecrc", "-"],
    ],
    stdout: "piped",
    stderr: "piped",
  }).output();
  const lines = new TextDecoder().decode(out.stdout).split("\n");
  const errors = new TextDecoder().decode(out.stderr) + (out.success ? "" : `exit ${out.code}`);
  return {
    video: lines.filter((l) => l.startsWith("0,")).length,
    audio: lines.filter((l) => l.startsWith("1,")).length,
    errors,
  };
}

/** GStreamer depayloader, parser and decoder of each audio codec the tests read. */
const gstAudio = {
  aac: ["rtpmp4gdepay", "!", "aacparse", "!", "avdec_aac"],
  opus: ["rtpopusdepay", "!", "opusparse", "!", "opusdec"],
};

/**
 * Decodes an RTSP URL with GStreamer (rtspsrc, H.264 and `audio` decoders into fakesinks)
 * over `transport` for `seconds`, then ends the pipeline with an EOS.
 */
export async function decodeWithGstreamer(
  url: string,
  transport: "tcp" | "udp",
  seconds: number,
  audio: keyof typeof gstAudio = "aac",
): Promise<Decoded> {
  const child = new Deno.Command("gst-launch-1.0", {
    args: [
      ...["-e", "-v", "rtspsrc", `location=${url}`, `protocols=${transport}`, "name=s"],
      ...["s.", "!", "application/x-rtp,media=video", "!", "rtph264depay", "!", "h264parse"],
      ...["!", "avdec_h264", "!", "fakesink", "name=v", "silent=false"],
      ...["s.", "!", "application/x-rtp,media=audio", "!", ...gstAudio[audio]],
      ...["!", "fakesink", "name=a", "silent=false"],
    ],
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const timer = setTimeout(() => child.kill("SIGINT"), seconds * 1000);
  const out = await child.output();
  clearTimeout(timer);
  const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
  return {
    video: text.split("(v:sink) (").length - 1,
    audio: text.split("(a:sink) (").length - 1,
    errors: text.split("\n").filter((l) => /^(ERROR|WARNING):/.test(l)).join("\n"),
  };
}

/**
 * Decodes `url` with ffmpeg, or GStreamer's rtspsrc, over TCP and over UDP at once for
 * `seconds`, and asserts that both decode without errors, with as many pictures and audio
 * frames (buffers for GStreamer) as `counts` allows: [least, most].
 */
export async function assertDecodesOverTcpAndUdp(
  player: "ffmpeg" | "gstreamer",
  url: string,
  seconds: number,
  counts: { video: readonly [number, number]; audio: readonly [number, number] },
  audioCodec: keyof typeof gstAudio = "aac",
): Promise<void> {
  const decode = (transport: "tcp" | "udp") =>
    player === "ffmpeg"
      ? decodeWithFfmpeg(url, transport, seconds)
      : decodeWithGstreamer(url, transport, seconds, audioCodec);
  const [tcp, udp] = await Promise.all([decode("tcp"), decode("udp")]);
  const audioUnit = player === "ffmpeg" ? "audio frames" : "audio buffers";
  const within = (n: number, [least, most]: readonly [number, number]) => n >= least && n <= most;
  for (const [name, d] of [["tcp", tcp], ["udp", udp]] as const) {
    assert.equal(d.errors, "", `${name}: ${d.errors}`);
    assert.ok(within(d.video, counts.video), `${name}: ${d.video} pictures`);
    assert.ok(within(d.audio, counts.audio), `${name}: ${d.audio} ${audioUnit}`);
  }
}
