/** ffmpeg as an RTMP camera: publishes a test picture and tone to a server in real time. */

/** Options of publishRtmp. */
export interface PublishOptions {
  /** Audio channels, 1 or 2. */
  channels?: number;
  /** Publish silence instead of the 440 Hz tone. */
  silent?: boolean;
}

/**
 * Starts ffmpeg publishing testsrc2 640x360@25 (GOP 1 s) + a 440 Hz sine (or silence) as
 * H.264 + AAC 48 kHz to `url` for `seconds`; the caller stops it with `stopPublisher`.
 */
export function publishRtmp(
  url: string,
  seconds: number,
  { channels = 1, silent = false }: PublishOptions = {},
): Deno.ChildProcess {
  const audio = silent ? "anullsrc=r=48000" : "sine=frequency=440:sample_rate=48000";
  return new Deno.Command("ffmpeg", {
    args: [
      ...["-hide_banner", "-nostdin", "-loglevel", "error", "-re"],
      ...["-f", "lavfi", "-i", "testsrc2=size=640x360:rate=25"],
      ...["-f", "lavfi", "-i", audio],
      ...["-t", String(seconds), "-c:v", "libx264", "-preset", "ultrafast", "-tune", "zerolatency"],
      ...["-g", "25", "-pix_fmt", "yuv420p", "-threads", "1"],
      ...["-c:a", "aac", "-b:a", "64k", "-ar", "48000", "-ac", String(channels), "-f", "flv", url],
    ],
    stdin: "null",
    stdout: "null",
    stderr: "piped",
  }).spawn();
}

/** Stops a publisher started by `publishRtmp`; returns its exit status and error output. */
export async function stopPublisher(
  child: Deno.ChildProcess,
): Promise<{ success: boolean; stderr: string }> {
  try {
    child.kill("SIGKILL");
  } catch {
    // Exited already.
  }
  const out = await child.output();
  return { success: out.success, stderr: new TextDecoder().decode(out.stderr) };
}
