/**
 * The CDN listener (`ports.cdn`): peer nodes open `/cdn/relay?stream=<name>[&profile=<p>]
 * &node=<their id>` as a WebSocket and receive the stream's media in the relay protocol.
 * A peer must present the CDN secret when one is configured.
 */
import type { Logger } from "../log.ts";
import { HttpListener } from "../http_listener.ts";
import { MediaServerError } from "../errors.ts";
import { serveRelay } from "../../media/publishers/relay_sender.ts";
import { type CdnNode, relayPath, secretHeader } from "./cdn_node.ts";

/** A running CDN listener. */
export class CdnListener {
  #http: HttpListener;
  #sockets: Set<WebSocket>;

  private constructor(http: HttpListener, sockets: Set<WebSocket>) {
    this.#http = http;
    this.#sockets = sockets;
  }

  /** Listens on `hostname:port` (0: an ephemeral port) for `node`'s peers. */
  static async start(
    options: { hostname: string; port: number; node: CdnNode; log: Logger },
  ): Promise<CdnListener> {
    const { node, log } = options;
    const sockets = new Set<WebSocket>();
    const handler = async (req: Request): Promise<Response> => {
      const url = new URL(req.url);
      if (url.pathname !== relayPath) return new Response("not found", { status: 404 });
      if (req.headers.get("upgrade")?.toLowerCase() !== "websocket") {
        return new Response("a WebSocket upgrade is expected", { status: 426 });
      }
      if (!node.admitsPeer(req.headers.get(secretHeader) ?? url.searchParams.get("secret"))) {
        return Response.json({ error: "forbidden", message: "wrong CDN secret" }, {
          status: 403,
        });
      }
      const name = url.searchParams.get("stream") ?? "";
      const profile = url.searchParams.get("profile") ?? undefined;
      const peer = url.searchParams.get("node") ?? "unknown";
      let source;
      try {
        source = await node.relaySource(name, profile);
      } catch (err) {
        const status = err instanceof MediaServerError ? err.status : 500;
        return Response.json({ error: "relay refused", message: (err as Error).message }, {
          status,
        });
      }
      const { socket, response } = Deno.upgradeWebSocket(req);
      sockets.add(socket);
      const abort = new AbortController();
      const untrack = node.trackServed(peer, (reason) => abort.abort(reason));
      serveRelay(socket, source, {
        log: log.child({ stream: name, to: peer }),
        signal: abort.signal,
      }).catch((err) => log.warn("relay failed", { stream: name, to: peer, err }))
        .finally(() => {
          untrack();
          sockets.delete(socket);
        });
      return response;
    };
    const http = await HttpListener.start({
      hostname: options.hostname,
      port: options.port,
      handler,
      onError: (err) => {
        log.error("cdn listener error", { err });
        return new Response("internal error", { status: 500 });
      },
      log,
    });
    return new CdnListener(http, sockets);
  }

  /** The port listened on. */
  get port(): number {
    return this.#http.port;
  }

  /** Closes every relay and stops listening. */
  async shutdown(): Promise<void> {
    for (const socket of this.#sockets) {
      try {
        socket.close(1001, "node stopping");
      } catch { /* already closing */ }
    }
    await this.#http.shutdown();
  }
}
