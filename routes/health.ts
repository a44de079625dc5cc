/**
 * The body of `/health`: liveness, version, and how close the server runs to each cap
 * (held, max, refused), the engine pool's running and queued jobs, the listeners'
 * connection caps, open descriptors and memory. Built from counters only, never awaiting anything a
 * loaded server is busy with, so it answers fast under load.
 */
import { openFiles } from "../core/fd_limit.ts";
import { descriptors } from "../core/fd_guard.ts";
import type { Services } from "../core/services.ts";
import { serverVersion } from "../core/version.ts";

/**
 * Figures of the listeners by service, read per request: connection caps (`ws`, `wss`,
 * `rtmp`), times the REST listener listened again after failing (`rest`).
 */
export type ListenerFigures = () => Record<string, unknown>;

/** The `/health` body. */
export function healthOf(
  services: Services,
  startedAt: number,
  listenerFigures: ListenerFigures = () => ({}),
) {
  const { limits } = services;
  return {
    status: "ok",
    version: serverVersion,
    uptimeMs: Date.now() - startedAt,
    limits: {
      sessions: limits.sessions.toJSON(),
      streams: limits.streams.toJSON(),
      pulls: limits.pulls.toJSON(),
      pushes: limits.pushes.toJSON(),
      vods: limits.vods.toJSON(),
      recorders: limits.recorders.toJSON(),
      mpegtsPorts: services.mpegts.ports.toJSON(),
      engineJobs: services.engine.figures(),
      descriptors: descriptors.toJSON(),
      recordDisk: {
        minFreeMb: services.config.limits.recordMinFreeMb,
        refused: services.recorders.diskRefused,
      },
      listeners: listenerFigures(),
    },
    fds: descriptorFigures(),
    memory: memoryFigures(),
  };
}

/** Bytes in a MiB. */
const mibBytes = 1024 * 1024;

/** Resident memory and the JavaScript heap in use, in MiB (RSS above the heap is native). */
function memoryFigures(): { rssMiB: number; heapUsedMiB: number } {
  const { rss, heapUsed } = Deno.memoryUsage();
  return { rssMiB: Math.round(rss / mibBytes), heapUsedMiB: Math.round(heapUsed / mibBytes) };
}

/** How long a descriptor count is reused, in ms: counting takes about 1 ms per thousand. */
const fdCountCacheMs = 500;
let fdCount: { at: number; figures: ReturnType<typeof openFiles> } | undefined;

/** Open descriptors and the limit; null where they cannot be counted (no FFI, no /proc). */
function descriptorFigures() {
  const now = performance.now();
  if (!fdCount || now - fdCount.at >= fdCountCacheMs) fdCount = { at: now, figures: openFiles() };
  return fdCount.figures ?? null;
}
