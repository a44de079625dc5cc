/**
 * bench/srt.ts's subject in a process of its own (so its CPU is measured alone): an SRT
 * listener on 127.0.0.1 that takes one caller's payloads and discards them. Prints
 * `port <n>` once bound, then `gap <ms>` whenever payloads resume after a pause longer than
 * 100 ms, and `bytes <n> <dropped> <retransmitted>` each second (payload bytes, packets
 * given up as too late, retransmitted packets received).
 * Run: deno run -A bench/support/srt_receiver.ts <latencyMs>
 */
import { SrtListener } from "../../media/protocols/srt/listener.ts";

/** Pauses in delivery shorter than this are the stream's own rhythm, not an outage, ms. */
const gapReportMs = 100;

const latencyMs = Number(Deno.args[0] ?? 120);
let bytes = 0;
let lastDeliveryMs = 0;
const listener = await SrtListener.listen({
  hostname: "127.0.0.1",
  port: 0,
  latencyMs,
  onConnection: (connection) => {
    connection.onPayload = (payload) => {
      const now = performance.now();
      if (lastDeliveryMs && now - lastDeliveryMs > gapReportMs) {
        console.log(`gap ${Math.round(now - lastDeliveryMs)}`);
      }
      lastDeliveryMs = now;
      bytes += payload.length;
    };
  },
});
console.log(`port ${listener.port}`);
setInterval(() => {
  const received = listener.connections()[0]?.stats().received;
  console.log(`bytes ${bytes} ${received?.dropped ?? 0} ${received?.retransmitted ?? 0}`);
}, 1000);
