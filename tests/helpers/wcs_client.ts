/**
 * A small Web SDK protocol client for fast tests and benches: the same frames the SDK sends
 * (`connection`, `pong`, `sendData`, ...), with the server's frames queued for `next()`.
 */

/** A frame the server sent. */
export interface ServerFrame {
  readonly message: string;
  readonly data: unknown[];
}

/** How the socket closed. */
export interface CloseInfo {
  readonly code: number;
  readonly reason: string;
}

/** Options of WcsClient.open. */
export interface WcsClientOptions {
  /** Answer server pings with pong, as the SDK does (default true). */
  autoPong?: boolean;
  /** Handshake headers (e.g. Origin). */
  headers?: HeadersInit;
  /** HTTP client for WSS with a test CA. */
  client?: Deno.HttpClient;
}

/** What the SDK 2.0.276 sends as its `connection` object, minus browser-only values. */
export function sdkConnectionObject(extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    appKey: "defaultApp",
    mediaProviders: ["WebRTC", "MSE", "WSPlayer"],
    clientVersion: "2.0",
    clientOSVersion: "5.0 (X11)",
    clientBrowserVersion: "wcs_client (Deno)",
    msePacketizationVersion: 2,
    ...extra,
  };
}

/** One signaling connection. */
export class WcsClient {
  /** Every frame received, in order (a frame that is not JSON is kept as message "(raw)"). */
  readonly frames: ServerFrame[] = [];
  /** Frames not yet returned by next(); pings answered by autoPong are not kept here. */
  #unread: ServerFrame[] = [];
  /** Resolves when the socket has closed. */
  readonly closed: Promise<CloseInfo>;
  #socket: WebSocket;
  #wake?: () => void;
  #autoPong: boolean;

  private constructor(socket: WebSocket, autoPong: boolean) {
    this.#socket = socket;
    this.#autoPong = autoPong;
    const { promise, resolve } = Promise.withResolvers<CloseInfo>();
    this.closed = promise;
    socket.onmessage = (ev) => {
      let frame: ServerFrame;
      try {
        frame = JSON.parse(ev.data);
      } catch {
        frame = { message: "(raw)", data: [ev.data] };
      }
      this.frames.push(frame);
      if (frame.message === "ping" && this.#autoPong) this.send("pong", null);
      else this.#unread.push(frame);
      this.#wake?.();
    };
    socket.onclose = (ev) => {
      resolve({ code: ev.code, reason: ev.reason });
      this.#wake?.();
    };
    socket.onerror = () => {};
  }

  /** Opens a socket to `url` and waits until it is open. */
  static async open(url: string, options: WcsClientOptions = {}): Promise<WcsClient> {
    const socket = new WebSocket(url, { headers: options.headers, client: options.client });
    const client = new WcsClient(socket, options.autoPong ?? true);
    await new Promise<void>((resolve, reject) => {
      socket.onopen = () => resolve();
      client.closed.then(({ code, reason }) => reject(new Error(`closed ${code} ${reason}`)));
    });
    return client;
  }

  /** Opens a socket and completes the handshake; returns the client and getUserData's object. */
  static async connect(
    url: string,
    connection: Record<string, unknown> = sdkConnectionObject(),
    options: WcsClientOptions = {},
  ): Promise<{ client: WcsClient; userData: Record<string, unknown> }> {
    const client = await WcsClient.open(url, options);
    client.send("connection", connection);
    const [userData] = await client.next("getUserData");
    return { client, userData: userData as Record<string, unknown> };
  }

  /** True while the socket is open. */
  get open(): boolean {
    return this.#socket.readyState === WebSocket.OPEN;
  }

  /** Sends `{message, data: [payload]}`, as the SDK does. */
  send(message: string, payload: unknown): void {
    this.sendRaw(JSON.stringify({ message, data: [payload] }));
  }

  /** Sends a text frame as is. */
  sendRaw(text: string | Uint8Array<ArrayBuffer>): void {
    this.#socket.send(text);
  }

  /** Sends `sendData` and resolves with the DataStatusEvent object of its operationId. */
  async sendData(payload: unknown, timeoutMs?: number): Promise<Record<string, unknown>> {
    const operationId = crypto.randomUUID();
    this.send("sendData", { operationId, payload });
    for (;;) {
      const [status] = await this.next("DataStatusEvent", timeoutMs) as [Record<string, unknown>];
      if (status.operationId === operationId) return status;
    }
  }

  /**
   * The data of the next unread frame named `message` (earlier unread frames of other names
   * stay readable). Throws when the socket closes or `timeoutMs` passes first.
   */
  async next(message: string, timeoutMs = 5000): Promise<unknown[]> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const i = this.#unread.findIndex((f) => f.message === message);
      if (i >= 0) return this.#unread.splice(i, 1)[0].data;
      if (this.#socket.readyState === WebSocket.CLOSED) {
        throw new Error(`socket closed before ${message} arrived`);
      }
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`no ${message} within ${timeoutMs} ms`);
      let timer: ReturnType<typeof setTimeout> | undefined;
      await new Promise<void>((resolve) => {
        this.#wake = resolve;
        timer = setTimeout(resolve, left);
      });
      clearTimeout(timer);
    }
  }

  /** Names of every frame received so far (read ones included). */
  messages(): string[] {
    return this.frames.map((f) => f.message);
  }

  /** Closes the socket and waits until it is closed. */
  async close(): Promise<CloseInfo> {
    if (this.#socket.readyState <= WebSocket.OPEN) this.#socket.close(1000);
    return await this.closed;
  }
}
