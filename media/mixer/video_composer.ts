/**
 * Video composer: decoded input frames in, composed I420 frames out at a fixed rate. Each
 * output tick takes, per input, the newest frame due by then (older due frames are dropped)
 * or repeats the input's last picture, and has a kernel Worker draw the layout.
 *
 * Timestamps are in the composer's 90 kHz clock: callers stamp input frames on it, output
 * frame n has pts round(n x 90000 / frameRate).
 */

import { ConflictError, NotFoundError } from "../../core/errors.ts";
import { BufferPool } from "./buffer_pool.ts";
import { KernelError } from "./errors.ts";
import type { FitMode } from "./fit.ts";
import { FrameClock } from "./frame_clock.ts";
import { black, i420Size, type Rect, type YuvColor } from "./i420.ts";
import type { ComposeJob, SlotPicture, Watermark } from "./kernel_jobs.ts";
import { computeLayout, type CustomLayout, type LayoutName } from "./layout.ts";
import { WorkerRunner } from "./worker_runner.ts";

/** Clock rate of video timestamps, in Hz. */
export const videoClockHz = 90000;
/** Worker cache slot of the background image; inputs use slots from 0 up. */
const backgroundSlot = -1;
/** Frames an input may queue ahead of the output clock by default; older ones go first. */
const defaultMaxQueuedFrames = 8;

/** A decoded picture: I420 bytes of width x height, presented at `pts` (90 kHz). */
export interface RawVideoFrame {
  width: number;
  height: number;
  data: Uint8Array;
  pts: number;
}

/** An output frame; its buffer may be handed back with `VideoComposer.recycle`. */
export interface ComposedFrame {
  /** Presentation time, 90 kHz. */
  pts: number;
  width: number;
  height: number;
  data: Uint8Array;
}

/** An RGBA image and where to draw it, in pixels; RGBA bytes are width x height x 4. */
export interface WatermarkImage {
  rgba: Uint8Array;
  width: number;
  height: number;
  /** Top-left corner: on the output (body watermark) or in the input's tile. */
  x: number;
  y: number;
}

/** An I420 picture of width x height. */
export interface BackgroundImage {
  width: number;
  height: number;
  data: Uint8Array;
}

/** Options of a VideoComposer. */
export interface VideoComposerOptions {
  /** Output size in pixels. */
  width: number;
  height: number;
  /** Output frames per second. */
  frameRate: number;
  /** A named layout or a custom one; `setLayout` changes it. */
  layout: LayoutName | CustomLayout;
  /**
   * How pictures fill their rectangles. The default, `letterbox`, keeps each input's aspect
   * ratio: the whole picture as large as fits, the background around it.
   */
  fit?: FitMode;
  /** Colour around and between the pictures (default black). */
  background?: YuvColor;
  /** An I420 picture under the inputs, cropped to fill the output; replaces the colour. */
  backgroundImage?: BackgroundImage;
  /** An RGBA image drawn over every frame at (x, y) of the output. */
  watermark?: WatermarkImage;
  /** Kernel Workers to start and own (default 1); ignored when `runner` is given. */
  workers?: number;
  /** A runner shared with others; the composer then does not close it. */
  runner?: WorkerRunner;
  /**
   * Where frame buffers come from and go back to: a pool shared with the decoders that fill
   * the frames handed over (see `push`); default one of its own.
   */
  pool?: BufferPool;
  /**
   * How far behind the last output a frame may be and still be shown, in ms (default two
   * frame intervals); later frames are dropped.
   */
  maxLatenessMs?: number;
  /**
   * Frames an input may queue ahead of the output clock (default 8); the oldest are dropped
   * beyond. Inputs decoded in bursts (a GOP at a time) need their burst's worth.
   */
  maxQueuedFrames?: number;
}

/** Counters of a composer since it started. */
export interface ComposerStats {
  /** Output frames produced. */
  composedFrames: number;
  /** Input frames dropped: late, out of order, superseded in the same tick or overflowing. */
  droppedFrames: number;
  /** Times an input's last picture was shown again for lack of a new frame. */
  repeatedPictures: number;
  /** Output ticks of `start`'s clock skipped because every Worker was still busy. */
  skippedTicks: number;
  /**
   * Frames for which the Worker drew only the inputs with a new picture onto its canvas of
   * the previous frame (same layout, sizes and background, no watermark), not all of it.
   */
  partialFrames: number;
  /** Input pictures drawn onto the canvas (unchanged ones left as they were are not). */
  tilesDrawn: number;
}

/** A watermark as kept by the composer: the image once, under an id new for each image. */
interface HeldWatermark {
  id: number;
  width: number;
  height: number;
  x: number;
  y: number;
  rgba: ArrayBuffer;
}

interface Input {
  id: string;
  slot: number;
  screen: boolean;
  /** Drawn over the input's tile, at (x, y) from the tile's top-left. */
  watermark?: HeldWatermark;
  queue: RawVideoFrame[];
  /** Pts of the newest frame accepted. */
  lastPts: number;
  current?: RawVideoFrame;
  /** Changes whenever `current` does; Workers cache pictures by it. */
  version: number;
}

/** Worker-side cache state as the composer knows it. */
interface WorkerView {
  generation: number;
  sent: Map<number, number>;
  evict: number[];
  /** Ids of the watermark images the Worker holds (those of its last job). */
  watermarks: Set<number>;
}

let nextSceneId = 1;

/** Composes the inputs of one mixer into frames of one size and rate. */
export class VideoComposer {
  /** Counters since start. */
  readonly stats: ComposerStats = {
    composedFrames: 0,
    droppedFrames: 0,
    repeatedPictures: 0,
    skippedTicks: 0,
    partialFrames: 0,
    tilesDrawn: 0,
  };
  readonly #options: Required<
    Omit<VideoComposerOptions, "watermark" | "backgroundImage" | "runner" | "workers" | "pool">
  >;
  /** The background image, with its own picture version. */
  #backgroundImage?: RawVideoFrame & { version: number };
  #watermark?: HeldWatermark;
  #nextWatermarkId = 1;
  readonly #runner: WorkerRunner;
  readonly #ownsRunner: boolean;
  readonly #scene = nextSceneId++;
  readonly #inputs: Input[] = [];
  readonly #views: WorkerView[] = [];
  readonly #pool: BufferPool;
  readonly #ownsPool: boolean;
  /** Frames whose buffer the caller handed over (see `push`) and that were not moved yet. */
  readonly #handedOver = new WeakSet<RawVideoFrame>();
  readonly #frameBytes: number;
  #rects: Rect[] = [];
  #nextTick = 0;
  #lastOutputPts = -Infinity;
  #version = 0;
  #clock?: FrameClock;
  #inFlight = 0;
  #closed = false;

  /** A composer with no inputs; its Workers start now. */
  constructor(options: VideoComposerOptions) {
    if (!(options.frameRate > 0)) throw new RangeError(`frame rate ${options.frameRate}`);
    for (const side of [options.width, options.height]) {
      if (!Number.isInteger(side) || side < 1) {
        throw new RangeError(`output size ${options.width}x${options.height}`);
      }
    }
    const frameIntervalMs = 1000 / options.frameRate;
    this.#options = {
      width: options.width,
      height: options.height,
      frameRate: options.frameRate,
      layout: options.layout,
      fit: options.fit ?? "letterbox",
      background: options.background ?? black,
      maxLatenessMs: options.maxLatenessMs ?? 2 * frameIntervalMs,
      maxQueuedFrames: options.maxQueuedFrames ?? defaultMaxQueuedFrames,
    };
    this.#frameBytes = i420Size(options.width, options.height);
    this.setWatermark(options.watermark);
    if (options.backgroundImage) this.setBackground(options.backgroundImage);
    this.#ownsRunner = !options.runner;
    this.#ownsPool = !options.pool;
    this.#pool = options.pool ?? new BufferPool();
    this.#runner = options.runner ?? new WorkerRunner({ workers: options.workers });
    for (let i = 0; i < this.#runner.size; i++) {
      this.#views.push({ generation: -1, sent: new Map(), evict: [], watermarks: new Set() });
    }
  }

  /** A copy of `watermark` under a new id, after checking its size and bytes. */
  #hold(watermark: WatermarkImage): HeldWatermark {
    const { rgba, width, height, x, y } = watermark;
    if (!Number.isInteger(width) || !Number.isInteger(height) || width < 1 || height < 1) {
      throw new KernelError(`watermark size ${width}x${height} is not a positive integer size`);
    }
    if (!Number.isInteger(x) || !Number.isInteger(y)) {
      throw new KernelError(`watermark position ${x},${y} is not integer`);
    }
    if (rgba.length < width * height * 4) {
      throw new KernelError(
        `watermark has ${rgba.length} bytes, ${width}x${height} RGBA needs more`,
      );
    }
    // Each Worker gets the image (once) with its next job, as it does not know the id.
    const bytes = rgba.slice(0, width * height * 4).buffer;
    return { id: this.#nextWatermarkId++, width, height, x, y, rgba: bytes };
  }

  /**
   * Draws `watermark` over the frames composed from now on instead of the current one;
   * undefined removes it.
   */
  setWatermark(watermark: WatermarkImage | undefined): void {
    this.#watermark = watermark && this.#hold(watermark);
  }

  /**
   * Draws `watermark` over input `id`'s tile from the next frame on, with (x, y) from the
   * tile's top-left corner and cut at the tile's edges; it moves with the tile when the
   * layout changes. Undefined removes it. The image goes to each Worker once, not per frame.
   */
  setInputWatermark(id: string, watermark: WatermarkImage | undefined): void {
    const input = this.#inputs.find((candidate) => candidate.id === id);
    if (!input) throw new NotFoundError(`composer input ${id} does not exist`);
    input.watermark = watermark && this.#hold(watermark);
  }

  /**
   * Shows `background` around and between the pictures from the next frame on: a colour, or
   * an I420 picture cropped to fill the output (sent to each Worker once).
   */
  setBackground(background: YuvColor | BackgroundImage): void {
    if (!("data" in background)) {
      this.#options.background = background;
      this.#backgroundImage = undefined;
      for (const view of this.#views) {
        if (view.sent.delete(backgroundSlot)) view.evict.push(backgroundSlot);
      }
      return;
    }
    const { width, height, data } = background;
    if (!Number.isInteger(width) || !Number.isInteger(height) || width < 1 || height < 1) {
      throw new KernelError(`background image size ${width}x${height} is not a positive size`);
    }
    if (data.length < i420Size(width, height)) {
      throw new KernelError(`background image has fewer bytes than ${width}x${height} I420`);
    }
    const version = ++this.#version;
    this.#backgroundImage = { width, height, data: data.slice(), pts: 0, version };
  }

  /**
   * Lays the inputs out with `layout` from the next frame on; the frames keep coming at the
   * same rate, so the output has no gap.
   */
  setLayout(layout: LayoutName | CustomLayout): void {
    this.#options.layout = layout;
    this.#relayout();
  }

  /** Adds an input (drawn in the order added); `screen` marks a screen share for `desktop`. */
  addInput(id: string, options: { screen?: boolean } = {}): void {
    if (this.#inputs.some((input) => input.id === id)) {
      throw new ConflictError(`composer input ${id} exists already`);
    }
    const used = new Set(this.#inputs.map((input) => input.slot));
    let slot = 0;
    while (used.has(slot)) slot++;
    this.#inputs.push({
      id,
      slot,
      screen: options.screen ?? false,
      queue: [],
      lastPts: -Infinity,
      version: 0,
    });
    this.#relayout();
  }

  /** Removes an input; its rectangle goes to the others. */
  removeInput(id: string): void {
    const index = this.#inputs.findIndex((input) => input.id === id);
    if (index < 0) throw new NotFoundError(`composer input ${id} does not exist`);
    const [input] = this.#inputs.splice(index, 1);
    for (const view of this.#views) {
      if (view.sent.delete(input.slot)) view.evict.push(input.slot);
    }
    this.#relayout();
  }

  /** The rectangle input `id` is drawn in as laid out now; undefined for no such input. */
  tile(id: string): Rect | undefined {
    const index = this.#inputs.findIndex((input) => input.id === id);
    return index < 0 ? undefined : this.#rects[index];
  }

  #relayout(): void {
    const { layout, width, height } = this.#options;
    this.#rects = computeLayout(
      layout,
      this.#inputs.map((input) => ({
        width: input.current?.width ?? width,
        height: input.current?.height ?? height,
        screen: input.screen,
      })),
      { width, height },
    );
  }

  /**
   * Queues a decoded frame of input `id`. Returns false when the frame is dropped: not newer
   * than the input's previous frame, or more than `maxLatenessMs` behind the last output.
   * `handOver`: the caller leaves the frame's buffer to the composer (it must not use it
   * afterwards), which moves it to its Worker uncopied, then to its pool.
   */
  push(id: string, frame: RawVideoFrame, handOver = false): boolean {
    const input = this.#inputs.find((candidate) => candidate.id === id);
    if (!input) throw new NotFoundError(`composer input ${id} does not exist`);
    if (frame.data.length < i420Size(frame.width, frame.height)) {
      throw new KernelError(
        `frame of input ${id} has ${frame.data.length} bytes, less than ${frame.width}x` +
          `${frame.height} I420`,
      );
    }
    const latenessLimit = this.#lastOutputPts - this.#options.maxLatenessMs * videoClockHz / 1000;
    if (frame.pts <= input.lastPts || frame.pts < latenessLimit) {
      this.stats.droppedFrames++;
      return false;
    }
    input.lastPts = frame.pts;
    if (handOver) this.#handedOver.add(frame);
    input.queue.push(frame);
    if (input.queue.length > this.#options.maxQueuedFrames) {
      this.#release(input.queue.shift()!);
      this.stats.droppedFrames++;
    }
    return true;
  }

  /** Gives a frame's buffer to the pool when it was handed over and is still here. */
  #release(frame: RawVideoFrame | undefined): void {
    if (!frame || !this.#handedOver.delete(frame)) return;
    const { buffer, byteOffset, byteLength } = frame.data;
    if (buffer instanceof ArrayBuffer && byteOffset === 0 && byteLength === buffer.byteLength) {
      this.#pool.give(buffer);
    }
  }

  /** Takes the newest frame due by `pts` as the input's picture; true when it changed. */
  #advance(input: Input, pts: number): boolean {
    let due = 0;
    while (due < input.queue.length && input.queue[due].pts <= pts) due++;
    if (due === 0) return false;
    this.stats.droppedFrames += due - 1;
    const previous = input.current;
    input.current = input.queue[due - 1];
    for (const superseded of input.queue.splice(0, due - 1)) this.#release(superseded);
    input.queue.shift();
    this.#release(previous);
    input.version = ++this.#version;
    if (previous?.width !== input.current.width || previous.height !== input.current.height) {
      this.#relayout();
    }
    return true;
  }

  /**
   * Composes the output frame of tick `tick` (default: the one after the last), in a Worker.
   * Ticks must increase; a skipped tick leaves a gap of whole frame intervals in pts.
   */
  compose(tick = this.#nextTick): Promise<ComposedFrame> {
    if (this.#closed) return Promise.reject(new ConflictError("the composer is closed"));
    if (tick < this.#nextTick) {
      return Promise.reject(new RangeError(`tick ${tick} is not after ${this.#nextTick - 1}`));
    }
    this.#nextTick = tick + 1;
    const { width, height, frameRate, background, fit } = this.#options;
    const pts = Math.round(tick * videoClockHz / frameRate);
    this.#lastOutputPts = pts;

    const worker = tick % this.#runner.size;
    const view = this.#views[worker];
    const generation = this.#runner.generation(worker);
    if (view.generation !== generation) {
      view.generation = generation;
      view.sent.clear();
      view.evict = [];
      view.watermarks.clear();
    }

    const pictures: SlotPicture[] = [];
    const transfer: ArrayBuffer[] = [];
    const send = (slot: number, picture: RawVideoFrame, version: number) => {
      if (view.sent.get(slot) === version) return;
      const bytes = i420Size(picture.width, picture.height);
      const { width, height } = picture;
      const { buffer, byteOffset, byteLength } = picture.data;
      if (buffer instanceof SharedArrayBuffer && byteOffset === 0) {
        // Read in place by the Worker: no copy per composer (a decoded picture is shared by
        // every rendition of its source).
        pictures.push({ slot, width, height, data: buffer });
      } else if (
        buffer instanceof ArrayBuffer && this.#runner.size === 1 && byteOffset === 0 &&
        byteLength === bytes && this.#handedOver.delete(picture)
      ) {
        // Moved, not copied (with one Worker nobody else needs it); back to the pool after.
        pictures.push({ slot, width, height, data: buffer });
        transfer.push(buffer);
      } else if (byteLength < bytes) {
        // Moved to a Worker that has restarted since: the slot waits for the next picture.
        return;
      } else {
        const data = this.#pool.take(bytes);
        new Uint8Array(data).set(picture.data.subarray(0, bytes));
        pictures.push({ slot, width, height, data });
        transfer.push(data);
      }
      view.sent.set(slot, version);
    };
    const backgroundImage = this.#backgroundImage;
    if (backgroundImage) send(backgroundSlot, backgroundImage, backgroundImage.version);
    for (const input of this.#inputs) {
      if (!this.#advance(input, pts) && input.current) this.stats.repeatedPictures++;
      if (input.current) send(input.slot, input.current, input.version);
    }
    const watermarks: Watermark[] = [];
    const draw = (held: HeldWatermark, x: number, y: number, clip?: Rect) => {
      const { id, width, height } = held;
      const watermark: Watermark = { id, width, height, x, y, clip };
      if (!view.watermarks.has(id)) {
        watermark.rgba = held.rgba.slice(0);
        transfer.push(watermark.rgba);
      }
      watermarks.push(watermark);
    };
    this.#inputs.forEach((input, i) => {
      const tile = this.#rects[i];
      if (input.watermark) {
        draw(input.watermark, tile.x + input.watermark.x, tile.y + input.watermark.y, tile);
      }
    });
    if (this.#watermark) draw(this.#watermark, this.#watermark.x, this.#watermark.y);
    // The Worker keeps exactly the images of this job.
    view.watermarks = new Set(watermarks.map((watermark) => watermark.id));
    const output = this.#pool.take(this.#frameBytes);
    transfer.push(output);
    const job: ComposeJob = {
      op: "compose",
      scene: this.#scene,
      width,
      height,
      background,
      backgroundSlot: backgroundImage ? backgroundSlot : undefined,
      fit,
      inputs: this.#inputs.map((input, i) => ({ slot: input.slot, rect: this.#rects[i] })),
      pictures,
      evict: view.evict,
      watermarks,
      output,
    };
    view.evict = [];
    return this.#runner.run(job, transfer, worker).then((result) => {
      for (const buffer of result!.spent) this.#pool.give(buffer);
      this.stats.composedFrames++;
      if (!result!.wholeCanvas) this.stats.partialFrames++;
      this.stats.tilesDrawn += result!.tilesDrawn;
      return { pts, width, height, data: new Uint8Array(result!.output, 0, this.#frameBytes) };
    });
  }

  /** Hands an output frame's buffer back for reuse; the frame must not be used afterwards. */
  recycle(frame: ComposedFrame): void {
    this.#pool.give(frame.data.buffer as ArrayBuffer);
  }

  /**
   * Composes on a real-time clock at the frame rate until closed, passing each frame to
   * `onFrame`, or any error to `onError`. A tick is skipped while every Worker is busy.
   */
  start(onFrame: (frame: ComposedFrame) => void, onError: (error: unknown) => void): void {
    if (this.#clock || this.#closed) return;
    this.#clock = new FrameClock(1000 / this.#options.frameRate, (tick) => {
      if (this.#inFlight >= this.#runner.size) {
        this.stats.skippedTicks++;
        return;
      }
      this.#inFlight++;
      this.compose(Math.max(tick, this.#nextTick)).then(onFrame, (error) => {
        if (!this.#closed) onError(error);
      }).finally(() => this.#inFlight--);
    });
    this.#clock.start();
  }

  /** Stops the clock, frees the Worker-side state and closes an owned runner. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#clock?.close();
    if (this.#ownsRunner) {
      this.#runner.close();
    } else {
      for (let i = 0; i < this.#runner.size; i++) {
        this.#runner.run({ op: "release", scene: this.#scene }, [], i).catch(() => {});
      }
    }
    if (this.#ownsPool) this.#pool.clear();
  }

  /** Same as `close`, for `using`. */
  [Symbol.dispose](): void {
    this.close();
  }
}
