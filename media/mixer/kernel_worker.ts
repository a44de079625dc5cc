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
  watermark?: I420Ref;
}

const kernels = VideoKernels.create();
// A load failure reaches every job, which awaits it, rather than killing the Worker.
kernels.catch(() => {});
const scenes = new Map<number, Scene>();
let queue: Promise<void> = Promise.resolve();

function freeScene(video: VideoKernels, scene: Scene): void {
  video.heap.free(scene.canvas.ptr);
  for (const picture of scene.slots.values()) video.heap.free(picture.ptr);
  if (scene.watermark) video.heap.free(scene.watermark.ptr);
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

function compose(video: VideoKernels, job: ComposeJob): ComposeResult {
  let scene = scenes.get(job.scene);
  if (!scene || scene.canvas.width !== job.width || scene.canvas.height !== job.height) {
    if (scene) video.heap.free(scene.canvas.ptr);
    const canvas = video.allocI420(job.width, job.height);
    scene = { canvas, slots: scene?.slots ?? new Map(), watermark: scene?.watermark };
    scenes.set(job.scene, scene);
  }
  const spent: ArrayBuffer[] = [];
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
    const ref = resized(video, scene.slots.get(picture.slot), picture.width, picture.height);
    scene.slots.set(picture.slot, ref);
    video.i420Bytes(ref).set(new Uint8Array(picture.data, 0, bytes));
    if (picture.data instanceof ArrayBuffer) spent.push(picture.data);
  }
  const watermark = job.watermark;
  if (watermark?.rgba) {
    if (scene.watermark) video.heap.free(scene.watermark.ptr);
    scene.watermark = undefined;
    const overlay = video.allocOverlay(watermark.width, watermark.height);
    const rgba = video.heap.alloc(watermark.rgba.byteLength);
    video.heap.bytes(rgba, watermark.rgba.byteLength).set(new Uint8Array(watermark.rgba));
    video.prepareOverlay(rgba, overlay);
    video.heap.free(rgba);
    scene.watermark = overlay;
    spent.push(watermark.rgba);
  }

  const backdrop = job.backgroundSlot === undefined
    ? undefined
    : scene.slots.get(job.backgroundSlot);
  if (backdrop) {
    const whole = { x: 0, y: 0, width: job.width, height: job.height };
    const { crop, target } = fitPicture(backdrop.width, backdrop.height, whole, "crop");
    video.scale(backdrop, crop, scene.canvas, target);
  } else {
    video.fill(scene.canvas, job.background);
  }
  for (const input of job.inputs) {
    const picture = scene.slots.get(input.slot);
    if (!picture) continue;
    const { crop, target } = fitPicture(picture.width, picture.height, input.rect, job.fit);
    video.scale(picture, crop, scene.canvas, target);
  }
  if (watermark && scene.watermark) {
    video.blend(scene.canvas, scene.watermark, watermark.x, watermark.y);
  }
  const bytes = i420Size(job.width, job.height);
  if (job.output.byteLength < bytes) {
    throw new KernelError(`output buffer of ${job.output.byteLength} bytes, needs ${bytes}`);
  }
  new Uint8Array(job.output, 0, bytes).set(video.i420Bytes(scene.canvas));
  return { output: job.output, spent };
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
