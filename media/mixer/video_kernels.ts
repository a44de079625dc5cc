/**
 * Typed host API of the video kernels (wasm/assembly/video.ts). Frames live in the
 * instance's heap and are named by `I420Ref`; callers copy pixels in and out with
 * `heap.bytes(ref.ptr, ...)` right before and after a call.
 */

import { KernelError } from "./errors.ts";
import {
  chromaSize,
  type ColorMatrix,
  i420Size,
  overlaySize,
  type Rect,
  rectInside,
  type YuvColor,
} from "./i420.ts";
import { instantiateKernels } from "./kernel_module.ts";
import type { WasmHeap } from "./wasm_heap.ts";

/** An I420 frame (or a prepared overlay) stored in a kernel heap at `ptr`. */
export interface I420Ref {
  ptr: number;
  width: number;
  height: number;
}

interface VideoExports {
  scaleScratchBytes(srcW: number, srcH: number, dstW: number, dstH: number): number;
  scaleI420(...args: number[]): void;
  fillI420(...args: number[]): void;
  blendOverlay(...args: number[]): void;
  rgbaToI420(rgba: number, w: number, h: number, dst: number, matrix: number): void;
  rgbaToOverlay(rgba: number, w: number, h: number, dst: number, matrix: number): void;
  i420ToRgba(src: number, w: number, h: number, rgba: number, matrix: number): void;
}

function checkSize(what: string, width: number, height: number): void {
  if (!Number.isInteger(width) || !Number.isInteger(height) || width < 1 || height < 1) {
    throw new KernelError(`${what} size ${width}x${height} is not a positive integer size`);
  }
}

function checkRect(what: string, rect: Rect, frame: I420Ref): void {
  if (!rectInside(rect, frame.width, frame.height)) {
    throw new KernelError(
      `${what} ${rect.width}x${rect.height}+${rect.x}+${rect.y} is empty or outside ` +
        `${frame.width}x${frame.height}`,
    );
  }
}

/** One instance of the video kernels with its own memory. */
export class VideoKernels {
  /** The allocator of this instance's memory. */
  readonly heap: WasmHeap;
  readonly #exports: VideoExports;
  #scratch = 0;
  #scratchBytes = 0;

  private constructor(heap: WasmHeap, exports: VideoExports) {
    this.heap = heap;
    this.#exports = exports;
  }

  /** Loads a fresh instance. */
  static async create(): Promise<VideoKernels> {
    const { exports, heap } = await instantiateKernels("video");
    return new VideoKernels(heap, exports as unknown as VideoExports);
  }

  /** Allocates an I420 frame of width x height in the heap (contents undefined). */
  allocI420(width: number, height: number): I420Ref {
    checkSize("frame", width, height);
    return { ptr: this.heap.alloc(i420Size(width, height)), width, height };
  }

  /** Allocates room for a prepared overlay of width x height (see `prepareOverlay`). */
  allocOverlay(width: number, height: number): I420Ref {
    checkSize("overlay", width, height);
    return { ptr: this.heap.alloc(overlaySize(width, height)), width, height };
  }

  /** The bytes of a frame from `allocI420`; valid until the next allocation. */
  i420Bytes(frame: I420Ref): Uint8Array {
    return this.heap.bytes(frame.ptr, i420Size(frame.width, frame.height));
  }

  /**
   * Scales the `crop` window of `src` into the `rect` window of `dst`: area averaging where
   * it shrinks, bilinear where it grows. Both windows must lie inside their frames.
   */
  scale(src: I420Ref, crop: Rect, dst: I420Ref, rect: Rect): void {
    checkRect("crop", crop, src);
    checkRect("target", rect, dst);
    const e = this.#exports;
    const need = Math.max(
      e.scaleScratchBytes(crop.width, crop.height, rect.width, rect.height),
      e.scaleScratchBytes(
        chromaSize(crop.x + crop.width) - (crop.x >> 1),
        chromaSize(crop.y + crop.height) - (crop.y >> 1),
        chromaSize(rect.x + rect.width) - (rect.x >> 1),
        chromaSize(rect.y + rect.height) - (rect.y >> 1),
      ),
    );
    if (need > this.#scratchBytes) {
      if (this.#scratchBytes > 0) this.heap.free(this.#scratch);
      this.#scratch = this.heap.alloc(need);
      this.#scratchBytes = need;
    }
    e.scaleI420(
      src.ptr,
      src.width,
      src.height,
      crop.x,
      crop.y,
      crop.width,
      crop.height,
      dst.ptr,
      dst.width,
      dst.height,
      rect.x,
      rect.y,
      rect.width,
      rect.height,
      this.#scratch,
    );
  }

  /** Paints `rect` of `dst` (the whole frame when omitted) with `color`. */
  fill(dst: I420Ref, color: YuvColor, rect?: Rect): void {
    const r = rect ?? { x: 0, y: 0, width: dst.width, height: dst.height };
    checkRect("fill", r, dst);
    this.#exports.fillI420(
      dst.ptr,
      dst.width,
      dst.height,
      r.x,
      r.y,
      r.width,
      r.height,
      color.y,
      color.u,
      color.v,
    );
  }

  /**
   * Converts the RGBA image at `rgbaPtr` (width x height x 4 bytes) into an overlay from
   * `allocOverlay`, ready for `blend`.
   */
  prepareOverlay(rgbaPtr: number, overlay: I420Ref, matrix: ColorMatrix = 601): void {
    this.#exports.rgbaToOverlay(rgbaPtr, overlay.width, overlay.height, overlay.ptr, matrix);
  }

  /**
   * Alpha-blends a prepared overlay onto `dst` with its top-left corner at (x, y) in pixels;
   * parts outside `clip` (a window of `dst`, default all of it) are dropped. A chroma sample
   * changes when any pixel of its 2x2 block is inside `clip`, so give an even clip window
   * for exact edges.
   */
  blend(dst: I420Ref, overlay: I420Ref, x: number, y: number, clip?: Rect): void {
    if (!Number.isInteger(x) || !Number.isInteger(y)) {
      throw new KernelError(`overlay position ${x},${y} is not integer`);
    }
    const window = clip ?? { x: 0, y: 0, width: dst.width, height: dst.height };
    checkRect("clip", window, dst);
    this.#exports.blendOverlay(
      dst.ptr,
      dst.width,
      dst.height,
      overlay.ptr,
      overlay.width,
      overlay.height,
      x,
      y,
      window.x,
      window.y,
      window.width,
      window.height,
    );
  }

  /** Converts the RGBA image at `rgbaPtr` (the size of `dst`) into the I420 frame `dst`. */
  rgbaToI420(rgbaPtr: number, dst: I420Ref, matrix: ColorMatrix = 601): void {
    this.#exports.rgbaToI420(rgbaPtr, dst.width, dst.height, dst.ptr, matrix);
  }

  /** Converts the I420 frame `src` into RGBA (alpha 255) at `rgbaPtr`. */
  i420ToRgba(src: I420Ref, rgbaPtr: number, matrix: ColorMatrix = 601): void {
    this.#exports.i420ToRgba(src.ptr, src.width, src.height, rgbaPtr, matrix);
  }
}
