/// <reference lib="deno.worker" />
/**
 * Entry of the SendEngine's Workers: one Fanout (FFI socket and subscribers) per Worker,
 * driven by the engine's messages in order. FFI permission is inherited from the server.
 */
import { Fanout } from "./fanout.ts";
import type { FromWorker, ToWorker } from "./send_messages.ts";

let fanout: Fanout | undefined;

function reply(message: FromWorker): void {
  self.postMessage(message);
}

self.onmessage = (event: MessageEvent<ToWorker>) => {
  const message = event.data;
  switch (message.type) {
    case "start":
      try {
        fanout = new Fanout(message.settings);
        reply({
          type: "ready",
          port: fanout.sender.port,
          family: fanout.sender.family,
          srtpBackend: fanout.srtpBackend,
          gso: fanout.sender.gso,
        });
      } catch (err) {
        reply({ type: "failed", error: (err as Error).message });
      }
      return;
    case "add":
      try {
        fanout?.add(message.subscriber);
      } catch (err) {
        reply({ type: "error", handle: message.subscriber.handle, error: (err as Error).message });
      }
      return;
    case "remove":
      fanout?.remove(message.handle);
      return;
    case "join":
      fanout?.join(message.handle, message.membership);
      return;
    case "leave":
      fanout?.leave(message.handle, message.group);
      return;
    case "batch":
      fanout?.send(new Uint8Array(message.buffer));
      return;
    case "stats":
      reply({ type: "stats", request: message.request, stats: fanout?.stats() ?? [] });
      return;
    case "close":
      fanout?.close();
      fanout = undefined;
      reply({ type: "closed" });
      return;
  }
};
