/// <reference lib="deno.worker" />
/**
 * Entry of the kernel Workers started by WorkerRunner: runs jobs one at a time, in the
 * order they arrive, on this Worker's own video kernel instance.
 */

import { fitPicture } from "./fit.ts";
import { i420Size } from "./i420.ts";
import type { ComposeJob, ComposeResult, JobReply, JobRequest, KernelJob } from "./kernel_jobs.ts";
import { type I420Ref, VideoKernels } from "./video_kernels.ts";
import { KernelError } from "./errors.ts";

/** What the Worker keeps of one scene between its frames. */
interface Scene {
  canvas: I420Ref;
  slots: Map<number, I420Ref>;
  /** Prepared watermark overlays by `Watermark.id`. */
  watermarks: Map<number, I420Ref>;
  /**
   * What the canvas shows apart from the slots' pictures (background, fit, each slot's
   * rectangle; see `planOf`) when it can be updated tile by tile; undefined when it must be
   * drawn whole (new canvas, watermarks, overlapping rectangles).
   */
  plan?: string;
}

const kernels = VideoKernels.create();
// A load failure reaches every job, which awaits it, rather than killing the Worker.
kernels.catch(() => {});
const scenes = new Map<number, Scene>();
let queue: Promise<void> = Promise.resolve();

function freeScene(video: VideoKernels, scene: Scene): void {
  video.heap.free(scene.canvas.ptr);
  for (const picture of scene.slots.values()) video.heap.free(picture.ptr);
  for (const overlay of scene.watermarks.values()) video.heap.free(overlay.ptr);
}

/**
 * Brings the scene's watermark cache in line with the job: prepares the images it carries
 * and frees those it no longer lists. Returns the RGBA buffers, handed back as spent.
 */
function updateWatermarks(video: VideoKernels, scene: Scene, job: ComposeJob): ArrayBuffer[] {
  const spent: ArrayBuffer[] = [];
  const listed = new Set<number>();
  for (const watermark of job.watermarks ?? []) {
    listed.add(watermark.id);
    if (!watermark.rgba) continue;
    const bytes = watermark.width * watermark.height * 4;
    if (watermark.rgba.byteLength < bytes) {
      throw new KernelError(
        `watermark ${watermark.id} has ${watermark.rgba.byteLength} bytes, ` +
          `${watermark.width}x${watermark.height} RGBA needs ${bytes}`,
      );
    }
    const old = scene.watermarks.get(watermark.id);
    if (old) video.heap.free(old.ptr);
    scene.watermarks.delete(watermark.id);
    const overlay = video.allocOverlay(watermark.width, watermark.height);
    const rgba = video.heap.alloc(bytes);
    video.heap.bytes(rgba, bytes).set(new Uint8Array(watermark.rgba, 0, bytes));
    video.prepareOverlay(rgba, overlay);
    video.heap.free(rgba);
    scene.watermarks.set(watermark.id, overlay);
    spent.push(watermark.rgba);
  }
  for (const [id, overlay] of scene.watermarks) {
    if (listed.has(id)) continue;
    video.heap.free(overlay.ptr);
    scene.watermarks.delete(id);
  }
  return spent;
}

/** A frame of width x height in `scene`'s place `current`, reallocated on a size change. */
function resized(
  video: VideoKernels,
  current: I420Ref | undefined,
  width: number,
  height: number,
): I420Ref {
  if (current && current.width === width && current.height === height) return current;
  if (current) video.heap.free(current.ptr);
  return video.allocI420(width, height);
}

/**
 * What the canvas of `job` shows besides the slots' pictures, as a string to compare from
 * frame to frame; undefined when the canvas cannot be updated tile by tile: watermarks
 * (blended over several tiles and the background) or rectangles that overlap (a tile drawn
 * again would cover the one drawn after it).
 */
function planOf(job: ComposeJob): string | undefined {
  if ((job.watermarks?.length ?? 0) > 0) return undefined;
  const rects = job.inputs.map((input) => input.rect);
  for (let i = 0; i < rects.length; i++) {
    for (let j = i + 1; j < rects.length; j++) {
      const [a, b] = [rects[i], rects[j]];
      if (
        a.x < b.x + b.width && b.x < a.x + a.width && a.y < b.y + b.height && b.y < a.y + a.height
      ) {
        return undefined;
      }
    }
  }
  return JSON.stringify([job.background, job.backgroundSlot, job.fit, job.inputs]);
}

function compose(video: VideoKernels, job: ComposeJob): ComposeResult {
  let scene = scenes.get(job.scene);
  if (!scene || scene.canvas.width !== job.width || scene.canvas.height !== job.height) {
    if (scene) video.heap.free(scene.canvas.ptr);
    const canvas = video.allocI420(job.width, job.height);
    scene = {
      canvas,
      slots: scene?.slots ?? new Map(),
      watermarks: scene?.watermarks ?? new Map(),
    };
    scenes.set(job.scene, scene);
  }
  const spent: ArrayBuffer[] = [];
  // Only the tiles of slots with a new picture of their old size need drawing when the rest
  // of the canvas is as the last frame left it; anything else redraws the whole canvas.
  const plan = planOf(job);
  let whole = plan === undefined || plan !== scene.plan || job.evict.length > 0;
  // Until this frame is drawn, the canvas matches no plan (a failure leaves it half drawn).
  scene.plan = undefined;
  const changed = new Set<number>();
  for (const slot of job.evict) {
    const picture = scene.slots.get(slot);
    if (picture) video.heap.free(picture.ptr);
    scene.slots.delete(slot);
  }
  for (const picture of job.pictures) {
    const bytes = i420Size(picture.width, picture.height);
    if (picture.data.byteLength < bytes) {
      throw new KernelError(
        `picture of slot ${picture.slot} has ${picture.data.byteLength} bytes, ` +
          `${picture.width}x${picture.height} I420 needs ${bytes}`,
      );
    }
    const old = scene.slots.get(picture.slot);
    // A picture of another size may not cover what the old one did (letterbox margins).
    if (old?.width !== picture.width || old.height !== picture.height) whole = true;
    if (picture.slot === job.backgroundSlot) whole = true;
    const ref = resized(video, old, picture.width, picture.height);
    scene.slots.set(picture.slot, ref);
    video.i420Bytes(ref).set(new Uint8Array(picture.data, 0, bytes));
    if (picture.data instanceof ArrayBuffer) spent.push(picture.data);
    changed.add(picture.slot);
  }
  spent.push(...updateWatermarks(video, scene, job));

  if (whole) {
    const backdrop = job.backgroundSlot === undefined
      ? undefined
      : scene.slots.get(job.backgroundSlot);
    if (backdrop) {
      const canvas = { x: 0, y: 0, width: job.width, height: job.height };
      const { crop, target } = fitPicture(backdrop.width, backdrop.height, canvas, "crop");
      video.scale(backdrop, crop, scene.canvas, target);
    } else {
      video.fill(scene.canvas, job.background);
    }
  }
  let drawn = 0;
  for (const input of job.inputs) {
    const picture = scene.slots.get(input.slot);
    if (!picture || (!whole && !changed.has(input.slot))) continue;
    const { crop, target } = fitPicture(picture.width, picture.height, input.rect, job.fit);
    video.scale(picture, crop, scene.canvas, target);
    drawn++;
  }
  for (const watermark of job.watermarks ?? []) {
    const overlay = scene.watermarks.get(watermark.id);
    if (!overlay) throw new KernelError(`watermark ${watermark.id} was never sent`);
    video.blend(scene.canvas, overlay, watermark.x, watermark.y, watermark.clip);
  }
  const bytes = i420Size(job.width, job.height);
  if (job.output.byteLength < bytes) {
    throw new KernelError(`output buffer of ${job.output.byteLength} bytes, needs ${bytes}`);
  }
  new Uint8Array(job.output, 0, bytes).set(video.i420Bytes(scene.canvas));
  scene.plan = plan;
  return { output: job.output, spent, tilesDrawn: drawn, wholeCanvas: whole };
}

async function run(job: KernelJob): Promise<ComposeResult | null> {
  const video = await kernels;
  switch (job.op) {
    case "compose":
      return compose(video, job);
    case "release": {
      const scene = scenes.get(job.scene);
      if (scene) freeScene(video, scene);
      scenes.delete(job.scene);
      return null;
    }
  }
}

self.onmessage = (event: MessageEvent<JobRequest>) => {
  const { id, job } = event.data;
  queue = queue.then(async () => {
    let reply: JobReply;
    let transfer: ArrayBuffer[] = [];
    try {
      const result = await run(job);
      reply = { id, result };
      if (result) transfer = [result.output, ...result.spent];
    } catch (error) {
      reply = { id, error: error instanceof Error ? error.message : String(error) };
    }
    self.postMessage(reply, transfer);
  });
};
