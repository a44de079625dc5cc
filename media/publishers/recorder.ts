/**
 * Recorder: one or more streams written into fragmented MP4 files.
 *
 * Fragments reach the disk at least every `recordFlushIntervalMs`, so a file cut by a crash
 * keeps all but its last second. Every file starts at a keyframe of each video track and
 * carries its own init segment, so each file of a rotation plays on its own. While a file is
 * written its name holds the literal `{endTime}`; closing renames it with the end time.
 */
import { dirname } from "node:path";
import type { Logger } from "../../core/log.ts";
import { pathInside } from "../../core/paths.ts";
import { recorderFiles, recorderWrittenBytes } from "../../core/metrics.ts";
import type { Codec, MediaFrame, Track } from "../frame.ts";
import { Fmp4Writer, moofBoxType } from "../formats/mp4/fmp4_writer.ts";
import type { Stream, StreamReader } from "../stream.ts";

/** Longest time media waits in memory before it is written to the file, in milliseconds. */
export const recordFlushIntervalMs = 1000;
/** File template used when the request gives none. */
export const defaultFileTemplate = "{streamName}-{startTime}-{endTime}";
/** Placeholder left in the name of a file being written, replaced when it closes. */
const endTimePlaceholder = "{endTime}";
/** Codecs an MP4 recording holds; tracks of other codecs are left out of the file. */
export const recordableCodecs: ReadonlySet<Codec> = new Set(["H264", "H265", "VP8", "AAC", "OPUS"]);

/** Bytes of a rotation size like "20M" (K, M, G are powers of 1024). */
export function parseRotationBytes(rotation: string): number {
  const unit = { K: 1024, M: 1024 ** 2, G: 1024 ** 3 }[rotation.slice(-1)];
  const count = Number(rotation.slice(0, -1));
  if (!unit || !Number.isInteger(count) || count <= 0) {
    throw new RangeError(`rotation ${rotation} is not a size like 20M`);
  }
  return count * unit;
}

/** Values of the placeholders of a file template. */
export interface TemplateValues {
  streamName: string;
  mediaSessionId: string;
  /** Start of the file, ms since the epoch. */
  startTime: number;
}

/**
 * The file name of `template` (relative to the recordings folder, ending in .mp4) with
 * `{endTime}` left in place. Values are stripped of path separators so only the template
 * itself can name sub-folders.
 */
export function fileNameOf(template: string, values: TemplateValues): string {
  const safe = (v: string) => v.replace(/[/\\]/g, "_").replace(/^\.+/, "_");
  const name = template
    .replaceAll("{streamName}", safe(values.streamName))
    .replaceAll("{mediaSessionId}", safe(values.mediaSessionId))
    .replaceAll("{startTime}", String(values.startTime));
  return name.toLowerCase().endsWith(".mp4") ? name : `${name}.mp4`;
}

/** What a Recorder writes and where. */
export interface RecorderOptions {
  /** The recordings folder. */
  folder: string;
  /** File template with {streamName}, {mediaSessionId}, {startTime}, {endTime}. */
  template: string;
  /** Value of {streamName} and {mediaSessionId} in file names. */
  names: { streamName: string; mediaSessionId: string };
  /**
   * Size of a file, in bytes, past which a new file starts at the next keyframe (so files
   * exceed it by at most a GOP); no rotation when absent.
   */
  rotationBytes?: number;
  /**
   * What is read and written for `stream`: the stream itself, or a stream with its audio
   * converted (G.711, which MP4 players do not take, recorded as AAC). Default: the stream.
   */
  recordable?: (stream: Stream) => Stream;
  log: Logger;
}

interface Input {
  /** The stream recorded: its name and id. */
  stream: Stream;
  /** What is read for it (`RecorderOptions.recordable`): its tracks go in the file. */
  source: Stream;
  reader: StreamReader;
  /** File track id of each of the stream's tracks in the current file; -1: not recorded. */
  fileTrackIds: number[];
  /** Ticks added to each track's timestamps to place them on the recorder's timeline. */
  offsetTicks: number[] | undefined;
  /** Frames are skipped until this input's next video keyframe (start of a file). */
  needKeyframe: boolean;
  hasVideo: boolean;
  /** Last decode time written of each track, in its clock. */
  lastDts: number[];
  loop: Promise<void>;
}

/** One file: its writer (fed synchronously) and its handle (opened on the file chain). */
interface Output {
  writer: Fmp4Writer;
  file: Deno.FsFile | undefined;
  /** Path as written, with {endTime} in it. */
  path: string;
  /** Name relative to the folder, with {endTime} in it. */
  name: string;
  /** Bytes written to the file. */
  bytes: number;
  /** Bytes of media given to the writer, written or not: what rotation goes by. */
  mediaBytes: number;
}

/** Writes the frames of its streams to MP4 files. */
export class Recorder {
  #options: RecorderOptions;
  #inputs = new Map<string, Input>();
  #output: Output | undefined;
  /** File operations run one after another on this chain, in the order frames produced them. */
  #chain: Promise<void> = Promise.resolve();
  #originMs = performance.now();
  #rotatePending = false;
  #stopped = false;
  #closedFiles: string[] = [];
  #timer: ReturnType<typeof setInterval>;
  /** Called once when every recorded stream has ended by itself. */
  onStreamsEnded: (() => void) | undefined;

  constructor(options: RecorderOptions) {
    this.#options = options;
    this.#timer = setInterval(() => this.#flush(), recordFlushIntervalMs);
  }

  /** Name of the file being written (relative to the folder, {endTime} unreplaced), or "". */
  get fileName(): string {
    return this.#output?.name ?? "";
  }

  /** Final names (relative to the folder) of the files closed so far, oldest first. */
  get closedFiles(): readonly string[] {
    return this.#closedFiles;
  }

  /** mediaSessionIds of the recorded streams. */
  get mediaSessionIds(): string[] {
    return [...this.#inputs.keys()];
  }

  /** True when the stream of `mediaSessionId` is recorded here. */
  has(mediaSessionId: string): boolean {
    return this.#inputs.has(mediaSessionId);
  }

  /**
   * Starts recording `stream`. A file already being written is closed and a new one holding
   * every stream's tracks starts, because an MP4 declares its tracks up front. Resolves once
   * the file is open.
   */
  async add(stream: Stream): Promise<void> {
    const source = this.#options.recordable?.(stream) ?? stream;
    const input: Input = {
      stream,
      source,
      reader: source.reader(undefined, "recorder"),
      fileTrackIds: [],
      offsetTicks: undefined,
      needKeyframe: false,
      hasVideo: source.tracks.some((t) => t.kind === "video"),
      lastDts: [],
      loop: Promise.resolve(),
    };
    this.#inputs.set(stream.mediaSessionId, input);
    this.#startOutput();
    input.needKeyframe = false; // its reader starts at a keyframe already
    input.loop = this.#read(input);
    await this.#chain;
    if (!this.#output?.file) {
      await this.remove(stream.mediaSessionId);
      throw new Error(`cannot open the recording file ${this.#output?.name ?? ""}`);
    }
  }

  /** Stops recording one stream; the file goes on with the others. */
  async remove(mediaSessionId: string): Promise<boolean> {
    const input = this.#inputs.get(mediaSessionId);
    if (!input) return false;
    this.#inputs.delete(mediaSessionId);
    input.reader.close();
    await input.loop;
    return true;
  }

  /** Stops every stream and closes the file with its final name. Idempotent. */
  async stop(): Promise<void> {
    if (!this.#stopped) {
      this.#stopped = true;
      clearInterval(this.#timer);
      const inputs = [...this.#inputs.values()];
      this.#inputs.clear();
      for (const input of inputs) input.reader.close();
      await Promise.all(inputs.map((i) => i.loop));
      const output = this.#output;
      this.#output = undefined;
      if (output) this.#enqueue(() => this.#close(output));
    }
    await this.#chain;
  }

  async #read(input: Input): Promise<void> {
    for await (const frame of input.reader) {
      if (this.#stopped) break;
      try {
        this.#push(input, frame);
      } catch (err) {
        // A stream the file format cannot hold (e.g. H.264 without parameter sets).
        this.#options.log.error("recording of a stream failed", {
          stream: input.stream.name,
          err,
        });
        input.reader.close();
      }
      // Waiting for the disk here lets the reader's queue, not memory, absorb a slow disk.
      await this.#chain;
    }
    if (this.#stopped || this.#inputs.get(input.stream.mediaSessionId) !== input) return;
    this.#inputs.delete(input.stream.mediaSessionId);
    if (this.#inputs.size === 0) this.onStreamsEnded?.();
  }

  /** Places a frame on the recorder's timeline and hands it to the current writer. */
  #push(input: Input, frame: MediaFrame): void {
    const tracks = input.source.tracks;
    const video = tracks[frame.trackId].kind === "video";
    if (input.offsetTicks === undefined) {
      const offsetSec = (performance.now() - this.#originMs) / 1000 -
        frame.dts / tracks[frame.trackId].clockRate;
      input.offsetTicks = tracks.map((t) => Math.round(offsetSec * t.clockRate));
    }
    const startsPicture = !input.hasVideo || (video && frame.keyframe);
    if (this.#rotatePending && startsPicture) {
      this.#startOutput();
      input.needKeyframe = false;
    }
    if (input.needKeyframe) {
      if (!startsPicture) return;
      input.needKeyframe = false;
    }
    const output = this.#output;
    const fileTrackId = input.fileTrackIds[frame.trackId];
    if (!output || fileTrackId < 0) return;
    const offset = input.offsetTicks[frame.trackId];
    // A file's decode times must rise (players and ffmpeg refuse it otherwise): an audio
    // frame stepping back (a WebRTC publisher's timeline adjusted under load) covers time
    // already written and is dropped; a video frame is moved just after its predecessor.
    let dts = frame.dts;
    const lastDts = input.lastDts[frame.trackId] ?? -Infinity;
    if (dts <= lastDts) {
      if (!video) return;
      dts = lastDts + 1;
    }
    input.lastDts[frame.trackId] = dts;
    const bytes = output.writer.push({
      trackId: fileTrackId,
      codec: frame.codec,
      pts: Math.max(frame.pts, dts) + offset,
      dts: dts + offset,
      keyframe: frame.keyframe,
      data: frame.data,
    });
    if (bytes) this.#emit(output, bytes);
    output.mediaBytes += frame.data.length;
    const limit = this.#options.rotationBytes;
    // Going by media given rather than bytes written cuts files within a GOP of the size.
    if (limit !== undefined && output.mediaBytes >= limit) this.#rotatePending = true;
  }

  /**
   * Ends the current file (if any) and starts one with the tracks of every input; each
   * input then waits for its next keyframe so the new file starts decodable.
   */
  #startOutput(): void {
    this.#rotatePending = false;
    const previous = this.#output;
    this.#output = undefined;
    if (previous) this.#enqueue(() => this.#close(previous));
    const tracks: Track[] = [];
    for (const input of this.#inputs.values()) {
      input.needKeyframe = input.hasVideo;
      input.fileTrackIds = input.source.tracks.map((t) => {
        if (!recordableCodecs.has(t.codec)) {
          this.#options.log.warn("recording leaves out a track MP4 cannot hold here", {
            stream: input.stream.name,
            codec: t.codec,
          });
          return -1;
        }
        tracks.push({ ...t, id: tracks.length });
        return tracks.length - 1;
      });
    }
    if (tracks.length === 0) return;
    const { template, names } = this.#options;
    const output: Output = {
      writer: new Fmp4Writer({
        tracks,
        fragmentDurationMs: recordFlushIntervalMs,
        crashSafe: true,
      }),
      file: undefined,
      path: "",
      name: fileNameOf(template, { ...names, startTime: Date.now() }),
      bytes: 0,
      mediaBytes: 0,
    };
    this.#output = output;
    this.#enqueue(() => this.#open(output));
  }

  async #open(output: Output): Promise<void> {
    const base = output.name;
    for (let n = 1;; n++) {
      const path = pathInside(this.#options.folder, output.name, "config.fileTemplate");
      await Deno.mkdir(dirname(path), { recursive: true });
      try {
        output.file = await Deno.open(path, { write: true, createNew: true });
        output.path = path;
        recorderFiles.inc();
        return;
      } catch (err) {
        if (!(err instanceof Deno.errors.AlreadyExists)) throw err;
        output.name = base.replace(/\.mp4$/i, `_${n}.mp4`);
      }
    }
  }

  /** Queues a chunk of the writer with the commit point the writer gave for it. */
  #emit(output: Output, bytes: Uint8Array): void {
    const commitOffset = output.writer.commitOffset;
    this.#enqueue(() => this.#write(output, bytes, commitOffset));
  }

  /**
   * Appends a chunk. A fragment's moof is written disguised as a `free` box and only turned
   * into a `moof` once its data is on disk, so a file cut anywhere (kill -9, power loss)
   * still plays up to its last committed fragment.
   */
  async #write(output: Output, bytes: Uint8Array, commitOffset?: number): Promise<void> {
    const file = output.file;
    if (!file) return;
    const start = output.bytes;
    let written = 0;
    while (written < bytes.length) written += await file.write(bytes.subarray(written));
    output.bytes += bytes.length;
    recorderWrittenBytes.inc(bytes.length);
    if (commitOffset === undefined) return;
    await file.syncData();
    await file.seek(start + commitOffset, Deno.SeekMode.Start);
    await file.write(moofBoxType);
    await file.seek(0, Deno.SeekMode.End);
  }

  #flush(): void {
    const output = this.#output;
    if (!output) return;
    try {
      const bytes = output.writer.flush();
      if (bytes) this.#emit(output, bytes);
    } catch (err) {
      this.#options.log.error("recording flush failed", { file: output.name, err });
    }
  }

  /** Writes what the writer holds, closes the file and gives it its final name. */
  async #close(output: Output): Promise<void> {
    const tail = output.writer.finish();
    if (tail) await this.#write(output, tail, output.writer.commitOffset);
    if (!output.file) return;
    output.file.close();
    output.file = undefined;
    if (output.bytes === 0) {
      await Deno.remove(output.path);
      return;
    }
    const endTime = String(Date.now());
    let finalName = output.name.replaceAll(endTimePlaceholder, endTime);
    if (finalName !== output.name) {
      let finalPath = pathInside(this.#options.folder, finalName, "config.fileTemplate");
      for (let n = 1; await exists(finalPath); n++) {
        finalName = output.name.replaceAll(endTimePlaceholder, `${endTime}_${n}`);
        finalPath = pathInside(this.#options.folder, finalName, "config.fileTemplate");
      }
      await Deno.rename(output.path, finalPath);
    }
    this.#closedFiles.push(finalName);
    this.#options.log.info("recording closed", { file: finalName, bytes: output.bytes });
  }

  #enqueue(step: () => Promise<void>): void {
    this.#chain = this.#chain.then(step).catch((err) => {
      this.#options.log.error("recording file operation failed", { err });
    });
  }
}

async function exists(path: string): Promise<boolean> {
  try {
    await Deno.lstat(path);
    return true;
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) return false;
    throw err;
  }
}
