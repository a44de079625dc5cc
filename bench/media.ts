/**
 * Media plane costs, in one run (about 60 s):
 * 1. Codec engine throughput: the same transcode job (10 s of 320x240 25 fps H.264 + AAC
 *    re-encoded with x264 ultrafast, audio copied) through native ffmpeg and ffmpeg.wasm;
 *    the ratio is wasm time over native time.
 * 2. Recording: CPU (share of one core) and resident memory of the server process with 1 and
 *    10 VOD streams (640x360 25 fps H.264 + AAC), measured first without recorders, then in
 *    the same process with a recorder on each stream; the difference divided by the stream
 *    count is the cost of one recorded stream. Two windows without recorders show the noise.
 * Run: deno run -A bench/media.ts
 */
import process from "node:process";
import { configSchema } from "../config.ts";
import { silentLogger } from "../core/log.ts";
import { NativeEngine } from "../media/engine/native.ts";
import { transcodeFrames } from "../media/engine/transcode.ts";
import { WasmEngine } from "../media/engine/wasm.ts";
import type { MediaFrame } from "../media/frame.ts";
import { Mp4Demuxer } from "../media/formats/mp4/demuxer.ts";
import { openFileByteSource } from "../media/providers/file_source.ts";
import { startServer } from "../server.ts";
import { makeClip } from "../tests/helpers/media_fixtures.ts";

/** Length of the transcode job's clip, in seconds. */
const transcodeClipSeconds = 10;
/** Length of the VOD clip played while recording is measured, in seconds. */
const vodClipSeconds = 18;
/** Time streams run before measuring starts, in milliseconds. */
const warmupMs = 1500;
/** Measuring window per phase, in milliseconds. */
const windowMs = 4000;

const dir = await Deno.makeTempDir({ prefix: "bench-media-" });
try {
  await benchEngines();
  await benchRecording();
} finally {
  await Deno.remove(dir, { recursive: true });
}

async function benchEngines(): Promise<void> {
  const path = `${dir}/transcode.mp4`;
  await makeClip(path, { seconds: transcodeClipSeconds, audio: "aac" });
  const source = await openFileByteSource(path);
  const demuxer = await Mp4Demuxer.open(source);
  const frames: MediaFrame[] = [];
  for await (const frame of demuxer.frames()) frames.push(frame);
  source.close();
  const videoFrames = frames.filter((f) => demuxer.tracks[f.trackId].kind === "video").length;
  const args = ["-c:v", "libx264", "-preset", "ultrafast", "-c:a", "copy"];
  const times: Record<string, number> = {};
  for (const engine of [new NativeEngine(), new WasmEngine()]) {
    // First run warms up (the wasm engine compiles its module once); the second is measured.
    await transcodeFrames(engine, demuxer.tracks, frames, args);
    const started = performance.now();
    const out = await transcodeFrames(engine, demuxer.tracks, frames, args);
    times[engine.kind] = performance.now() - started;
    await engine.close();
    if (out.frames.length === 0) throw new Error(`${engine.kind} produced no frames`);
    console.log(
      `engine ${engine.kind.padEnd(6)} x264 ultrafast 320x240: ${
        times[engine.kind].toFixed(0).padStart(5)
      } ms for ${videoFrames} frames = ${
        (videoFrames / times[engine.kind] * 1000).toFixed(0).padStart(4)
      } fps (${(transcodeClipSeconds * 1000 / times[engine.kind]).toFixed(1)}x real time)`,
    );
  }
  console.log(`engine ratio wasm/native time: ${(times.wasm / times.native).toFixed(2)}`);
}

async function benchRecording(): Promise<void> {
  const media = `${dir}/content`;
  await Deno.mkdir(media);
  await makeClip(`${media}/vod.mp4`, {
    seconds: vodClipSeconds,
    audio: "aac",
    width: 640,
    height: 360,
  });
  for (const count of [1, 10]) {
    const { plain, again, recorded } = await phase(media, count);
    const line = (label: string, m: Measure) =>
      `${String(count).padStart(2)} VOD streams ${label}: cpu ${
        (m.cpu * 100).toFixed(1).padStart(5)
      }% of a core, rss ${m.rssMb.toFixed(1)} MB`;
    console.log(line("not recorded", plain));
    console.log(line("recorded    ", recorded));
    console.log(
      `   per recorded stream: cpu ${
        ((recorded.cpu - plain.cpu) / count * 100).toFixed(2)
      }% of a core, rss ${((recorded.rssMb - plain.rssMb) / count).toFixed(2)} MB ` +
        `(noise: two windows without recorders differ by ${
          (Math.abs(again.cpu - plain.cpu) * 100).toFixed(2)
        }% of a core)`,
    );
  }
}

/** CPU time over wall time of the process (1 = one core), and resident memory. */
interface Measure {
  cpu: number;
  rssMb: number;
}

async function measure(): Promise<Measure> {
  const cpuBefore = process.cpuUsage();
  const started = performance.now();
  await new Promise((r) => setTimeout(r, windowMs));
  const cpu = process.cpuUsage(cpuBefore);
  return {
    cpu: (cpu.user + cpu.system) / ((performance.now() - started) * 1000),
    rssMb: Deno.memoryUsage().rss / 2 ** 20,
  };
}

/** Runs `count` VOD streams, measures, adds a recorder to each, measures again. */
async function phase(media: string, count: number) {
  const config = configSchema.parse({
    ports: { rest: 0, ws: 0, wss: 0, hls: 0, rtmp: 0 },
    folders: { media, records: `${dir}/records`, logs: `${dir}/logs` },
  });
  const server = await startServer(config, silentLogger);
  try {
    const { vod, recorders, streams } = server.services;
    for (let i = 0; i < count; i++) await vod.startup("vod-live://vod.mp4", `s${i}`);
    await new Promise((r) => setTimeout(r, warmupMs));
    const plain = await measure();
    const again = await measure();
    for (const stream of streams.list()) await recorders.startup(stream.mediaSessionId);
    await new Promise((r) => setTimeout(r, warmupMs));
    const recorded = await measure();
    if (streams.size !== count) throw new Error(`${streams.size} of ${count} streams still run`);
    return { plain, again, recorded };
  } finally {
    await server.stop();
    await Deno.remove(`${dir}/records`, { recursive: true }).catch(() => {});
  }
}
