/**
 * The packet batch a SendEngine hands a Worker: publisher packets, each once, with the group
 * it goes to and optionally the few subscribers (of that group) it is for. Layout per record,
 * 4-byte aligned, big-endian:
 *   u16 packet length | u16 subscriber count (0: the whole group) | u32 group |
 *   count x u32 subscriber handle | packet bytes | padding
 */

const recordHeaderBytes = 8;

/** Bytes one record takes. */
export function batchRecordBytes(packetBytes: number, subscribers: number): number {
  return (recordHeaderBytes + subscribers * 4 + packetBytes + 3) & ~3;
}

/** Largest packet a record holds. */
export const maxBatchPacketBytes = 0xffff;

/** Appends records to a growable buffer; `take` hands the bytes over and starts again. */
export class BatchWriter {
  #bytes = new Uint8Array(16 * 1024);
  #view = new DataView(this.#bytes.buffer);
  #used = 0;

  /** Bytes written since the last take. */
  get used(): number {
    return this.#used;
  }

  /** Appends `packet` for `group` (for `handles` only when given). */
  append(group: number, packet: Uint8Array, handles?: readonly number[]): void {
    if (packet.length > maxBatchPacketBytes) {
      throw new RangeError(`a ${packet.length}-byte packet does not fit a batch record`);
    }
    const count = handles?.length ?? 0;
    const need = batchRecordBytes(packet.length, count);
    if (this.#used + need > this.#bytes.length) {
      const grown = new Uint8Array(Math.max(this.#bytes.length * 2, this.#used + need));
      grown.set(this.#bytes.subarray(0, this.#used));
      this.#bytes = grown;
      this.#view = new DataView(grown.buffer);
    }
    const at = this.#used;
    this.#view.setUint16(at, packet.length);
    this.#view.setUint16(at + 2, count);
    this.#view.setUint32(at + 4, group);
    for (let i = 0; i < count; i++) this.#view.setUint32(at + 8 + i * 4, handles![i]);
    this.#bytes.set(packet, at + 8 + count * 4);
    this.#used += need;
  }

  /** The records written so far, in a new buffer that may be transferred; empties the writer. */
  take(): ArrayBuffer {
    const out = this.#bytes.slice(0, this.#used).buffer;
    this.#used = 0;
    return out;
  }
}

/** Calls `visit` for every record of `batch`. Throws RangeError on a cut batch. */
export function readBatch(
  batch: Uint8Array,
  visit: (group: number, handles: Uint32ArrayLike, offset: number, length: number) => void,
): void {
  const view = new DataView(batch.buffer, batch.byteOffset, batch.byteLength);
  const handles = new HandleList(view);
  let at = 0;
  while (at < batch.length) {
    if (at + recordHeaderBytes > batch.length) throw new RangeError("batch record header cut");
    const length = view.getUint16(at);
    const count = view.getUint16(at + 2);
    const group = view.getUint32(at + 4);
    const bytes = batchRecordBytes(length, count);
    if (at + bytes > batch.length) throw new RangeError("batch record cut");
    handles.at = at + recordHeaderBytes;
    handles.length = count;
    visit(group, handles, at + recordHeaderBytes + count * 4, length);
    at += bytes;
  }
}

/** The subscriber handles of a record, read in place (valid only during the visit). */
export interface Uint32ArrayLike {
  readonly length: number;
  get(index: number): number;
}

class HandleList implements Uint32ArrayLike {
  at = 0;
  length = 0;
  constructor(readonly view: DataView) {}
  get(index: number): number {
    return this.view.getUint32(this.at + index * 4);
  }
}
