/**
 * The open-file limit (RLIMIT_NOFILE): raised at start from the soft to the hard limit, since
 * every socket, pipe and file is a descriptor and the soft default (often 1024) is reached by
 * a few hundred idle clients; counted for `/health`.
 */
import { cString, libc } from "./libc.ts";

/** Resource number of the open-file limit on Linux. */
const rlimitNofile = 7;
/** An unlimited rlim_t (all bits set). */
const rlimInfinity = 0xffff_ffff_ffff_ffffn;

/** Soft and hard open-file limits; `raisedFrom` is the soft limit before a raise. */
export interface FdLimits {
  soft: number;
  hard: number;
  raisedFrom?: number;
}

/**
 * Raises the soft open-file limit to the hard one (capped by the kernel's nr_open when the
 * hard limit is unlimited). Returns the limits after, or `error` when they could not be read
 * or changed (no `--allow-ffi`, no C library, refused by the kernel).
 */
export function raiseOpenFileLimit(): FdLimits | { error: string } {
  const { libc: c, error } = libc();
  if (!c) return { error: `cannot load libc: ${error}` };
  const limits = new BigUint64Array(2);
  if (c.getrlimit(rlimitNofile, limits) !== 0) return { error: "getrlimit failed" };
  const [soft, hard] = limits;
  let target = hard;
  if (target === rlimInfinity) target = BigInt(readNrOpen() ?? Number(soft));
  if (soft >= target) return { soft: toNumber(soft), hard: toNumber(hard) };
  limits[0] = target;
  if (c.setrlimit(rlimitNofile, limits) !== 0) {
    return { error: `setrlimit to ${target} failed` };
  }
  return { soft: toNumber(target), hard: toNumber(hard), raisedFrom: toNumber(soft) };
}

/** Open descriptors of this process and its soft limit (-1: unlimited); undefined without FFI. */
export function openFiles(): { open: number; limit: number } | undefined {
  const { libc: c } = libc();
  if (!c) return undefined;
  const limits = new BigUint64Array(2);
  if (c.getrlimit(rlimitNofile, limits) !== 0) return undefined;
  const dir = c.opendir(cString("/proc/self/fd"));
  if (dir === null) return undefined;
  let entries = 0;
  while (c.readdir(dir) !== null) entries++;
  c.closedir(dir);
  // Less ".", ".." and the descriptor of the directory being read.
  return { open: entries - 3, limit: toNumber(limits[0]) };
}

/** The kernel's ceiling on a process's descriptors, when readable. */
function readNrOpen(): number | undefined {
  try {
    return Number(Deno.readTextFileSync("/proc/sys/fs/nr_open").trim()) || undefined;
  } catch {
    return undefined;
  }
}

function toNumber(value: bigint): number {
  return value === rlimInfinity ? -1 : Number(value);
}
