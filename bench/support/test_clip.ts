/**
 * Source clips of the media benchmarks, made once with ffmpeg and cached in
 * $TMPDIR/bench-clips/: testsrc2 video (x264 `veryfast`, with B-frames) and a 440 Hz tone
 * in AAC, as a camera or an encoder in front of the server would send.
 */

/** How a clip is made. */
export interface ClipOptions {
  /** Frames per second. */
  fps: number;
  /** Frames from one keyframe to the next. */
  keyFrameInterval: number;
  /** Length, in seconds. */
  seconds: number;
}

const cacheDir = `${Deno.env.get("TMPDIR") ?? "/tmp"}/bench-clips`;

/** Path of the clip `width`x`height` of `options`, made on the first call. */
export async function testClip(
  width: number,
  height: number,
  { fps, keyFrameInterval, seconds }: ClipOptions,
): Promise<string> {
  const path =
    `${cacheDir}/testsrc2_${width}x${height}_${fps}fps_gop${keyFrameInterval}_${seconds}s.mp4`;
  try {
    await Deno.stat(path);
    return path;
  } catch {
    // Not made yet.
  }
  await Deno.mkdir(cacheDir, { recursive: true });
  const partial = `${path}.part.mp4`;
  const args = [
    ...["-v", "error", "-y"],
    ...["-f", "lavfi", "-i", `testsrc2=size=${width}x${height}:rate=${fps}`],
    ...["-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000"],
    ...["-t", String(seconds), "-pix_fmt", "yuv420p"],
    ...["-c:v", "libx264", "-preset", "veryfast", "-g", String(keyFrameInterval)],
    ...["-c:a", "aac", "-b:a", "128k", partial],
  ];
  const made = await new Deno.Command("ffmpeg", { args, stderr: "inherit" }).output();
  if (!made.success) throw new Error(`ffmpeg could not make ${path}`);
  await Deno.rename(partial, path);
  return path;
}
