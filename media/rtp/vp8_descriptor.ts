/**
 * The VP8 payload descriptor fields (RFC 7741 §4.2) an SFU renumbers: the picture ID and
 * TL0PICIDX, which a decoder checks for gaps, read and shifted in place. Used by the send
 * Workers for each subscriber of a shared simulcast layer (its own offsets), by the layer
 * groups on the main thread (what they drop, and the numbers a subscriber got last) and by
 * the per-subscriber simulcast switch (werift path and bridge streams).
 */

/** Where the fields are in one payload, and their values. */
export interface Vp8Fields {
  /** Offset of the picture ID in the buffer, -1 when absent. */
  picIdAt: number;
  /** 7 or 15. */
  picIdBits: number;
  picId: number;
  /** Offset of TL0PICIDX in the buffer, -1 when absent. */
  tl0At: number;
  tl0: number;
  /** Temporal layer, -1 when the descriptor has no TID. */
  tid: number;
  /** Layer sync bit: the frame depends only on TID 0 frames. */
  sync: boolean;
  /** S bit set and partition 0: the packet starts a frame. */
  starts: boolean;
  /** The frame is a keyframe (read only when the packet starts one). */
  keyframe: boolean;
}

/** Fields with nothing found, to fill. */
export function vp8Fields(): Vp8Fields {
  return {
    picIdAt: -1,
    picIdBits: 7,
    picId: 0,
    tl0At: -1,
    tl0: 0,
    tid: -1,
    sync: false,
    starts: false,
    keyframe: false,
  };
}

/** Reads the descriptor of the payload at `buffer[start..end)` into `f`. */
export function readVp8(buffer: Uint8Array, start: number, end: number, f: Vp8Fields): Vp8Fields {
  f.picIdAt = -1;
  f.tl0At = -1;
  f.tid = -1;
  f.sync = false;
  f.keyframe = false;
  f.starts = end > start && (buffer[start] & 0x10) !== 0 && (buffer[start] & 0x07) === 0;
  if (end - start < 1) return f;
  let at = start + 1;
  if (buffer[start] & 0x80) {
    if (at >= end) return f;
    const x = buffer[at++];
    if (x & 0x80) {
      if (at >= end) return f;
      if (buffer[at] & 0x80) {
        if (at + 1 >= end) return f;
        f.picIdBits = 15;
        f.picId = ((buffer[at] & 0x7f) << 8) | buffer[at + 1];
        f.picIdAt = at;
        at += 2;
      } else {
        f.picIdBits = 7;
        f.picId = buffer[at];
        f.picIdAt = at;
        at++;
      }
    }
    if (x & 0x40) {
      if (at >= end) return f;
      f.tl0At = at;
      f.tl0 = buffer[at];
      at++;
    }
    if (x & 0x30) {
      if (at >= end) return f;
      if (x & 0x20) {
        f.tid = buffer[at] >> 6;
        f.sync = (buffer[at] & 0x20) !== 0;
      }
      at++;
    }
  }
  // The VP8 payload header's P bit (RFC 6386 §9.1): 0 on a keyframe.
  if (f.starts && at < end) f.keyframe = (buffer[at] & 0x01) === 0;
  return f;
}

/** Writes `f`'s picture ID and TL0PICIDX shifted by the offsets (mod their sizes), in place. */
export function shiftVp8(
  buffer: Uint8Array,
  f: Vp8Fields,
  picIdOffset: number,
  tl0Offset: number,
): void {
  if (f.picIdAt >= 0 && picIdOffset) {
    const picId = (f.picId + picIdOffset) & ((1 << f.picIdBits) - 1);
    if (f.picIdBits === 15) {
      buffer[f.picIdAt] = 0x80 | (picId >> 8);
      buffer[f.picIdAt + 1] = picId & 0xff;
    } else {
      buffer[f.picIdAt] = picId;
    }
  }
  if (f.tl0At >= 0 && tl0Offset) buffer[f.tl0At] = (f.tl0 + tl0Offset) & 0xff;
}

/** Offset of the payload in the RTP packet at `buffer[start..end)`, -1 when malformed. */
export function rtpPayloadStart(buffer: Uint8Array, start: number, end: number): number {
  let at = start + 12 + (buffer[start] & 0x0f) * 4;
  if (buffer[start] & 0x10) {
    if (at + 4 > end) return -1;
    at += 4 + ((buffer[at + 2] << 8) | buffer[at + 3]) * 4;
  }
  return at <= end ? at : -1;
}
