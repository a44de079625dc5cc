/**
 * Decoding of client frames (RFC 6455 §5): bytes are pushed in as they arrive and whole
 * messages and control frames come out. The message limit is enforced from each frame header,
 * before any of its payload is buffered, and counts every fragment of a message so far, so a
 * client can never make us hold more than the limit.
 */
import { concatBytes } from "./bytes.ts";

/** Frame opcodes (RFC 6455 §5.2). */
export const opcodes = {
  continuation: 0x0,
  text: 0x1,
  binary: 0x2,
  close: 0x8,
  ping: 0x9,
  pong: 0xa,
} as const;

/** Close codes of the protocol (RFC 6455 §7.4.1). */
export const closeCodes = {
  normal: 1000,
  goingAway: 1001,
  protocolError: 1002,
  invalidPayload: 1007,
  policy: 1008,
  tooBig: 1009,
  internalError: 1011,
  /** Reported when the close frame had no code; never sent. */
  noStatus: 1005,
  /** Reported when the connection ended without a close frame; never sent. */
  abnormal: 1006,
} as const;

/** Largest payload of a control frame, in bytes (RFC 6455 §5.5). */
export const maxControlPayloadBytes = 125;

/** The client broke the protocol; the connection fails with `code` (1002, 1007 or 1009). */
export class WebSocketProtocolError extends Error {
  constructor(readonly code: number, message: string) {
    super(message);
    this.name = "WebSocketProtocolError";
  }
}

/** What the reader hands out. */
export interface FrameSink {
  /** A whole data message: text already validated as UTF-8, binary as bytes. */
  message(data: string | Uint8Array): void;
  /** A control frame (close, ping, pong) with its unmasked payload. */
  control(opcode: number, payload: Uint8Array): void;
}

const utf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

/** Decodes UTF-8 or throws 1007 (RFC 6455 §8.1). */
export function decodeUtf8(bytes: Uint8Array): string {
  try {
    return utf8.decode(bytes);
  } catch {
    throw new WebSocketProtocolError(closeCodes.invalidPayload, "invalid UTF-8 in a text message");
  }
}

/** First allocation for a payload; larger ones double as their bytes arrive. */
const initialPayloadBytes = 4096;

/** Most header bytes a frame has: 2 + 8 of extended length + 4 of mask key. */
const maxHeaderBytes = 14;

/** Incremental decoder of the frames of one connection. */
export class FrameReader {
  /** Largest data message accepted, in bytes; may change between messages (after a handshake). */
  maxMessageBytes: number;

  readonly #sink: FrameSink;
  readonly #header = new Uint8Array(maxHeaderBytes);
  #headerLength = 0;
  // The frame whose payload is being read (undefined while reading a header).
  #frame?: {
    fin: boolean;
    opcode: number;
    mask: Uint8Array;
    /** Announced payload length. */
    length: number;
    /** Grows with the bytes received, so a header alone reserves no memory. */
    payload: Uint8Array;
    filled: number;
  };
  // The fragmented message in progress: its opcode, fragments and total size.
  #messageOpcode?: number;
  #fragments: Uint8Array[] = [];
  #messageBytes = 0;

  constructor(maxMessageBytes: number, sink: FrameSink) {
    this.maxMessageBytes = maxMessageBytes;
    this.#sink = sink;
  }

  /**
   * Consumes received bytes (copied; the caller may reuse `chunk`). Throws
   * WebSocketProtocolError at the first violation; nothing is usable after that.
   */
  push(chunk: Uint8Array): void {
    let offset = 0;
    while (offset < chunk.length) {
      if (this.#frame === undefined) {
        offset = this.#readHeader(chunk, offset);
        continue;
      }
      const frame = this.#frame;
      const take = Math.min(frame.length - frame.filled, chunk.length - offset);
      if (frame.filled + take > frame.payload.length) {
        const grown = new Uint8Array(
          Math.min(frame.length, Math.max(frame.filled + take, frame.payload.length * 2)),
        );
        grown.set(frame.payload.subarray(0, frame.filled));
        frame.payload = grown;
      }
      const { payload, mask } = frame;
      for (let i = 0; i < take; i++) {
        const at = frame.filled + i;
        payload[at] = chunk[offset + i] ^ mask[at & 3];
      }
      frame.filled += take;
      offset += take;
      if (frame.filled === frame.length) this.#endFrame();
    }
  }

  /** Copies header bytes; once the header is whole, validates it and starts the payload. */
  #readHeader(chunk: Uint8Array, offset: number): number {
    const h = this.#header;
    while (offset < chunk.length) {
      h[this.#headerLength++] = chunk[offset++];
      const needed = this.#headerBytesNeeded();
      if (needed !== undefined && this.#headerLength === needed) {
        this.#startFrame();
        return offset;
      }
    }
    return offset;
  }

  /** Header length once its first two bytes are known. */
  #headerBytesNeeded(): number | undefined {
    if (this.#headerLength < 2) return undefined;
    const lengthCode = this.#header[1] & 0x7f;
    const extended = lengthCode === 126 ? 2 : lengthCode === 127 ? 8 : 0;
    const masked = (this.#header[1] & 0x80) !== 0;
    return 2 + extended + (masked ? 4 : 0);
  }

  #startFrame(): void {
    const h = this.#header;
    this.#headerLength = 0;
    const fin = (h[0] & 0x80) !== 0;
    const opcode = h[0] & 0x0f;
    if ((h[0] & 0x70) !== 0) throw protocolError("reserved bits set without an extension");
    if ((h[1] & 0x80) === 0) throw protocolError("client frames must be masked");
    const lengthCode = h[1] & 0x7f;
    let length: number;
    let maskAt = 2;
    const view = new DataView(h.buffer);
    if (lengthCode === 126) {
      length = view.getUint16(2);
      maskAt = 4;
    } else if (lengthCode === 127) {
      const high = view.getUint32(2);
      if (high & 0x80000000) throw protocolError("64-bit payload length has its top bit set");
      // Anything past 4 GiB is over every limit; keep the value finite and exact enough.
      length = high * 2 ** 32 + view.getUint32(6);
      maskAt = 10;
    } else {
      length = lengthCode;
    }
    if (opcode >= opcodes.close) {
      if (opcode > opcodes.pong) throw protocolError(`unknown opcode ${opcode}`);
      if (!fin) throw protocolError("fragmented control frame");
      if (length > maxControlPayloadBytes) {
        throw protocolError(`control frame of ${length} bytes, over ${maxControlPayloadBytes}`);
      }
    } else if (opcode === opcodes.continuation) {
      if (this.#messageOpcode === undefined) throw protocolError("continuation without a message");
    } else if (opcode === opcodes.text || opcode === opcodes.binary) {
      if (this.#messageOpcode !== undefined) {
        throw protocolError("new message before the fragmented one ended");
      }
    } else {
      throw protocolError(`unknown opcode ${opcode}`);
    }
    if (opcode < opcodes.close && this.#messageBytes + length > this.maxMessageBytes) {
      throw new WebSocketProtocolError(
        closeCodes.tooBig,
        `message exceeds ${this.maxMessageBytes} bytes`,
      );
    }
    this.#frame = {
      fin,
      opcode,
      mask: h.slice(maskAt, maskAt + 4),
      length,
      payload: new Uint8Array(Math.min(length, initialPayloadBytes)),
      filled: 0,
    };
    if (length === 0) this.#endFrame();
  }

  #endFrame(): void {
    const { fin, opcode, payload } = this.#frame!;
    this.#frame = undefined;
    if (opcode >= opcodes.close) {
      this.#sink.control(opcode, payload);
      return;
    }
    if (opcode !== opcodes.continuation) this.#messageOpcode = opcode;
    this.#fragments.push(payload);
    this.#messageBytes += payload.length;
    if (!fin) return;
    const whole = this.#fragments.length === 1 ? payload : concatBytes(this.#fragments);
    const messageOpcode = this.#messageOpcode!;
    this.#messageOpcode = undefined;
    this.#fragments = [];
    this.#messageBytes = 0;
    this.#sink.message(messageOpcode === opcodes.text ? decodeUtf8(whole) : whole);
  }
}

function protocolError(message: string): WebSocketProtocolError {
  return new WebSocketProtocolError(closeCodes.protocolError, message);
}
