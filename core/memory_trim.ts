/**
 * Gives the C heap's free memory back to the system now and then. Deno allocates its native
 * buffers (sockets, TLS, HTTP, pipes) with glibc's malloc, which keeps what a load freed in
 * its arenas' free lists: after the soak bench's load (10,000 sessions, 600 RTMP sockets,
 * 200 pulls, 100 snapshots) RSS stayed ~14 MiB above what it was once V8 had shrunk its own
 * heap, and a trim brought it back below its start. A trim takes 1-3 ms. Only with
 * `--allow-ffi` on glibc; without, nothing is done.
 */
import type { Logger } from "./log.ts";
import { libc } from "./libc.ts";

/** Interval between two trims, in ms. */
export const memoryTrimIntervalMs = 10_000;

/** Returns the C heap's free memory to the system; false where that cannot be done. */
export function trimMemory(): boolean {
  const trim = libc().libc?.malloc_trim;
  if (!trim) return false;
  trim(0n);
  return true;
}

/** Trims every `memoryTrimIntervalMs`; returns the function that stops it. */
export function startMemoryTrim(log: Logger): () => void {
  if (!libc().libc?.malloc_trim) return () => {};
  const timer = setInterval(() => {
    const started = performance.now();
    trimMemory();
    log.debug("memory trimmed", { ms: Math.round((performance.now() - started) * 100) / 100 });
  }, memoryTrimIntervalMs);
  return () => clearInterval(timer);
}
