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

/** mallopt parameters (glibc's malloc.h). */
const mallocParameter = { arenaMax: -8, mmapThreshold: -3 } as const;
/** Arenas malloc may keep for the server's threads (glibc's default is 8 per core). */
export const mallocArenaMax = 2;
/** Allocations of this many bytes and more get a mapping of their own, unmapped on free. */
export const mallocMmapThresholdBytes = 128 * 1024;

/**
 * Keeps glibc's malloc from holding on to what a load freed, where a trim cannot give it
 * back. By default malloc raises its mapping threshold to the size of any mapped block
 * freed (up to 32 MiB), so later buffers of that size (sockets', HTTP bodies) come from
 * the heap, where one block still in use pins the pages around it; and each thread that
 * allocates may get an arena of its own (tokio's short-lived blocking threads, Workers), each
 * with its own free lists. Hence a fixed threshold and `mallocArenaMax` arenas (set this late,
 * the cap applies to arenas made from now on). With the same settings given to glibc through
 * its environment (MALLOC_ARENA_MAX=2 MALLOC_MMAP_THRESHOLD_=131072), the soak bench's RSS
 * after its load came back to +3.2% of its start, peak 219 MiB (untuned +5.1%, peak 236 MiB;
 * arena cap alone +4.5%; one run each, 2026-11-25). False where mallopt is
 * missing.
 */
export function tuneMalloc(): boolean {
  const mallopt = libc().libc?.mallopt;
  if (!mallopt) return false;
  const arenas = mallopt(mallocParameter.arenaMax, mallocArenaMax);
  const threshold = mallopt(mallocParameter.mmapThreshold, mallocMmapThresholdBytes);
  return arenas === 1 && threshold === 1;
}

/**
 * Tunes malloc (`tuneMalloc`) and trims every `memoryTrimIntervalMs`; returns the function
 * that stops it.
 */
export function startMemoryTrim(log: Logger): () => void {
  if (!tuneMalloc()) log.debug("malloc not tuned (no glibc mallopt)");
  if (!libc().libc?.malloc_trim) return () => {};
  const timer = setInterval(() => {
    const started = performance.now();
    trimMemory();
    log.debug("memory trimmed", { ms: Math.round((performance.now() - started) * 100) / 100 });
  }, memoryTrimIntervalMs);
  return () => clearInterval(timer);
}
