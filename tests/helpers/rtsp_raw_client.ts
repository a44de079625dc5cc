/**
 * A bare RTSP connection for the RTSP server's protocol tests: writes request text (or any
 * bytes) and reads back responses and interleaved frames with the shared message parser.
 */
import {
  type InterleavedFrame,
  type RtspResponse,
  RtspStreamParser,
} from "../../media/protocols/rtsp/message.ts";

/** A raw connection to an RTSP server. */
export class RawRtspClient {
  readonly #conn: Deno.Conn;
  readonly #parser = new RtspStreamParser();
  readonly #buf = new Uint8Array(64 * 1024);
  #cseq = 0;
  /** A read that outlived its wait: the next wait takes it over. */
  #pendingRead: Promise<number | null> | undefined;
  /** Interleaved frames read while waiting for responses. */
  readonly frames: InterleavedFrame[] = [];

  private constructor(conn: Deno.Conn) {
    this.#conn = conn;
  }

  /** Connects to 127.0.0.1:`port`. */
  static async connect(port: number): Promise<RawRtspClient> {
    return new RawRtspClient(await Deno.connect({ hostname: "127.0.0.1", port }));
  }

  /** Writes bytes as they are. */
  async writeRaw(bytes: Uint8Array | string): Promise<void> {
    const data = typeof bytes === "string" ? new TextEncoder().encode(bytes) : bytes;
    for (let at = 0; at < data.length;) at += await this.#conn.write(data.subarray(at));
  }

  /** Sends a request with the next CSeq, `headers` and `body`; resolves with its response. */
  async request(
    method: string,
    url: string,
    headers: Record<string, string> = {},
    body = "",
  ): Promise<RtspResponse> {
    let text = `${method} ${url} RTSP/1.0\r\nCSeq: ${++this.#cseq}\r\n`;
    for (const [name, value] of Object.entries(headers)) text += `${name}: ${value}\r\n`;
    if (body !== "") text += `Content-Length: ${new TextEncoder().encode(body).length}\r\n`;
    await this.writeRaw(text + "\r\n" + body);
    const response = await this.response();
    if (!response) throw new Error(`connection closed before the answer to ${method}`);
    return response;
  }

  /** The next response (interleaved frames before it are kept), or undefined at the end. */
  async response(timeoutMs = 5000): Promise<RtspResponse | undefined> {
    for (;;) {
      const message = this.#parser.next();
      if (message?.kind === "response") return message;
      if (message?.kind === "interleaved") {
        this.frames.push(message);
        continue;
      }
      if (!await this.#read(timeoutMs)) return undefined;
    }
  }

  /** Reads until `count` interleaved frames are held; false when the connection ended. */
  async waitFrames(count: number, timeoutMs = 5000): Promise<boolean> {
    while (this.frames.length < count) {
      const message = this.#parser.next();
      if (message?.kind === "interleaved") this.frames.push(message);
      else if (!message && !await this.#read(timeoutMs)) return false;
    }
    return true;
  }

  /** True when the server closes the connection within `timeoutMs` (what it sends is read). */
  async closedWithin(timeoutMs: number): Promise<boolean> {
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline) {
      if (!await this.#read(deadline - Date.now()).catch(() => false)) return true;
    }
    return false;
  }

  /** Reads one chunk into the parser; false at the end of the connection. */
  async #read(timeoutMs: number): Promise<boolean> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const timeout = new Promise<"timeout">((resolve) => {
      timer = setTimeout(() => resolve("timeout"), Math.max(0, timeoutMs));
    });
    try {
      this.#pendingRead ??= this.#conn.read(this.#buf).catch(() => null);
      const n = await Promise.race([this.#pendingRead, timeout]);
      if (n === "timeout") throw new Error(`nothing read within ${timeoutMs} ms`);
      this.#pendingRead = undefined;
      if (n === null) return false;
      this.#parser.push(this.#buf.subarray(0, n));
      return true;
    } finally {
      clearTimeout(timer);
    }
  }

  /** Closes the connection and waits for a read in flight to end. Idempotent. */
  async close(): Promise<void> {
    try {
      this.#conn.close();
    } catch {
      // Closed already.
    }
    await this.#pendingRead;
  }
}
