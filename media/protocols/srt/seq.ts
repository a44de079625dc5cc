/**
 * SRT sequence and message number arithmetic: packet sequence numbers are 31 bits and wrap
 * to 0 (draft-sharabayko-srt §3.1), so order is decided on the signed distance.
 */

/** Sequence numbers are 31-bit. */
export const seqModulus = 0x80000000;
const seqMask = 0x7fffffff;
const seqHalf = 0x40000000;

/** `seq + n` modulo 2^31 (n may be negative). */
export function seqAdd(seq: number, n: number): number {
  return (((seq + n) % seqModulus) + seqModulus) & seqMask;
}

/** Signed distance from `a` to `b` (b - a), in the range -2^30..2^30. */
export function seqDiff(a: number, b: number): number {
  let d = (b - a) & seqMask;
  if (d >= seqHalf) d -= seqModulus;
  return d;
}

/** Message numbers are 26-bit and skip 0 when they wrap (libsrt starts at 1). */
export function nextMessageNumber(msgNo: number): number {
  const next = (msgNo + 1) & 0x03ffffff;
  return next === 0 ? 1 : next;
}

/** A random initial sequence number, as libsrt picks one per connection. */
export function randomSeq(): number {
  return crypto.getRandomValues(new Uint32Array(1))[0] & seqMask;
}
