/**
 * A named FIFO in a private temporary directory, through which a decoder ffmpeg hands raw
 * pictures to an encoder ffmpeg directly: the server moves none of their bytes (at 360p30,
 * 10 MB/s read from one pipe and written to another on its main thread otherwise).
 */

/** Picture links open now, for tests that check every one is removed by its owner. */
let openLinks = 0;

/** Number of picture links (FIFOs) not removed yet. */
export function openPictureLinks(): number {
  return openLinks;
}

/** One FIFO; `remove` deletes it and its directory (the processes that opened it keep it). */
export class PictureLink {
  readonly path: string;
  #dir: string;
  #removed = false;

  /** Makes the FIFO; throws when it cannot (no `mkfifo`, no temporary directory). */
  constructor() {
    this.#dir = Deno.makeTempDirSync({ prefix: "picture-link-" });
    this.path = `${this.#dir}/pictures`;
    try {
      const made = new Deno.Command("mkfifo", { args: ["-m", "600", this.path] }).outputSync();
      if (!made.success) {
        throw new Error(`mkfifo failed: ${new TextDecoder().decode(made.stderr).trim()}`);
      }
    } catch (err) {
      Deno.removeSync(this.#dir, { recursive: true });
      throw err;
    }
    openLinks++;
  }

  /** Deletes the FIFO and its directory (idempotent). */
  remove(): void {
    if (this.#removed) return;
    this.#removed = true;
    openLinks--;
    try {
      Deno.removeSync(this.#dir, { recursive: true });
    } catch {
      // Already gone (a temporary directory cleaner): nothing is left to remove.
    }
  }
}
