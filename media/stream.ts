/**
 * Stream: one provider pushing MediaFrames, any number of readers pulling them.
 *
 * Each reader has its own bounded ring of frames. The provider never waits: when a reader's
 * ring is full the reader loses what it had queued and resumes at the next video keyframe, so
 * a slow reader costs itself pictures, never the provider or the other readers. The stream
 * keeps the frames since the last video keyframe (bounded) so a reader that joins late starts
 * with a decodable picture at once.
 */
import type { RegisteredStream, StreamRecord } from "./stream_record.ts";
import type { MediaFrame, Track } from "./frame.ts";
import {
  type ProviderTally,
  providerTally,
  type ReaderKind,
  type ReaderTally,
  readerTally,
} from "./stream_tally.ts";

/** Frames a reader may have queued before it drops (about 4 s of 30 fps video + 50 fps audio). */
export const readerQueueFrames = 320;
/** Most frames kept since the last video keyframe for late readers; a longer GOP is not kept. */
export const gopCacheMaxFrames = 1200;
/** Span over which bitrate and fps are measured, in milliseconds. */
export const rateWindowMs = 1000;

/** What a Stream is built from. */
export interface StreamOptions {
  /** Stream name, unique among published streams. */
  name: string;
  /** Identifier for terminate, recording and recorder operations. */
  mediaSessionId: string;
  /** The tracks; `Track.id` equals the index in this array. */
  tracks: Track[];
  /** Value of the record's `mediaProvider`, e.g. "VOD". */
  mediaProvider: string;
  /** Stops the provider; called once by `terminate`, with the reason. */
  stopProvider: (info: string) => Promise<void>;
  /** Video frames the provider lost so far (metric `VIDEO_LOST`), e.g. a transcoder's drops. */
  lostVideoFrames?: () => number;
}

/** Measured rates of a stream, from the last complete window of `rateWindowMs`. */
interface Rates {
  /** Video frames per second (from the frames' decode times). */
  fps: number;
  /** All tracks, in kbit/s. */
  bitrateKbps: number;
  /** Audio tracks only, in kbit/s. */
  audioBitrateKbps: number;
}

/** A muted/unmuted state of a track kind as the Web SDK reads it (`audioState`, `videoState`). */
export interface MuteState {
  muted: boolean;
}

/** A published stream: tracks, one provider, readers. */
export class Stream implements RegisteredStream {
  readonly name: string;
  readonly mediaSessionId: string;
  readonly published = true;
  readonly tracks: readonly Track[];
  readonly mediaProvider: string;
  /** Creation time, in ms since the epoch. */
  readonly createDate = Date.now();
  /** The recording of this stream, while one runs. */
  recording: { readonly fileName: string } | undefined;
  /** Audio and video as the publisher muted them (Web SDK mute events); records show them. */
  readonly audioState: MuteState = { muted: false };
  readonly videoState: MuteState = { muted: false };

  #readers = new Set<StreamReader>();
  #stopProvider: (info: string) => Promise<void>;
  #lostVideoFrames: (() => number) | undefined;
  #ended = false;
  #endedSignal = Promise.withResolvers<void>();
  #hasVideo: boolean;
  #gop: MediaFrame[] = [];
  #gopValid = false;
  #gopSize = 0;
  #keyframes = 0;
  #videoFrames = 0;
  #framesSinceKeyframe = 0;
  // Rate window state; the per-frame path only adds to counters.
  #windowStartMs = performance.now();
  #windowBytes = 0;
  #windowAudioBytes = 0;
  #windowVideoFrames = 0;
  #windowFirstVideoDts = 0;
  #windowLastVideoDts = 0;
  #rates: Rates = { fps: 0, bitrateKbps: 0, audioBitrateKbps: 0 };
  #tally: ProviderTally;

  constructor(options: StreamOptions) {
    this.name = options.name;
    this.mediaSessionId = options.mediaSessionId;
    this.tracks = options.tracks;
    this.mediaProvider = options.mediaProvider;
    this.#tally = providerTally(options.mediaProvider);
    this.#stopProvider = options.stopProvider;
    this.#lostVideoFrames = options.lostVideoFrames;
    this.#hasVideo = options.tracks.some((t) => t.kind === "video");
  }

  /** The first video track, if any. */
  get videoTrack(): Track | undefined {
    return this.tracks.find((t) => t.kind === "video");
  }

  /** True once the provider has ended. */
  get ended(): boolean {
    return this.#ended;
  }

  /** Settles when the provider has ended. */
  get done(): Promise<void> {
    return this.#endedSignal.promise;
  }

  /** Number of attached readers. */
  get readerCount(): number {
    return this.#readers.size;
  }

  /** Hands a frame from the provider to every reader; never waits. */
  push(frame: MediaFrame): void {
    if (this.#ended) return;
    const video = this.tracks[frame.trackId]?.kind === "video";
    this.#measure(frame, video);
    if (video && frame.keyframe) {
      this.#gop.length = 0;
      this.#gopValid = true;
    }
    if (this.#gopValid && this.#hasVideo) {
      if (this.#gop.length < gopCacheMaxFrames) this.#gop.push(frame);
      else {
        this.#gop.length = 0;
        this.#gopValid = false;
      }
    }
    for (const reader of this.#readers) reader.offer(frame, video);
  }

  /**
   * Forgets the cached GOP, for a provider whose next frames will not follow it (one that
   * stopped making frames while it had no reader, and starts again on a new timeline): a
   * reader starting from it would get a jump back in time and pictures whose references
   * are missing.
   */
  protected dropCachedGop(): void {
    this.#gop.length = 0;
    this.#gopValid = false;
  }

  /** Ends the stream from the provider's side: readers finish after their queued frames. */
  end(): void {
    if (this.#ended) return;
    this.#ended = true;
    this.#gop.length = 0;
    for (const reader of this.#readers) {
      reader.finish();
      reader.tally.attached--;
    }
    this.#readers.clear();
    this.#endedSignal.resolve();
  }

  /**
   * A new reader. It starts at the last video keyframe when one is cached, else at the next
   * one (audio-only streams start at once). An ended stream gives a reader that is done.
   * `kind` names the consumer in the metrics.
   */
  reader(queueFrames: number = readerQueueFrames, kind: ReaderKind = "other"): StreamReader {
    const reader = new StreamReader(this, queueFrames, this.#hasVideo, readerTally(kind));
    if (this.#ended) {
      reader.finish();
      return reader;
    }
    if (this.#gopValid && this.#gop.length <= queueFrames) {
      for (const frame of this.#gop) {
        reader.offer(frame, this.tracks[frame.trackId].kind === "video");
      }
    } else if (this.#hasVideo) {
      // Without the cached GOP the reader waits for the next keyframe, which a WebRTC
      // publisher only sends when asked.
      this.requestKeyframe();
    }
    this.#readers.add(reader);
    reader.tally.attached++;
    return reader;
  }

  /**
   * Asks the provider for a video keyframe where it can (a WebRTC publisher sends a PLI);
   * other providers send keyframes on their own schedule, so this does nothing.
   */
  requestKeyframe(): void {}

  /** Detaches a reader (called by `StreamReader.close`). */
  detach(reader: StreamReader): void {
    if (this.#readers.delete(reader)) reader.tally.attached--;
  }

  /**
   * Applies a mute event (`audioMuted`, `audioUnmuted`, `videoMuted`, `videoUnmuted`) to
   * `audioState`/`videoState`; false for any other event type.
   */
  applyMuteEvent(type: string): boolean {
    const match = /^(audio|video)(Muted|Unmuted)$/.exec(type);
    if (!match) return false;
    (match[1] === "audio" ? this.audioState : this.videoState).muted = match[2] === "Muted";
    return true;
  }

  /** Stops the provider; the stream ends when it has. */
  async terminate(info: string): Promise<void> {
    await this.#stopProvider(info);
    this.end();
  }

  /** The Stream record of the API. */
  record(options: { metrics?: boolean } = {}): StreamRecord {
    this.#roll(performance.now());
    const video = this.tracks.find((t) => t.kind === "video");
    const audio = this.tracks.find((t) => t.kind === "audio");
    const rates = this.#rates;
    const record: StreamRecord = {
      custom: {},
      nodeId: null,
      appKey: "",
      sessionId: "",
      mediaSessionId: this.mediaSessionId,
      remoteMediaElementId: null,
      name: this.name,
      published: true,
      hasVideo: video !== undefined,
      hasAudio: audio !== undefined,
      status: "PUBLISHING",
      sdp: "",
      info: null,
      record: this.recording !== undefined,
      recordName: this.recording?.fileName ?? null,
      width: video?.width ?? 0,
      height: video?.height ?? 0,
      bitrate: rates.bitrateKbps,
      minBitrate: 0,
      maxBitrate: 0,
      quality: 0,
      rtmpUrl: null,
      mediaProvider: this.mediaProvider,
      audioCodec: audio?.codec ?? "",
      videoCodec: video?.codec ?? "",
      history: false,
      gop: this.#gopSize,
      fps: rates.fps,
      audioBitrate: rates.audioBitrateKbps,
      codecImpl: "",
      transport: "",
      cvoExtension: false,
      createDate: this.createDate,
      mediaType: "publish",
      audioState: { ...this.audioState },
      videoState: { ...this.videoState },
    };
    if (options.metrics) {
      record.metrics = {
        VIDEO_WIDTH: record.width,
        VIDEO_HEIGHT: record.height,
        VIDEO_FPS: rates.fps,
        VIDEO_RATE: rates.bitrateKbps - rates.audioBitrateKbps,
        AUDIO_RATE: rates.audioBitrateKbps,
        VIDEO_GOP_SIZE: this.#gopSize,
        VIDEO_K_FRAMES: this.#keyframes,
        VIDEO_P_FRAMES: this.#videoFrames - this.#keyframes,
        VIDEO_LOST: this.#lostVideoFrames?.() ?? 0,
      };
    }
    return record;
  }

  #measure(frame: MediaFrame, video: boolean): void {
    const now = performance.now();
    if (now - this.#windowStartMs >= rateWindowMs) this.#roll(now);
    this.#windowBytes += frame.data.length;
    this.#tally.receivedBytes += frame.data.length;
    this.#tally.receivedFrames++;
    if (!video) {
      this.#windowAudioBytes += frame.data.length;
      return;
    }
    this.#videoFrames++;
    if (frame.keyframe) {
      if (this.#keyframes > 0) this.#gopSize = this.#framesSinceKeyframe;
      this.#keyframes++;
      this.#framesSinceKeyframe = 0;
    }
    this.#framesSinceKeyframe++;
    if (this.#windowVideoFrames === 0) this.#windowFirstVideoDts = frame.dts;
    this.#windowLastVideoDts = frame.dts;
    this.#windowVideoFrames++;
  }

  /** Closes the rate window when it is complete; an idle stream reads as zero. */
  #roll(now: number): void {
    const elapsedMs = now - this.#windowStartMs;
    if (elapsedMs < rateWindowMs) return;
    const clock = this.tracks.find((t) => t.kind === "video")?.clockRate ?? 90000;
    const span = this.#windowLastVideoDts - this.#windowFirstVideoDts;
    const stale = elapsedMs >= 2 * rateWindowMs;
    this.#rates = {
      fps: stale || span <= 0 ? 0 : Math.round((this.#windowVideoFrames - 1) * clock / span),
      bitrateKbps: stale ? 0 : Math.round(this.#windowBytes * 8 / elapsedMs),
      audioBitrateKbps: stale ? 0 : Math.round(this.#windowAudioBytes * 8 / elapsedMs),
    };
    this.#windowStartMs = now;
    this.#windowBytes = 0;
    this.#windowAudioBytes = 0;
    this.#windowVideoFrames = 0;
  }
}

/** `poll` callers to wake once the provider's push is over: the first `wakeCount` slots. */
const wakes: ((() => void) | undefined)[] = [];
let wakeCount = 0;

/**
 * Calls `wake` from a microtask, so a reader's work cannot break the provider's push; one
 * microtask serves every reader a frame wakes.
 */
function wakeLater(wake: () => void): void {
  wakes[wakeCount++] = wake;
  if (wakeCount === 1) queueMicrotask(wakeAll);
}

function wakeAll(): void {
  // Wakes added meanwhile run in this pass too; the slots are kept to spare reallocations.
  for (let i = 0; i < wakeCount; i++) {
    const wake = wakes[i]!;
    wakes[i] = undefined;
    try {
      wake();
    } catch (err) {
      // As if each had its own microtask: reported, and the others still run.
      reportError(err);
    }
  }
  wakeCount = 0;
}

/**
 * A consumer of a Stream with a bounded queue. Async-iterable: the iteration ends when the
 * stream ends (after the queued frames) or the reader is closed. `poll` reads the same frames
 * without a promise per frame, for consumers with many readers per stream (players).
 */
export class StreamReader implements AsyncIterable<MediaFrame> {
  /** Frames lost to a full queue or skipped while waiting for a keyframe after a drop. */
  dropped = 0;
  /** The totals of this reader's kind it adds to. */
  readonly tally: ReaderTally;
  #stream: Stream;
  #ring: (MediaFrame | undefined)[];
  #head = 0;
  #count = 0;
  #waitKeyframe: boolean;
  #hasVideo: boolean;
  #done = false;
  #waiter: ((frame: MediaFrame | undefined) => void) | undefined;
  #wake: (() => void) | undefined;

  /** Use `Stream.reader()`. */
  constructor(stream: Stream, queueFrames: number, hasVideo: boolean, tally: ReaderTally) {
    this.#stream = stream;
    this.tally = tally;
    this.#ring = new Array(queueFrames);
    this.#hasVideo = hasVideo;
    this.#waitKeyframe = hasVideo;
  }

  /** Called by the stream for each frame. */
  offer(frame: MediaFrame, video: boolean): void {
    if (this.#done) return;
    if (this.#waitKeyframe) {
      if (!(video && frame.keyframe)) {
        this.dropped++;
        this.tally.droppedFrames++;
        return;
      }
      this.#waitKeyframe = false;
    }
    const waiter = this.#waiter;
    if (waiter) {
      this.#waiter = undefined;
      this.#delivered(frame);
      waiter(frame);
      return;
    }
    const size = this.#ring.length;
    if (this.#count === size) {
      // Full: what is queued is now stale; skip to the next picture a decoder can start at.
      this.dropped += this.#count;
      this.tally.droppedFrames += this.#count;
      this.#ring.fill(undefined);
      this.#head = 0;
      this.#count = 0;
      if (this.#hasVideo && !(video && frame.keyframe)) {
        this.#waitKeyframe = true;
        this.dropped++;
        this.tally.droppedFrames++;
        return;
      }
    }
    this.#ring[(this.#head + this.#count) % size] = frame;
    this.#count++;
    this.#wakeLater();
  }

  /** The next frame, or undefined when the stream has ended or the reader is closed. */
  next(): Promise<MediaFrame | undefined> {
    if (this.#count > 0) return Promise.resolve(this.#take());
    if (this.#done) return Promise.resolve(undefined);
    return new Promise((resolve) => this.#waiter = resolve);
  }

  /**
   * The next queued frame without waiting. When none is queued and more may come, `wake` is
   * called once, from a microtask, when a frame is queued or the reader is done. Undefined
   * with `drained` true means the end.
   */
  poll(wake: () => void): MediaFrame | undefined {
    if (this.#count > 0) return this.#take();
    if (!this.#done) this.#wake = wake;
    return undefined;
  }

  /** True once the stream has ended or the reader is closed and no frame is left queued. */
  get drained(): boolean {
    return this.#done && this.#count === 0;
  }

  /** Marks the end: queued frames are still read, then iteration stops. */
  finish(): void {
    this.#done = true;
    const waiter = this.#waiter;
    this.#waiter = undefined;
    waiter?.(undefined);
    this.#wakeLater();
  }

  #take(): MediaFrame {
    const frame = this.#ring[this.#head]!;
    this.#ring[this.#head] = undefined;
    this.#head = (this.#head + 1) % this.#ring.length;
    this.#count--;
    this.#delivered(frame);
    return frame;
  }

  #delivered(frame: MediaFrame): void {
    this.tally.deliveredBytes += frame.data.length;
    this.tally.deliveredFrames++;
  }

  #wakeLater(): void {
    const wake = this.#wake;
    if (!wake) return;
    this.#wake = undefined;
    wakeLater(wake);
  }

  /** Detaches from the stream and drops what is queued. */
  close(): void {
    this.#stream.detach(this);
    this.#ring.fill(undefined);
    this.#count = 0;
    this.finish();
  }

  async *[Symbol.asyncIterator](): AsyncIterator<MediaFrame> {
    try {
      for (;;) {
        const frame = await this.next();
        if (frame === undefined) return;
        yield frame;
      }
    } finally {
      this.close();
    }
  }
}
