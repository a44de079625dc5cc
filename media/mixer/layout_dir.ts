/**
 * A layout folder: the custom layouts of its `*.json` files (format in layout_file.ts),
 * loaded once or kept up to date while the files change. The caller checks that the folder
 * lies where it may (inside the media folder).
 */

import { BadRequestError, NotFoundError } from "../../core/errors.ts";
import type { CustomLayout } from "./layout.ts";
import { parseLayoutFile } from "./layout_file.ts";

/** Largest layout file read, in bytes; a layout is a few hundred. */
const maxLayoutFileBytes = 1024 * 1024;
/** Quiet time after the last change before the folder is read again, in ms. */
const defaultDebounceMs = 200;

/** A layout file that did not load, and why. */
export interface LayoutFileFailure {
  /** The file's name inside the folder; "" when the folder itself could not be read. */
  file: string;
  message: string;
}

/** What a layout folder holds. */
export interface LayoutDirResult {
  /** The layouts that loaded, by name, in the order of their file names. */
  layouts: Map<string, CustomLayout>;
  /** The files that did not load; the others still do. */
  errors: LayoutFileFailure[];
}

function isLayoutFile(name: string): boolean {
  return name.toLowerCase().endsWith(".json");
}

async function loadFile(path: string, name: string): Promise<CustomLayout> {
  const info = await Deno.stat(path);
  if (info.size > maxLayoutFileBytes) {
    throw new Error(`${info.size} bytes, more than the ${maxLayoutFileBytes} a layout may have`);
  }
  return parseLayoutFile(await Deno.readTextFile(path), name);
}

/**
 * Loads every `*.json` file of `dir`. A file that does not read, parse or validate, or that
 * repeats a name an earlier file took, is listed in `errors`; the others load. Throws a
 * `NotFoundError` when `dir` does not exist and a `BadRequestError` (field
 * `mixerLayoutDir`) when it is not a folder.
 */
export async function loadLayoutDir(dir: string): Promise<LayoutDirResult> {
  const names: string[] = [];
  try {
    for await (const entry of Deno.readDir(dir)) {
      if (entry.isFile && isLayoutFile(entry.name)) names.push(entry.name);
    }
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) {
      throw new NotFoundError(`layout folder ${dir} not found`, { cause: error });
    }
    if (error instanceof Deno.errors.NotADirectory) {
      throw new BadRequestError("mixerLayoutDir", `${dir} is not a folder`, { cause: error });
    }
    throw error;
  }
  names.sort();
  const result: LayoutDirResult = { layouts: new Map(), errors: [] };
  for (const name of names) {
    try {
      const layout = await loadFile(`${dir}/${name}`, name);
      if (result.layouts.has(layout.name)) {
        throw new Error(`layout name "${layout.name}" is taken by an earlier file`);
      }
      result.layouts.set(layout.name, layout);
    } catch (error) {
      result.errors.push({
        file: name,
        message: error instanceof Error ? error.message : `${error}`,
      });
    }
  }
  return result;
}

/** Options of a LayoutDirWatcher. */
export interface LayoutDirWatcherOptions {
  /** Quiet time after the last change before reloading, in ms (default 200). */
  debounceMs?: number;
}

/**
 * Watches a layout folder and reloads it after its `*.json` files change (debounced, one
 * load at a time), passing each result to `onChange`. A folder that can no longer be read
 * gives a result with no layouts and one error with `file` "". The caller loads the folder
 * once itself (`loadLayoutDir`) before or after starting the watcher.
 */
export class LayoutDirWatcher {
  readonly #dir: string;
  readonly #onChange: (result: LayoutDirResult) => void;
  readonly #debounceMs: number;
  readonly #watcher: Deno.FsWatcher;
  readonly #loop: Promise<void>;
  #timer?: ReturnType<typeof setTimeout>;
  #loading?: Promise<void>;
  /** A change arrived while a load ran: load again when it ends. */
  #dirty = false;
  #closed = false;

  /** Starts watching `dir`; throws `Deno.errors.NotFound` when it does not exist. */
  constructor(
    dir: string,
    onChange: (result: LayoutDirResult) => void,
    options: LayoutDirWatcherOptions = {},
  ) {
    this.#dir = dir;
    this.#onChange = onChange;
    this.#debounceMs = options.debounceMs ?? defaultDebounceMs;
    this.#watcher = Deno.watchFs(dir, { recursive: false });
    this.#loop = this.#watch();
  }

  async #watch(): Promise<void> {
    try {
      for await (const event of this.#watcher) {
        if (event.paths.some((path) => isLayoutFile(path))) this.#schedule();
      }
    } catch {
      // The watcher ends with an error when the folder goes away; nothing more will change.
    }
  }

  #schedule(): void {
    if (this.#closed) return;
    clearTimeout(this.#timer);
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      if (this.#loading) {
        this.#dirty = true;
        return;
      }
      this.#loading = this.#reload().finally(() => {
        this.#loading = undefined;
        if (this.#dirty) {
          this.#dirty = false;
          this.#schedule();
        }
      });
    }, this.#debounceMs);
  }

  async #reload(): Promise<void> {
    let result: LayoutDirResult;
    try {
      result = await loadLayoutDir(this.#dir);
    } catch (error) {
      const message = error instanceof Error ? error.message : `${error}`;
      result = { layouts: new Map(), errors: [{ file: "", message }] };
    }
    if (!this.#closed) this.#onChange(result);
  }

  /**
   * Stops watching: closes the file watcher and drops any pending reload. The promise
   * resolves once a load already running has ended (no callback follows it).
   */
  close(): Promise<void> {
    if (!this.#closed) {
      this.#closed = true;
      clearTimeout(this.#timer);
      this.#watcher.close();
    }
    return Promise.all([this.#loop, this.#loading]).then(() => {});
  }

  /** Same as `close`, for `await using`. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }
}
