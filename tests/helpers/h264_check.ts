/** Checks of a received H.264 elementary stream with ffmpeg and ffprobe. */
import { run } from "../../media/formats/test_fixtures.ts";

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
