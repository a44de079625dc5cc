/**
 * Watermark images of the media folder, decoded once per file version and shared by every
 * transcoder and mixer that draws them.
 */
import type { PlacedWatermark } from "../media/transcoder/rendition.ts";
import { loadWatermark, type WatermarkImage } from "../media/transcoder/watermark.ts";
import { pathInside } from "./paths.ts";

/** Watermark images kept decoded, by file name. */
const maxCachedWatermarks = 16;

/** Decoded watermark images by file name, reloaded when the file changes. */
export class WatermarkCache {
  #mediaFolder: string;
  #images = new Map<string, { mtimeMs: number; image: Promise<WatermarkImage> }>();

  /** @param mediaFolder the folder watermark names are resolved in. */
  constructor(mediaFolder: string) {
    this.#mediaFolder = mediaFolder;
  }

  /**
   * The PNG `file` of the media folder placed at (x, y). A name outside the folder is a 400
   * naming `field`, a missing file a 404, a file that is no PNG a 400.
   */
  async place(file: string, x: number, y: number, field: string): Promise<PlacedWatermark> {
    // Decoded once per file version: a big PNG costs ~25 ms and its pixels, per decode.
    const mtimeMs = await Deno.stat(pathInside(this.#mediaFolder, file, field))
      .then((info) => info.mtime?.getTime() ?? 0, () => -1);
    const cached = this.#images.get(file);
    if (cached && cached.mtimeMs === mtimeMs && mtimeMs >= 0) {
      return { image: await cached.image, x, y };
    }
    const image = loadWatermark(this.#mediaFolder, file, field);
    if (mtimeMs >= 0) {
      if (this.#images.size >= maxCachedWatermarks) {
        this.#images.delete(this.#images.keys().next().value!);
      }
      this.#images.set(file, { mtimeMs, image });
      image.catch(() => this.#images.delete(file));
    }
    return { image: await image, x, y };
  }
}
