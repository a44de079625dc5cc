/**
 * A WebSocket client on a bare TCP connection, for tests that must send what no well-behaved
 * client sends: broken upgrades, unmasked frames, huge announced lengths, endless fragments.
 */

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** How to build one client frame. */
export interface ClientFrameOptions {
  /** FIN bit (default true). */
  fin?: boolean;
  /** Mask the payload, as RFC 6455 requires of clients (default true). */
  masked?: boolean;
  /** The three reserved bits as a number 0..7 (default 0). */
  rsv?: number;
  /** Length to announce instead of the payload's (a header promising more than is sent). */
  announcedLength?: number;
}

/** One client frame as bytes. */
export function clientFrame(
  opcode: number,
  payload: Uint8Array | string,
  options: ClientFrameOptions = {},
): Uint8Array {
  const body = typeof payload === "string" ? encoder.encode(payload) : payload;
  const length = options.announcedLength ?? body.length;
  const masked = options.masked ?? true;
  const extended = length < 126 ? 0 : length < 0x10000 ? 2 : 8;
  const maskBytes = masked ? 4 : 0;
  const frame = new Uint8Array(2 + extended + maskBytes + body.length);
  const view = new DataView(frame.buffer);
  frame[0] = ((options.fin ?? true) ? 0x80 : 0) | ((options.rsv ?? 0) << 4) | opcode;
  frame[1] = (masked ? 0x80 : 0) | (extended === 0 ? length : extended === 2 ? 126 : 127);
  if (extended === 2) view.setUint16(2, length);
  if (extended === 8) view.setBigUint64(2, BigInt(length));
  const at = 2 + extended;
  const mask = masked ? crypto.getRandomValues(new Uint8Array(4)) : new Uint8Array(4);
  frame.set(mask.subarray(0, maskBytes), at);
  for (let i = 0; i < body.length; i++) frame[at + maskBytes + i] = body[i] ^ mask[i & 3];
  return frame;
}

/** A frame from the server. */
export interface ServerFrame {
  readonly fin: boolean;
  readonly opcode: number;
  readonly payload: Uint8Array;
}

/** The upgrade request a browser sends, minus what the server ignores. */
export function upgradeRequest(headers: Record<string, string> = {}): string {
  const fields = {
    "Host": "127.0.0.1",
    "Upgrade": "websocket",
    "Connection": "Upgrade",
    "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
    "Sec-WebSocket-Version": "13",
    ...headers,
  };
  const lines = Object.entries(fields).filter(([, v]) => v !== "").map(([k, v]) => `${k}: ${v}`);
  return `GET / HTTP/1.1\r\n${lines.join("\r\n")}\r\n\r\n`;
}

/** A bare TCP connection speaking (or breaking) the WebSocket protocol. */
export class RawWsClient {
  #buffer = new Uint8Array(0);
  #eof = false;

  private constructor(readonly conn: Deno.Conn) {}

  /** Connects to 127.0.0.1:`port` without sending anything. */
  static async connect(port: number): Promise<RawWsClient> {
    return new RawWsClient(await Deno.connect({ hostname: "127.0.0.1", port }));
  }

  /** Connects and upgrades; throws unless the answer is 101. */
  static async open(port: number): Promise<RawWsClient> {
    const client = await RawWsClient.connect(port);
    await client.write(upgradeRequest());
    const head = await client.readHead();
    if (!head.startsWith("HTTP/1.1 101")) {
      client.close();
      throw new Error(`upgrade refused: ${head}`);
    }
    return client;
  }

  /** Writes text or bytes. */
  async write(data: string | Uint8Array): Promise<void> {
    const bytes = typeof data === "string" ? encoder.encode(data) : data;
    for (let at = 0; at < bytes.length;) at += await this.conn.write(bytes.subarray(at));
  }

  /** Sends a masked text frame of a JSON signaling message `{message, data: [payload]}`. */
  sendMessage(message: string, payload: unknown): Promise<void> {
    return this.write(clientFrame(1, JSON.stringify({ message, data: [payload] })));
  }

  /** Reads an HTTP response head (and its body when it has a Content-Length). */
  async readHead(): Promise<string> {
    for (;;) {
      const text = decoder.decode(this.#buffer);
      const end = text.indexOf("\r\n\r\n");
      if (end >= 0) {
        const length = Number(/content-length: (\d+)/i.exec(text.slice(0, end))?.[1] ?? 0);
        await this.#fill(end + 4 + length);
        const whole = this.#take(end + 4 + length);
        return decoder.decode(whole);
      }
      if (!await this.#more()) return text;
    }
  }

  /** Reads the next server frame; undefined at the end of the connection. */
  async readFrame(): Promise<ServerFrame | undefined> {
    if (!await this.#fill(2)) return undefined;
    const lengthCode = this.#buffer[1] & 0x7f;
    const extended = lengthCode === 126 ? 2 : lengthCode === 127 ? 8 : 0;
    if (!await this.#fill(2 + extended)) return undefined;
    const view = new DataView(this.#buffer.buffer, this.#buffer.byteOffset);
    const length = extended === 2
      ? view.getUint16(2)
      : extended === 8
      ? Number(view.getBigUint64(2))
      : lengthCode;
    if (!await this.#fill(2 + extended + length)) return undefined;
    const bytes = this.#take(2 + extended + length);
    return {
      fin: (bytes[0] & 0x80) !== 0,
      opcode: bytes[0] & 0x0f,
      payload: bytes.slice(2 + extended),
    };
  }

  /** Reads frames until a close frame; its code and reason (undefined if TCP ends first). */
  async readClose(): Promise<{ code: number; reason: string } | undefined> {
    for (;;) {
      const frame = await this.readFrame();
      if (frame === undefined) return undefined;
      if (frame.opcode !== 8) continue;
      const view = new DataView(frame.payload.buffer);
      return {
        code: frame.payload.length >= 2 ? view.getUint16(0) : 1005,
        reason: decoder.decode(frame.payload.subarray(2)),
      };
    }
  }

  /** Reads text messages until one named `message`; returns its `data`. */
  async next(message: string): Promise<unknown[]> {
    for (;;) {
      const frame = await this.readFrame();
      if (frame === undefined) throw new Error(`connection ended before ${message}`);
      if (frame.opcode !== 1) continue;
      const parsed = JSON.parse(decoder.decode(frame.payload));
      if (parsed.message === message) return parsed.data;
    }
  }

  /** Reads and drops everything until the server closes; true if it did. */
  async readToEnd(): Promise<boolean> {
    while (await this.#more()) this.#buffer = new Uint8Array(0);
    return this.#eof;
  }

  /** Closes the TCP connection. */
  close(): void {
    try {
      this.conn.close();
    } catch {
      // closed already
    }
  }

  async #fill(bytes: number): Promise<boolean> {
    while (this.#buffer.length < bytes) if (!await this.#more()) return false;
    return true;
  }

  async #more(): Promise<boolean> {
    if (this.#eof) return false;
    const chunk = new Uint8Array(64 * 1024);
    let n: number | null;
    try {
      n = await this.conn.read(chunk);
    } catch {
      n = null; // reset by the server
    }
    if (n === null) {
      this.#eof = true;
      return false;
    }
    const joined = new Uint8Array(this.#buffer.length + n);
    joined.set(this.#buffer);
    joined.set(chunk.subarray(0, n), this.#buffer.length);
    this.#buffer = joined;
    return true;
  }

  #take(bytes: number): Uint8Array {
    const taken = this.#buffer.slice(0, bytes);
    this.#buffer = this.#buffer.slice(bytes);
    return taken;
  }
}
