/**
 * The layout of one mixer: a named layout (grid, center, desktop, or a WCS class name for
 * one), or a custom layout of the mixer's layout folder, found by `mixerLayoutClass` and
 * re-read while its file changes. A custom layout whose file stops parsing leaves the mixer
 * on the layout it had; the error is logged.
 */
import type { CustomLayout, LayoutName } from "../media/mixer/layout.ts";
import { resolveLayoutName } from "../media/mixer/layout.ts";
import {
  type LayoutDirResult,
  LayoutDirWatcher,
  loadLayoutDir,
} from "../media/mixer/layout_dir.ts";
import { BadRequestError } from "./errors.ts";
import type { Logger } from "./log.ts";
import { pathInside } from "./paths.ts";

/** A layout a mixer can draw. */
export type MixerLayout = LayoutName | CustomLayout;

/**
 * The layout `requested` names: a custom one of `folder` first, then a named one; with
 * nothing requested, `fallback`. A layout whose file failed to load, or an unknown name, is a
 * 400.
 */
function resolve(
  requested: string | undefined,
  fallback: string,
  folder: LayoutDirResult | undefined,
): MixerLayout {
  if (requested) {
    const custom = folder?.layouts.get(requested);
    if (custom) return custom;
    const failed = folder?.errors.find((e) => e.file.replace(/\.json$/i, "") === requested);
    if (failed) throw new BadRequestError("mixerLayoutDir", `${failed.file}: ${failed.message}`);
  }
  const named = resolveLayoutName(requested || fallback);
  if (!named) {
    throw new BadRequestError(
      requested ? "mixerLayoutClass" : "mixer.layout",
      `${requested || fallback} is not a layout (grid, center, desktop, a WCS layout class${
        folder ? " or a layout of the layout folder" : ""
      })`,
    );
  }
  return named;
}

/** What a mixer's layout is chosen from. */
export interface MixerLayoutOptions {
  /** `mixerLayoutClass` of the startup request, if any. */
  requested: string | undefined;
  /** The configured default layout name. */
  fallback: string;
  /** The media folder layout folders are resolved in. */
  mediaFolder: string;
  /** Called when the layout changes because its file changed. */
  onChange: (layout: MixerLayout) => void;
  log: Logger;
}

/** The layout of one mixer and the watch on its layout folder. */
export class MixerLayouts {
  #options: MixerLayoutOptions;
  #layout: MixerLayout;
  #watcher: LayoutDirWatcher | undefined;

  private constructor(options: MixerLayoutOptions, layout: MixerLayout) {
    this.#options = options;
    this.#layout = layout;
  }

  /**
   * The layout of a new mixer, with its layout folder `dir` (relative to the media folder)
   * when given: a folder outside the media folder or a layout that does not load is a 400, a
   * missing folder a 404.
   */
  static async open(options: MixerLayoutOptions, dir: string | undefined): Promise<MixerLayouts> {
    const folder = dir ? await MixerLayouts.#load(options.mediaFolder, dir) : undefined;
    const layouts = new MixerLayouts(
      options,
      resolve(options.requested, options.fallback, folder?.result),
    );
    if (folder) layouts.#watch(folder.path);
    return layouts;
  }

  /** The current layout. */
  get layout(): MixerLayout {
    return this.#layout;
  }

  /**
   * Takes the layouts of folder `dir` from now on: the requested layout is looked up again
   * (and applied through `onChange`); on any error the mixer keeps its folder and layout.
   */
  async setDir(dir: string): Promise<void> {
    const { mediaFolder, requested, fallback, onChange } = this.#options;
    const folder = await MixerLayouts.#load(mediaFolder, dir);
    const layout = resolve(requested, fallback, folder.result);
    await this.#watcher?.close();
    this.#watch(folder.path);
    this.#apply(layout, onChange);
  }

  /** Stops watching the layout folder. */
  async close(): Promise<void> {
    await this.#watcher?.close();
    this.#watcher = undefined;
  }

  static async #load(
    mediaFolder: string,
    dir: string,
  ): Promise<{ path: string; result: LayoutDirResult }> {
    const path = pathInside(mediaFolder, dir, "mixerLayoutDir");
    return { path, result: await loadLayoutDir(path) };
  }

  #watch(path: string): void {
    const { requested, fallback, onChange, log } = this.#options;
    this.#watcher = new LayoutDirWatcher(path, (result) => {
      try {
        this.#apply(resolve(requested, fallback, result), onChange);
      } catch (err) {
        log.warn("layout not reloaded, the mixer keeps its layout", { err });
      }
    });
  }

  #apply(layout: MixerLayout, onChange: (layout: MixerLayout) => void): void {
    if (JSON.stringify(layout) === JSON.stringify(this.#layout)) return;
    this.#layout = layout;
    onChange(layout);
  }
}
