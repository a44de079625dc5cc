/**
 * What decoding a watermark costs: `deno run -A media/formats/png_bench.ts`.
 *
 * 256x256 and 1920x1080 RGBA PNGs written by ffmpeg (testsrc2 with varying alpha, `-pred
 * mixed` so every filter type occurs), each decoded 5 times to warm up and then 30 times:
 * median, fastest and 90th percentile wall time per decode, in milliseconds.
 */
import { decodePng } from "./png.ts";

const warmupRuns = 5;
const timedRuns = 30;
const dir = await Deno.makeTempDir({ prefix: "png-bench-" });

async function ffmpegPng(size: string): Promise<Uint8Array> {
  const path = `${dir}/${size}.png`;
  const source = `testsrc2=size=${size}:d=0.04,format=rgba,` +
    "geq=r='r(X,Y)':g='g(X,Y)':b='b(X,Y)':a='mod(X*7+Y*13,256)'";
  const args = ["-v", "error", "-y", "-f", "lavfi", "-i", source, "-frames:v", "1"];
  const out = await new Deno.Command("ffmpeg", {
    args: [...args, "-pix_fmt", "rgba", "-pred", "mixed", path],
  }).output();
  if (!out.success) throw new Error(new TextDecoder().decode(out.stderr));
  return await Deno.readFile(path);
}

try {
  for (const size of ["256x256", "1920x1080"]) {
    const png = await ffmpegPng(size);
    for (let i = 0; i < warmupRuns; i++) await decodePng(png);
    const ms: number[] = [];
    for (let i = 0; i < timedRuns; i++) {
      const t0 = performance.now();
      await decodePng(png);
      ms.push(performance.now() - t0);
    }
    ms.sort((a, b) => a - b);
    const at = (q: number) => ms[Math.min(ms.length - 1, Math.floor(q * ms.length))].toFixed(2);
    console.log(
      `${size} RGBA (${png.length} bytes): median ${at(0.5)} ms, fastest ${at(0)} ms, ` +
        `p90 ${at(0.9)} ms`,
    );
  }
} finally {
  await Deno.remove(dir, { recursive: true });
}
