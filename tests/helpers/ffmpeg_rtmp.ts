/** ffmpeg as an RTMP camera: publishes a test picture and tone to a server in real time. */

/**
 * Starts ffmpeg publishing testsrc2 640x360@25 (GOP 1 s) + a 440 Hz sine as H.264 + AAC
 * 48 kHz to `url` for `seconds`; the caller stops it with `stopPublisher`.
 */
export function publishRtmp(url: string, seconds: number): Deno.ChildProcess {
  return new Deno.Command("ffmpeg", {
    args: [
      ...["-hide_banner", "-nostdin", "-loglevel", "error", "-re"],
      ...["-f", "lavfi", "-i", "testsrc2=size=640x360:rate=25"],
      ...["-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000"],
      ...["-t", String(seconds), "-c:v", "libx264", "-preset", "ultrafast", "-tune", "zerolatency"],
      ...["-g", "25", "-pix_fmt", "yuv420p", "-threads", "1"],
      ...["-c:a", "aac", "-b:a", "64k", "-ar", "48000", "-ac", "1", "-f", "flv", url],
    ],
    stdin: "null",
    stdout: "null",
    stderr: "null",
  }).spawn();
}

/** Stops a publisher started by `publishRtmp` and waits for it to exit. */
export async function stopPublisher(child: Deno.ChildProcess): Promise<void> {
  try {
    child.kill("SIGKILL");
  } catch {
    // Exited already.
  }
  await child.status;
}
