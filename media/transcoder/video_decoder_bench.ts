/**
 * What the video decoder costs: `deno run -A media/transcoder/video_decoder_bench.ts`.
 *
 * For 10 s H.264 clips (x264 defaults: B-frames, a keyframe every 2 s) at 360p and 720p30:
 * - native: the frames the streaming decoder sustains (pushed as fast as pictures come back,
 *   at most 20 frames ahead), with the CPU time of its ffmpeg and of this process, against
 *   `ffmpeg -i clip -f rawvideo -pix_fmt yuv420p -y /dev/null` (one thread, and default);
 *   and the delay from pushing a frame to its picture at the clip's real rate;
 * - wasm: pictures per second of the chunked decoder's runs, one GOP per run.
 */
import { silentLogger } from "../../core/log.ts";
import { NativeEngine } from "../engine/native.ts";
import { WasmEngine } from "../engine/wasm.ts";
import { TsDemuxer } from "../formats/mpegts/demuxer.ts";
import type { MediaFrame } from "../frame.ts";
import { createVideoDecoder } from "./video_decoder.ts";
import {
  decoderInput,
  decoderOutputArgs,
  decoderProbeArgs,
  keyframeSize,
} from "./video_decoder_input.ts";

const clipSeconds = 10;
const fps = 30;
const dir = await Deno.makeTempDir({ prefix: "decoder-bench-" });

/** Clock ticks per second of /proc's CPU times. */
const ticksPerSecond = 100;

/** user+sys CPU seconds of a process, from /proc. */
function cpuSeconds(pid: number | "self"): number {
  const stat = Deno.readTextFileSync(`/proc/${pid}/stat`);
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return (Number(fields[11]) + Number(fields[12])) / ticksPerSecond;
}

/** Pids of this process' ffmpeg children. */
function ffmpegChildren(): number[] {
  const pids: number[] = [];
  for (const entry of Deno.readDirSync("/proc")) {
    if (!/^\d+$/.test(entry.name)) continue;
    try {
      const stat = Deno.readTextFileSync(`/proc/${entry.name}/stat`);
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      if (ppid === Deno.pid && stat.includes("(ffmpeg)")) pids.push(Number(entry.name));
    } catch {
      // Gone meanwhile.
    }
  }
  return pids;
}

async function makeClip(height: number): Promise<string> {
  const path = `${dir}/clip${height}.ts`;
  const width = height * 16 / 9;
  const args = [
    ...["-v", "error", "-y", "-f", "lavfi", "-i", `testsrc2=size=${width}x${height}:rate=${fps}`],
    ...["-t", String(clipSeconds), "-pix_fmt", "yuv420p", "-c:v", "libx264", "-g", "60", path],
  ];
  const result = await new Deno.Command("ffmpeg", { args }).output();
  if (!result.success) throw new Error("ffmpeg failed");
  return path;
}

function demux(data: Uint8Array) {
  const demuxer = new TsDemuxer();
  const frames = [...demuxer.push(data), ...demuxer.flush()];
  const track = demuxer.tracks.find((t) => t.kind === "video")!;
  return { track, frames: frames.filter((f) => f.trackId === track.id) };
}

async function ffmpegCpu(path: string, threads: string[]): Promise<string> {
  const script = `TIMEFORMAT='%U %S %R'; time ffmpeg -v error ${
    threads.join(" ")
  } -i ${path} -f rawvideo -pix_fmt yuv420p -y /dev/null`;
  const out = await new Deno.Command("bash", { args: ["-c", script], stderr: "piped" }).output();
  const [user, sys, real] = new TextDecoder().decode(out.stderr).trim().split(/\s+/).map(Number);
  const frames = clipSeconds * fps;
  return `cpu ${(user + sys).toFixed(2)} s (${
    ((user + sys) * 1000 / frames).toFixed(2)
  } ms/picture), ${(frames / real).toFixed(0)} fps`;
}

async function native(path: string, height: number): Promise<void> {
  const { track, frames } = demux(await Deno.readFile(path));
  const engine = new NativeEngine();
  let pictures = 0;
  const decoder = createVideoDecoder({
    engine,
    track,
    log: silentLogger,
    onPicture: () => pictures++,
  });
  const selfBefore = cpuSeconds("self");
  const start = performance.now();
  let pid = 0;
  for (const [i, frame] of frames.entries()) {
    while (i - pictures > 20) await new Promise((r) => setTimeout(r, 1));
    decoder.push(frame);
    if (!pid) pid = ffmpegChildren()[0] ?? 0;
  }
  while (pictures < frames.length - 8) await new Promise((r) => setTimeout(r, 1));
  const seconds = (performance.now() - start) / 1000;
  const ffmpegCpuSeconds = pid ? cpuSeconds(pid) : NaN;
  const selfCpu = cpuSeconds("self") - selfBefore;
  await decoder.close();
  await engine.close();
  console.log(
    `native ${height}p: ${pictures} pictures in ${seconds.toFixed(2)} s = ${
      (pictures / seconds).toFixed(0)
    } fps; ffmpeg cpu ${ffmpegCpuSeconds.toFixed(2)} s (${
      (ffmpegCpuSeconds * 1000 / pictures).toFixed(2)
    } ms/picture), server cpu ${selfCpu.toFixed(2)} s (${
      (selfCpu * 1000 / pictures).toFixed(2)
    } ms/picture), dropped ${decoder.dropped}`,
  );
  console.log(`  ffmpeg -threads 1 to /dev/null: ${await ffmpegCpu(path, ["-threads", "1"])}`);
  console.log(`  ffmpeg (default threads) to /dev/null: ${await ffmpegCpu(path, [])}`);
}

/** Wall time from pushing a frame to its picture, with frames pushed at their real rate. */
async function nativeLatency(path: string, height: number): Promise<void> {
  const { track, frames } = demux(await Deno.readFile(path));
  const engine = new NativeEngine();
  const pushedAt = new Map<number, number>();
  const delaysMs: number[] = [];
  const decoder = createVideoDecoder({
    engine,
    track,
    log: silentLogger,
    onPicture: (p) => delaysMs.push(performance.now() - pushedAt.get(p.pts)!),
  });
  const selfBefore = cpuSeconds("self");
  const start = performance.now();
  let pid = 0;
  for (const [i, frame] of frames.slice(0, 5 * fps).entries()) {
    const dueMs = start + i * 1000 / fps;
    await new Promise((r) => setTimeout(r, Math.max(0, dueMs - performance.now())));
    pushedAt.set(frame.pts, performance.now());
    decoder.push(frame);
    if (!pid) pid = ffmpegChildren()[0] ?? 0;
  }
  await new Promise((r) => setTimeout(r, 500));
  const seconds = (performance.now() - start) / 1000;
  const ffmpegCpuSeconds = pid ? cpuSeconds(pid) : NaN;
  const selfCpu = cpuSeconds("self") - selfBefore;
  await decoder.close();
  await engine.close();
  const sorted = delaysMs.toSorted((a, b) => a - b);
  console.log(
    `  native ${height}p at ${fps} fps: ${delaysMs.length} pictures, push to picture median ${
      sorted[sorted.length >> 1].toFixed(0)
    } ms, p95 ${sorted[Math.floor(sorted.length * 0.95)].toFixed(0)} ms (frame interval ${
      (1000 / fps).toFixed(0)
    } ms); cpu: ffmpeg ${(ffmpegCpuSeconds * 100 / seconds).toFixed(1)}%, server ${
      (selfCpu * 100 / seconds).toFixed(1)
    }% of a core`,
  );
}

/** Decodes each GOP of the clip in one wasm run, as the chunked decoder does. */
async function wasm(path: string, height: number): Promise<void> {
  const { track, frames } = demux(await Deno.readFile(path));
  const engine = new WasmEngine();
  const gops: MediaFrame[][] = [];
  for (const frame of frames) {
    if (frame.keyframe) gops.push([]);
    gops.at(-1)?.push(frame);
  }
  let pictures = 0;
  let seconds = 0;
  for (const gop of gops) {
    const input = decoderInput(track, keyframeSize(track, gop[0])!);
    const bytes = Uint8Array.from(gop.flatMap((f) => [...input.encode(f)]));
    const start = performance.now();
    const out = await engine.run({
      inputArgs: [...decoderProbeArgs, ...input.args],
      input: bytes,
      outputArgs: decoderOutputArgs,
      live: true,
    });
    seconds += (performance.now() - start) / 1000;
    pictures += out.length / (track.width! * track.height! * 1.5);
  }
  await engine.close();
  console.log(
    `wasm ${height}p: ${pictures} pictures in ${gops.length} runs, ${seconds.toFixed(2)} s = ${
      (pictures / seconds).toFixed(0)
    } fps (Worker start-up included)`,
  );
}

try {
  for (const height of [360, 720]) {
    const path = await makeClip(height);
    await native(path, height);
    await nativeLatency(path, height);
    await wasm(path, height);
  }
} finally {
  await Deno.remove(dir, { recursive: true });
}
