/**
 * Recorders: one per recorded stream (`/recorder/*`, `/stream/startRecording`), and
 * multi-recorders writing several streams into one file (`/multipleRecorder/*`).
 */
import type { z } from "zod";
import type { Config } from "../config.ts";
import {
  defaultFileTemplate,
  fileNameOf,
  parseRotationBytes,
  recordableCodecs,
  Recorder,
} from "../media/publishers/recorder.ts";
import { Stream } from "../media/stream.ts";
import { convertedAudio } from "../media/engine/audio_conversion.ts";
import type { CodecEngine } from "../media/engine/engine.ts";
import type { Codec } from "../media/frame.ts";
import { ConflictError, NotFoundError, ServiceUnavailableError } from "./errors.ts";
import { freeBytes } from "./disk_space.ts";
import type { Cap } from "./limits.ts";
import type { Logger } from "./log.ts";
import { pathInside } from "./paths.ts";
import type { MultiRecorderRecord, RecorderRecord, recordingConfig } from "./records.ts";
import type { StreamRegistry } from "./stream_registry.ts";

/** Recording settings of a request. */
export type RecordingConfig = z.output<typeof recordingConfig>;

/** Scheme of multi-recorder URIs. */
const multiScheme = "multi-recorder://";

/** Bytes in a MiB. */
const mibBytes = 1024 * 1024;
/** Audio an MP4 recording takes as AAC, converted by the codec engine. */
const convertedForMp4: ReadonlySet<Codec> = new Set(["PCMU", "PCMA", "G722"]);

/**
 * The recorders of a server. Recorders and multi-recorders hold a slot of the `recorders`
 * cap while they exist; a new recording (or a stream added to a multi-recorder) is refused
 * with a 503 while the records folder's filesystem has less than `limits.recordMinFreeMb`
 * free. Recordings already running go on.
 */
export class RecorderRegistry {
  /** Recorders by mediaSessionId, listed until their file has its final name. */
  #single = new Map<string, { recorder: Recorder; stream: Stream; stopping?: Promise<void> }>();
  #multi = new Map<string, Recorder>();
  #config: Config;
  #streams: StreamRegistry;
  #log: Logger;
  #cap: Cap;
  #engine: CodecEngine;
  #diskRefused = 0;

  /**
   * @param engine converts G.711 audio (SIP calls, RTSP cameras) to AAC for the file.
   * @param cap the `recorders` cap.
   */
  constructor(
    config: Config,
    streams: StreamRegistry,
    engine: CodecEngine,
    log: Logger,
    cap: Cap,
  ) {
    this.#cap = cap;
    this.#engine = engine;
    this.#config = config;
    this.#streams = streams;
    this.#log = log.child({ component: "recorder" });
  }

  /**
   * Starts recording the stream of `mediaSessionId`; resolves once its file is open. An
   * unknown stream is a 404, a stream already recorded a 409, a template leaving the
   * recordings folder a 400, a recorder beyond the cap or a disk below the floor a 503.
   */
  async startup(mediaSessionId: string, config: RecordingConfig = {}): Promise<void> {
    const stream = this.#stream(mediaSessionId);
    if (this.#single.has(mediaSessionId)) {
      throw new ConflictError(`stream ${stream.name} is already being recorded`);
    }
    const recorder = this.#recorder(config, {
      streamName: stream.name,
      mediaSessionId,
    });
    await this.#checkFreeSpace();
    // Checked again: another startup of the stream may have passed while the disk was asked.
    if (this.#single.has(mediaSessionId)) {
      throw new ConflictError(`stream ${stream.name} is already being recorded`);
    }
    this.#acquire();
    this.#single.set(mediaSessionId, { recorder, stream });
    stream.recording = recorder;
    recorder.onStreamsEnded = () => void this.terminate(mediaSessionId).catch(() => {});
    try {
      await recorder.add(stream);
    } catch (err) {
      await this.terminate(mediaSessionId);
      throw err;
    }
    this.#log.info("recording started", { stream: stream.name, file: recorder.fileName });
  }

  /** Stops the recorder of `mediaSessionId` and closes its file under its final name. */
  async terminate(mediaSessionId: string): Promise<void> {
    const entry = this.#single.get(mediaSessionId);
    if (!entry || entry.stopping) {
      throw new NotFoundError(`recorder of mediaSessionId ${mediaSessionId} not found`);
    }
    this.#cap.release();
    if (entry.stream.recording === entry.recorder) entry.stream.recording = undefined;
    // Listed until the file is closed and renamed, so a client that waits for the recorder
    // to go away finds the file under its final name.
    entry.stopping = entry.recorder.stop().finally(() => this.#single.delete(mediaSessionId));
    await entry.stopping;
  }

  /** Records of the single-stream recorders. */
  list(): RecorderRecord[] {
    return [...this.#single].map(([mediaSessionId, { recorder }]) => ({
      fileName: recorder.fileName,
      mediaSessionId,
    }));
  }

  /** Creates the multi-recorder of `uri` (multi-recorder://<name>); its file opens at the first add. */
  multiStartup(uri: string): void {
    if (this.#multi.has(uri)) throw new ConflictError(`multi-recorder ${uri} exists`);
    const name = uri.slice(multiScheme.length);
    const recorder = this.#recorder({}, { streamName: name, mediaSessionId: name });
    this.#acquire();
    this.#multi.set(uri, recorder);
  }

  /** Adds a stream to a multi-recorder; its file restarts with every stream's tracks. */
  async multiAdd(uri: string, mediaSessionId: string): Promise<void> {
    const recorder = this.#multiRecorder(uri);
    const stream = this.#stream(mediaSessionId);
    if (recorder.has(mediaSessionId)) {
      throw new ConflictError(`stream ${stream.name} is already in ${uri}`);
    }
    await this.#checkFreeSpace();
    await recorder.add(stream);
  }

  /** Removes a stream from a multi-recorder. */
  async multiRemove(uri: string, mediaSessionId: string): Promise<void> {
    if (!await this.#multiRecorder(uri).remove(mediaSessionId)) {
      throw new NotFoundError(`stream with mediaSessionId ${mediaSessionId} not found in ${uri}`);
    }
  }

  /** Records of the multi-recorders. */
  multiList(): MultiRecorderRecord[] {
    return [...this.#multi].map(([uri, r]) => ({
      mediaSessionsId: r.mediaSessionIds,
      uri,
      fileName: r.fileName,
    }));
  }

  /** Stops a multi-recorder and closes its file. */
  async multiTerminate(uri: string): Promise<void> {
    const recorder = this.#multiRecorder(uri);
    this.#multi.delete(uri);
    this.#cap.release();
    await recorder.stop();
  }

  /** Stops every recorder, closing their files (server stop). */
  async closeAll(): Promise<void> {
    await Promise.all(
      [...this.#single].map(([id, entry]) => entry.stopping ?? this.terminate(id)),
    );
    await Promise.all([...this.#multi.keys()].map((uri) => this.multiTerminate(uri)));
  }

  /** Recordings refused for lack of disk space since start. */
  get diskRefused(): number {
    return this.#diskRefused;
  }

  /** Takes a `recorders` slot, or a 503. */
  #acquire(): void {
    if (!this.#cap.tryAcquire()) throw new ServiceUnavailableError(this.#cap.refusal());
  }

  /** A 503 when the records folder's filesystem has less free than `limits.recordMinFreeMb`. */
  async #checkFreeSpace(): Promise<void> {
    const minFreeMb = this.#config.limits.recordMinFreeMb;
    if (minFreeMb === 0) return;
    const free = await freeBytes(this.#config.folders.records);
    if (free === undefined || free >= minFreeMb * mibBytes) return;
    this.#diskRefused++;
    throw new ServiceUnavailableError(
      `${
        Math.floor(free / mibBytes)
      } MiB free for recordings, below the floor of ${minFreeMb} MiB (limits.recordMinFreeMb)`,
    );
  }

  #stream(mediaSessionId: string): Stream {
    const stream = this.#streams.get(mediaSessionId);
    if (!(stream instanceof Stream)) {
      throw new ConflictError(`stream ${stream.name} carries no media the server can record`);
    }
    if (!stream.tracks.some((t) => recordableCodecs.has(t.codec) || convertedForMp4.has(t.codec))) {
      throw new ConflictError(
        `stream ${stream.name} has no track an MP4 recording holds (H.264, H.265, VP8, AAC, Opus, G.711 as AAC)`,
      );
    }
    return stream;
  }

  #multiRecorder(uri: string): Recorder {
    const recorder = this.#multi.get(uri);
    if (!recorder) throw new NotFoundError(`multi-recorder ${uri} not found`);
    return recorder;
  }

  /** A recorder for `config`, whose template is checked to stay in the recordings folder. */
  #recorder(config: RecordingConfig, names: { streamName: string; mediaSessionId: string }) {
    const template = config.fileTemplate ?? defaultFileTemplate;
    const folder = this.#config.folders.records;
    const sample = fileNameOf(template, { ...names, startTime: Date.now() });
    pathInside(folder, sample, "config.fileTemplate");
    pathInside(folder, sample.replaceAll("{endTime}", String(Date.now())), "config.fileTemplate");
    return new Recorder({
      folder,
      template,
      names,
      rotationBytes: config.rotation ? parseRotationBytes(config.rotation) : undefined,
      recordable: (stream) =>
        stream.tracks.some((t) => convertedForMp4.has(t.codec))
          ? convertedAudio(stream, "AAC", this.#engine, this.#log)
          : stream,
      log: this.#log,
    });
  }
}
