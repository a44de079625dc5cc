/**
 * VP8 payload format (RFC 7741): each packet carries a one-byte payload descriptor (no
 * extensions) and a piece of the frame; S marks the first piece of a partition, the RTP
 * marker the last packet of the frame. Only partition 0 is signalled: the descriptor's
 * partition index is optional information receivers need not have.
 */
import { ParseError } from "../../core/errors.ts";
import type { MediaFrame } from "../frame.ts";
import { type Packetizer, type PacketSink, rtpMaxPayloadBytes } from "./packetizer.ts";

/** Payload descriptor byte of a frame's first packet: S (start of partition) set. */
const startDescriptor = 0x10;
/** Payload descriptor byte of the following packets. */
const continuationDescriptor = 0x00;

/** Packetizes VP8 frames. */
export class Vp8Packetizer implements Packetizer {
  #maxPayloadBytes: number;

  /** `maxPayloadBytes`: largest payload, descriptor included, in bytes. */
  constructor(maxPayloadBytes: number = rtpMaxPayloadBytes) {
    this.#maxPayloadBytes = maxPayloadBytes;
  }

  packetize(frame: MediaFrame, emit: PacketSink): void {
    const data = frame.data;
    if (frame.codec !== "VP8") throw new ParseError(`${frame.codec} is not VP8`);
    if (data.length === 0) throw new ParseError("empty VP8 frame");
    const piece = this.#maxPayloadBytes - 1;
    for (let pos = 0; pos < data.length; pos += piece) {
      const end = Math.min(pos + piece, data.length);
      const payload = new Uint8Array(1 + end - pos);
      payload[0] = pos === 0 ? startDescriptor : continuationDescriptor;
      payload.set(data.subarray(pos, end), 1);
      emit(payload, end === data.length, 0);
    }
  }
}
