/**
 * Media fixtures for the format tests, generated with ffmpeg into a temp dir at run time
 * (no media files in the repository), and ffprobe helpers to check results against.
 */

import { ParseError } from "../../core/errors.ts";

const dir = Deno.makeTempDirSync({ prefix: "formats-test-" });
const dirPromise = Promise.resolve(dir);
globalThis.addEventListener("unload", () => Deno.removeSync(dir, { recursive: true }));
const made = new Map<string, Promise<string>>();

/** Runs a command; throws with its stderr when it fails. Returns stdout and stderr text. */
export async function run(cmd: string, args: string[]): Promise<{ out: string; err: string }> {
  const result = await new Deno.Command(cmd, { args, stdout: "piped", stderr: "piped" }).output();
  const out = new TextDecoder().decode(result.stdout);
  const err = new TextDecoder().decode(result.stderr);
  if (!result.success) throw new Error(`${cmd} ${args.join(" ")} failed: ${err}`);
  return { out, err };
}

/** A temp file path for a test output. */
export async function tempPath(name: string): Promise<string> {
  return `${await dirPromise}/${name}`;
}

const encoders = {
  "h264_aac": ["-c:v", "libx264", "-g", "25", "-bf", "2", "-c:a", "aac"],
  "h264_opus": ["-c:v", "libx264", "-g", "25", "-bf", "2", "-c:a", "libopus"],
  "h265_aac": ["-c:v", "libx265", "-x265-params", "log-level=error:keyint=25", "-c:a", "aac"],
} as const;

/** Which ffmpeg-made clip: video and audio codec. */
export type Fixture = keyof typeof encoders;

/** Path of a 2 s 320x240 25 fps clip with 48 kHz audio, as MP4 ("mp4") or MPEG-TS ("ts"). */
export function fixture(name: Fixture, container: "mp4" | "ts"): Promise<string> {
  const key = `${name}.${container}`;
  let p = made.get(key);
  if (!p) {
    p = (async () => {
      const path = `${await dirPromise}/${key}`;
      await run("ffmpeg", [
        "-v",
        "error",
        "-f",
        "lavfi",
        "-i",
        "testsrc2=size=320x240:rate=25",
        "-f",
        "lavfi",
        "-i",
        "sine=frequency=440:sample_rate=48000",
        "-t",
        "2",
        "-pix_fmt",
        "yuv420p",
        ...encoders[name],
        "-f",
        container === "ts" ? "mpegts" : "mp4",
        path,
      ]);
      return path;
    })();
    made.set(key, p);
  }
  return p;
}

/** What ffprobe reports of one stream. */
export interface ProbedStream {
  codec_name: string;
  codec_type: string;
  width?: number;
  height?: number;
  sample_rate?: string;
  channels?: number;
  nb_frames?: string;
  nb_read_packets?: string;
  duration?: string;
  start_time?: string;
}

/** ffprobe's streams of a file, with packet counts read (`nb_read_packets`). */
export async function probeStreams(path: string): Promise<ProbedStream[]> {
  const { out } = await run("ffprobe", [
    "-v",
    "error",
    "-count_packets",
    "-show_streams",
    "-show_format",
    "-of",
    "json",
    path,
  ]);
  return JSON.parse(out).streams;
}

/** ffprobe's container duration of a file, in seconds. */
export async function probeDuration(path: string): Promise<number> {
  const { out } = await run("ffprobe", [
    "-v",
    "error",
    "-show_entries",
    "format=duration",
    "-of",
    "csv=p=0",
    path,
  ]);
  return Number(out.trim());
}

/** Keyframe flags of the video packets of a file, in decode order. */
export async function probeVideoKeyflags(path: string): Promise<boolean[]> {
  const { out } = await run("ffprobe", [
    "-v",
    "error",
    "-select_streams",
    "v:0",
    "-show_entries",
    "packet=flags",
    "-of",
    "json",
    path,
  ]);
  return JSON.parse(out).packets.map((p: { flags: string }) => p.flags.startsWith("K"));
}

/** Frames ffmpeg decodes per stream type, and whatever it printed at `-v error`. */
export async function decode(
  path: string,
): Promise<{ errors: string; video: number; audio: number }> {
  const cmd = new Deno.Command("ffmpeg", {
    args: ["-v", "error", "-i", path, "-f", "null", "-"],
    stdout: "piped",
    stderr: "piped",
  });
  const result = await cmd.output();
  const errors = new TextDecoder().decode(result.stderr);
  if (!result.success) return { errors: errors || "ffmpeg failed", video: 0, audio: 0 };
  const { out } = await run("ffprobe", [
    "-v",
    "error",
    "-count_frames",
    "-show_entries",
    "stream=codec_type,nb_read_frames",
    "-of",
    "json",
    path,
  ]);
  let video = 0;
  let audio = 0;
  for (const s of JSON.parse(out).streams) {
    if (s.codec_type === "video") video += Number(s.nb_read_frames);
    if (s.codec_type === "audio") audio += Number(s.nb_read_frames);
  }
  return { errors, video, audio };
}

/** Seeded PRNG (mulberry32), so fuzz failures reproduce: returns floats in [0, 1). */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** `length` random bytes from `rand`. */
export function randomBytes(rand: () => number, length: number): Uint8Array {
  const out = new Uint8Array(length);
  for (let i = 0; i < length; i++) out[i] = Math.floor(rand() * 256);
  return out;
}

/** A copy of `data` with `flips` random bytes replaced. */
export function mutate(rand: () => number, data: Uint8Array, flips: number): Uint8Array {
  const out = data.slice();
  for (let i = 0; i < flips && out.length > 0; i++) {
    out[Math.floor(rand() * out.length)] = Math.floor(rand() * 256);
  }
  return out;
}

/** One-frame Annex-B H.264 or H.265 elementary stream made by ffmpeg with extra encoder args. */
export async function rawVideo(
  codec: "h264" | "hevc",
  size: string,
  args: string[] = [],
): Promise<Uint8Array> {
  const path = await tempPath(`raw-${codec}-${size}-${args.join("_").replace(/[^\w]/g, "")}`);
  await run("ffmpeg", [
    "-v",
    "error",
    "-y",
    "-f",
    "lavfi",
    "-i",
    `testsrc2=size=${size}:rate=25`,
    "-frames:v",
    "1",
    ...(codec === "h264" ? ["-c:v", "libx264"] : [
      "-c:v",
      "libx265",
      "-x265-params",
      "log-level=error",
    ]),
    ...args,
    "-f",
    codec,
    path,
  ]);
  return await Deno.readFile(path);
}

/** Runs `parse` and accepts success or a ParseError; any other error fails the test. */
export function parsesOrThrowsParseError(parse: () => unknown, what: string): void {
  try {
    parse();
  } catch (e) {
    if (!(e instanceof ParseError)) {
      throw new Error(`${what}: threw ${(e as Error)?.name}: ${(e as Error)?.message}`, {
        cause: e,
      });
    }
  }
}
