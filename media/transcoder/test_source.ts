/**
 * Test helpers of the decoding pipeline: an engine that notes the ffmpeg jobs it starts, and
 * a source Stream of an ffmpeg-made clip whose frames a test pushes at its own pace.
 */
import type { CodecEngine, EngineJob, LiveJob, LiveJobOptions } from "../engine/engine.ts";
import { NativeEngine } from "../engine/native.ts";
import { TsDemuxer } from "../formats/mpegts/demuxer.ts";
import { run, tempPath } from "../formats/test_fixtures.ts";
import type { MediaFrame } from "../frame.ts";
import { Stream } from "../stream.ts";

/** The native engine, noting each live job's arguments and which jobs still run. */
export class WatchedEngine implements CodecEngine {
  readonly kind = "native";
  /** Each live job's input and output arguments, and whether it still runs. */
  readonly jobs: { input: string[]; output: string[]; running: boolean }[] = [];
  #engine = new NativeEngine();

  run(job: EngineJob): Promise<Uint8Array> {
    return this.#engine.run(job);
  }

  start(options: LiveJobOptions): LiveJob {
    const job = this.#engine.start(options);
    const noted = { input: options.inputArgs, output: options.outputArgs, running: true };
    this.jobs.push(noted);
    return {
      write: (chunk, onWritten) => job.write(chunk, onWritten),
      get errors() {
        return job.errors;
      },
      output: job.output,
      close: () => {
        noted.running = false;
        return job.close();
      },
    };
  }

  get running(): number {
    return this.jobs.filter((job) => job.running).length;
  }

  close(): Promise<void> {
    return this.#engine.close();
  }
}

/**
 * A `width` x `height` 25 fps H.264 clip of `seconds` with B-frames and a keyframe every
 * second, as a source Stream named `name` and the frames to push to it (decode order).
 */
export async function clipSource(
  width: number,
  height: number,
  seconds: number,
  name = "source",
): Promise<{ frames: MediaFrame[]; stream: Stream }> {
  const path = await tempPath(`${name}-${width}x${height}-${seconds}s.ts`);
  await run("ffmpeg", [
    ...["-v", "error", "-y", "-f", "lavfi", "-i", `testsrc2=size=${width}x${height}:rate=25`],
    ...["-t", String(seconds), "-pix_fmt", "yuv420p", "-c:v", "libx264", "-bf", "2"],
    ...["-g", "25", path],
  ]);
  const demuxer = new TsDemuxer();
  const all = [...demuxer.push(await Deno.readFile(path)), ...demuxer.flush()];
  const track = demuxer.tracks.find((t) => t.kind === "video")!;
  const frames = all.filter((f) => f.trackId === track.id);
  const stream = new Stream({
    name,
    mediaSessionId: `${name}-id`,
    tracks: [{ ...track, id: 0, width, height }],
    mediaProvider: "test",
    stopProvider: () => Promise.resolve(),
  });
  return { frames: frames.map((f) => ({ ...f, trackId: 0 })), stream };
}
