/**
 * Free space of the filesystem holding a folder, for the recording floor
 * (`limits.recordMinFreeMb`): statvfs through FFI, else `df`. Answers are cached a second per
 * folder, so a burst of recording starts asks the kernel once.
 */
import { dirname, resolve } from "node:path";
import { cString, libc } from "./libc.ts";

/** How long a free-space answer is reused, in milliseconds. */
export const freeSpaceCacheMs = 1000;
/** Size of glibc's struct statvfs on 64-bit Linux, in bytes. */
const statvfsBytes = 112;
/** Byte offsets in struct statvfs: f_frsize, f_bavail (blocks free to unprivileged users). */
const frsizeOffset = 8;
const bavailOffset = 32;

const cache = new Map<string, { at: number; bytes: Promise<number | undefined> }>();

/**
 * Bytes free to this (unprivileged) process on the filesystem of `folder` (of its nearest
 * existing parent when it is not made yet); undefined when neither statvfs nor `df` answers
 * (the floor is then not enforced).
 */
export function freeBytes(folder: string): Promise<number | undefined> {
  const now = Date.now();
  const hit = cache.get(folder);
  if (hit && now - hit.at < freeSpaceCacheMs) return hit.bytes;
  const bytes = freeBytesNow(folder);
  cache.set(folder, { at: now, bytes });
  return bytes;
}

async function freeBytesNow(folder: string): Promise<number | undefined> {
  for (let path = resolve(folder);; path = dirname(path)) {
    const bytes = statvfsFreeBytes(path) ?? await dfFreeBytes(path);
    if (bytes !== undefined || path === dirname(path)) return bytes;
  }
}

/** Free bytes by statvfs; undefined without FFI or when the path is not there. */
function statvfsFreeBytes(path: string): number | undefined {
  const { libc: c } = libc();
  if (!c) return undefined;
  const buf = new Uint8Array(statvfsBytes);
  if (c.statvfs(cString(path), buf) !== 0) return undefined;
  const view = new DataView(buf.buffer);
  return Number(view.getBigUint64(frsizeOffset, true) * view.getBigUint64(bavailOffset, true));
}

/** `df -Pk <folder>`: the fourth column of its second line is the available KiB. */
async function dfFreeBytes(folder: string): Promise<number | undefined> {
  try {
    const out = await new Deno.Command("df", { args: ["-Pk", folder], stderr: "null" }).output();
    if (!out.success) return undefined;
    const kib = Number(new TextDecoder().decode(out.stdout).trim().split("\n")[1]?.split(/\s+/)[3]);
    return Number.isFinite(kib) ? kib * 1024 : undefined;
  } catch {
    return undefined;
  }
}
