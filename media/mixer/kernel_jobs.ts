/**
 * The jobs the kernel Worker runs and their results: the contract between the composer
 * (main thread) and kernel_worker.ts. Buffers in jobs and results are transferred.
 */

import type { FitMode } from "./fit.ts";
import type { Rect, YuvColor } from "./i420.ts";

/** A picture for a slot of a scene's cache, I420 of width x height. */
export interface SlotPicture {
  slot: number;
  width: number;
  height: number;
  /**
   * The I420 bytes: an ArrayBuffer transferred to the Worker (and handed back in `spent`), or
   * a SharedArrayBuffer several Workers read without a copy (not handed back).
   */
  data: ArrayBuffer | SharedArrayBuffer;
}

/**
 * An RGBA watermark drawn over the composed picture: the body watermark over the whole
 * canvas, or an input's watermark over its tile.
 */
export interface Watermark {
  /**
   * Names the image in the Worker's cache of the scene; a new image gets a new id, so a
   * Worker never draws a stale one.
   */
  id: number;
  width: number;
  height: number;
  /** Top-left corner on the canvas, in pixels; may lie partly outside. */
  x: number;
  y: number;
  /** The window of the canvas it may change (an input's tile); default the whole canvas. */
  clip?: Rect;
  /** RGBA bytes: sent with the first job of each Worker that lacks `id`, omitted after. */
  rgba?: ArrayBuffer;
}

/**
 * Compose one output frame of a scene. The Worker keeps each slot's last picture, so a slot
 * with no new picture shows the previous one again.
 */
export interface ComposeJob {
  op: "compose";
  /** The scene (one composer) whose canvas and slot cache to use. */
  scene: number;
  width: number;
  height: number;
  background: YuvColor;
  /** A slot whose picture covers the canvas (cropped to fill) instead of `background`. */
  backgroundSlot?: number;
  fit: FitMode;
  /** What each slot shows where, in drawing order. */
  inputs: { slot: number; rect: Rect }[];
  /** New pictures for slots. */
  pictures: SlotPicture[];
  /** Slots to forget (their input left). */
  evict: number[];
  /**
   * Watermarks drawn over the inputs, in order. The Worker forgets the cached images of the
   * scene that a job does not list.
   */
  watermarks?: Watermark[];
  /** Receives the I420 output; at least width x height I420 bytes. */
  output: ArrayBuffer;
}

/** Forget a scene: frees its canvas, slots and watermarks in the Worker. */
export interface ReleaseJob {
  op: "release";
  scene: number;
}

/** Any job of the kernel Worker. */
export type KernelJob = ComposeJob | ReleaseJob;

/** The result of a `ComposeJob`: the filled output and the input buffers, for reuse. */
export interface ComposeResult {
  output: ArrayBuffer;
  spent: ArrayBuffer[];
  /** Inputs' pictures drawn for this frame (the others were still on the canvas). */
  tilesDrawn: number;
  /** True when the whole canvas was drawn (background included), not only changed tiles. */
  wholeCanvas: boolean;
}

/** A job as posted to the Worker. */
export interface JobRequest {
  id: number;
  job: KernelJob;
}

/** The Worker's answer to a `JobRequest`. */
export type JobReply =
  | { id: number; result: ComposeResult | null }
  | { id: number; error: string };
