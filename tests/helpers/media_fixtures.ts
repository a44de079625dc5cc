/**
 * Media for the media tests, made with ffmpeg at run time (no media in the repository), and
 * ffprobe helpers that read what a user would check: codecs, sizes, durations, frame counts.
 */
import { run } from "../../media/formats/test_fixtures.ts";

/** A clip to generate: testsrc2 video (H.264) with a sine tone. */
export interface ClipOptions {
  /** Length, in seconds. */
  seconds: number;
  /** Audio codec; none for a video-only clip. */
  audio?: "aac" | "opus";
  /** Frames between keyframes. */
  gop?: number;
  /** Frames per second. */
  fps?: number;
  width?: number;
  height?: number;
  /** Leave out the video (audio-only clip). */
  noVideo?: boolean;
  /** lavfi video source with its options, e.g. `color=c=red` (default testsrc2). */
  source?: string;
  /** Frequency of the tone, in Hz (default 440). */
  toneHz?: number;
}

/**
 * Environment variable naming a directory where makeClip keeps every clip it encodes, named by
 * its ffmpeg arguments, so the other test files of a run copy it instead of encoding it again
 * (scripts/test.sh sets it to a temp dir of the run and removes it). Unset, every call encodes.
 */
export const clipCacheEnv = "MEDIASERVER_TEST_CLIP_CACHE";

/** Writes an MP4 clip to `path` (fragmented MP4 output is not used: a plain one, moov at end). */
export async function makeClip(path: string, options: ClipOptions): Promise<void> {
  const { seconds, fps = 25, gop = 25, width = 320, height = 240 } = options;
  const { source = "testsrc2", toneHz = 440 } = options;
  const args = ["-v", "error", "-y"];
  if (!options.noVideo) {
    const sep = source.includes("=") ? ":" : "=";
    args.push("-f", "lavfi", "-i", `${source}${sep}size=${width}x${height}:rate=${fps}`);
  }
  if (options.audio) {
    args.push("-f", "lavfi", "-i", `sine=frequency=${toneHz}:sample_rate=48000`);
  }
  args.push("-t", String(seconds));
  if (!options.noVideo) {
    args.push(
      "-c:v",
      "libx264",
      "-preset",
      "ultrafast",
      "-pix_fmt",
      "yuv420p",
      "-g",
      String(gop),
      "-threads",
      "1",
    );
  }
  if (options.audio === "aac") args.push("-c:a", "aac", "-b:a", "64k");
  if (options.audio === "opus") args.push("-c:a", "libopus", "-b:a", "64k");
  const cacheDir = Deno.env.get(clipCacheEnv);
  if (!cacheDir) {
    await run("ffmpeg", [...args, path]);
    return;
  }
  // ffmpeg picks the container by the name's extension: it is part of the key.
  const extension = /\.[^./]+$/.exec(path)?.[0] ?? "";
  const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(args.join("\0")));
  const key = Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, "0")).join("");
  const cached = `${cacheDir}/${key}${extension}`;
  try {
    await Deno.copyFile(cached, path);
    return;
  } catch (error) {
    if (!(error instanceof Deno.errors.NotFound)) throw error;
  }
  // Encoded under a name of its own and renamed: a test file running beside (scripts/test.sh
  // runs groups in parallel) copies a whole clip or none; two that encode it both rename whole.
  await Deno.mkdir(cacheDir, { recursive: true });
  const partial = `${cacheDir}/${crypto.randomUUID()}-${key}${extension}`;
  await run("ffmpeg", [...args, partial]);
  await Deno.rename(partial, cached);
  await Deno.copyFile(cached, path);
}

/** What ffprobe says about one stream of a file. */
export interface ProbedStream {
  codec_type: string;
  codec_name: string;
  width?: number;
  height?: number;
  /** Frames decoded by ffprobe (`-count_frames`), as text. */
  nb_read_frames?: string;
}

/** A file as ffprobe sees it: container duration in seconds and streams with decoded frame counts. */
export async function probe(path: string): Promise<{ duration: number; streams: ProbedStream[] }> {
  const { out } = await run("ffprobe", [
    "-v",
    "error",
    "-count_frames",
    "-show_entries",
    "format=duration:stream=codec_type,codec_name,width,height,nb_read_frames",
    "-of",
    "json",
    path,
  ]);
  const json = JSON.parse(out);
  return { duration: Number(json.format.duration), streams: json.streams };
}

/** Width and height from a PNG's IHDR; throws when the bytes are not a PNG. */
export function pngSize(png: Uint8Array): { width: number; height: number } {
  const signature = [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a];
  if (png.length < 24 || signature.some((b, i) => png[i] !== b)) throw new Error("not a PNG");
  const view = new DataView(png.buffer, png.byteOffset, png.byteLength);
  return { width: view.getUint32(16), height: view.getUint32(20) };
}

/** Polls `check` every 100 ms until it returns a value other than undefined, or throws after `timeoutMs`. */
export async function waitFor<T>(
  what: string,
  check: () => Promise<T | undefined> | T | undefined,
  timeoutMs = 10_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}
