/**
 * Encoding of server frames (RFC 6455 §5.2): always final, never masked (§5.1: a server
 * does not mask), no extension bits.
 */
import { maxControlPayloadBytes, opcodes } from "./frame_reader.ts";

const encoder = new TextEncoder();

/** One whole frame carrying `payload`. */
export function encodeFrame(opcode: number, payload: Uint8Array): Uint8Array {
  const length = payload.length;
  const headerBytes = length < 126 ? 2 : length < 0x10000 ? 4 : 10;
  const frame = new Uint8Array(headerBytes + length);
  frame[0] = 0x80 | opcode;
  if (length < 126) {
    frame[1] = length;
  } else if (length < 0x10000) {
    frame[1] = 126;
    new DataView(frame.buffer).setUint16(2, length);
  } else {
    frame[1] = 127;
    const view = new DataView(frame.buffer);
    view.setUint32(2, Math.floor(length / 2 ** 32));
    view.setUint32(6, length >>> 0);
  }
  frame.set(payload, headerBytes);
  return frame;
}

/** A text frame. */
export function encodeText(text: string): Uint8Array {
  return encodeFrame(opcodes.text, encoder.encode(text));
}

/**
 * A close frame with `code` and as much of `reason` as fits the 125-byte control payload,
 * cut on a character boundary so the peer can decode it.
 */
export function encodeClose(code: number, reason: string): Uint8Array {
  const room = maxControlPayloadBytes - 2;
  let bytes = encoder.encode(reason);
  if (bytes.length > room) {
    let end = room;
    // Back off continuation bytes (10xxxxxx) so no character is split.
    while (end > 0 && (bytes[end] & 0xc0) === 0x80) end--;
    bytes = bytes.subarray(0, end);
  }
  const payload = new Uint8Array(2 + bytes.length);
  new DataView(payload.buffer).setUint16(0, code);
  payload.set(bytes, 2);
  return encodeFrame(opcodes.close, payload);
}
