import assert from "node:assert/strict";
import { SrtListener } from "./listener.ts";
import type { SrtConnection } from "./connection.ts";
import { LossRelay } from "./loss_relay.ts";
import { ffmpegSend, makeTsClip, stopPeer, summarizeTs, waitUntil } from "./interop_fixtures.ts";

const dir = await Deno.makeTempDir({ prefix: "srt_loss_" });
const clip = `${dir}/clip.ts`;
await makeTsClip(clip, 5, 1500);
const expected = summarizeTs([await Deno.readFile(clip)]);

for (
  const { dropRatio, latencyMs } of [{ dropRatio: 0.01, latencyMs: 120 }, {
    dropRatio: 0.05,
    latencyMs: 300,
  }]
) {
  Deno.test(`${dropRatio * 100}% loss and reordering at ${latencyMs} ms: recovered, no TS errors`, async () => {
    const chunks: Uint8Array[] = [];
    let connection: SrtConnection | undefined;
    const listener = await SrtListener.listen({
      hostname: "127.0.0.1",
      port: 0,
      latencyMs,
      onConnection: (c) => {
        connection = c;
        c.onPayload = (payload) => chunks.push(payload);
      },
    });
    const relay = await LossRelay.open({
      targetPort: listener.port,
      dropRatio,
      reorderRatio: 0.02,
    });
    const peer = ffmpegSend(
      clip,
      `srt://127.0.0.1:${relay.port}?mode=caller&latency=${latencyMs * 1000}&pkt_size=1316`,
    );
    try {
      const result = await peer.done;
      assert.equal(result.code, 0, result.stderr);
      await waitUntil(() => connection !== undefined, 2000, "a connection");
      await Promise.race([connection!.closed, new Promise((r) => setTimeout(r, 3000))]);
    } finally {
      await stopPeer(peer);
      await relay.close();
      await listener.close();
    }
    const summary = summarizeTs(chunks);
    const stats = connection!.stats().received;
    assert.ok(relay.dropped > 0 && relay.reordered > 0);
    assert.ok(stats.retransmitted > 0, "retransmitted packets received");
    assert.ok(stats.lost >= relay.dropped, `${stats.lost} lost, relay dropped ${relay.dropped}`);
    // A packet given up mid-stream would break the TS continuity counters; only the very last
    // ones may be missing, when ffmpeg shuts down before their retransmission.
    assert.equal(summary.continuityErrors, 0);
    // ffmpeg's last frames may never be sent (see listener_interop_test.ts).
    assert.ok(summary.videoFrames >= expected.videoFrames - 4, `${summary.videoFrames} frames`);
  });
}

Deno.test({ name: "cleanup", fn: () => Deno.remove(dir, { recursive: true }) });
