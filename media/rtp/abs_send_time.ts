/**
 * The abs-send-time RTP header extension (webrtc.org experiments): the time a packet left,
 * 24 bits of 6.18 fixed-point seconds (wrapping every 64 s). A browser receiving it runs its
 * receive-side bandwidth estimator on the spacing of arrivals against these times and reports
 * the estimate in REMB.
 */

/** URI of the extension in `a=extmap`. */
export const absSendTimeUri = "http://www.webrtc.org/experiments/rtp-hdrext/abs-send-time";

/** Units of the extension per millisecond: 2^18 per second. */
const unitsPerMs = 262.144;

/** The 24-bit abs-send-time value of `timeMs` (milliseconds on any steady clock). */
export function absSendTime(timeMs: number): number {
  return Math.floor(timeMs * unitsPerMs) & 0xffffff;
}

/** Writes the 3-byte extension payload of `timeMs` into `target` (reused for every packet). */
export function writeAbsSendTime(target: Uint8Array, timeMs: number): void {
  const value = absSendTime(timeMs);
  target[0] = value >>> 16;
  target[1] = (value >>> 8) & 0xff;
  target[2] = value & 0xff;
}
