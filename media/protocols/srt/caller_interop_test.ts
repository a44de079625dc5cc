import assert from "node:assert/strict";
import { connectSrt } from "./caller.ts";
import { SrtRejectedError, SrtTimeoutError } from "./errors.ts";
import { RejectReason } from "./handshake.ts";
import { SrtListener } from "./listener.ts";
import { LossRelay } from "./loss_relay.ts";
import { makeTsClip, requireSrtTools, stopPeer, summarizeTs } from "./interop_fixtures.ts";

const dir = await Deno.makeTempDir({ prefix: "srt_caller_" });
const clip = `${dir}/clip.ts`;
await makeTsClip(clip, 4);
const clipBytes = await Deno.readFile(clip);
const expected = summarizeTs([clipBytes]);
const tsPacketBytes = 188;
/** Bytes per 10 ms to send the clip at about its own rate (~ 850 kbit/s), whole TS packets. */
const sliceBytes = tsPacketBytes * 6;

/** A UDP port that was free a moment ago on 127.0.0.1. */
function freeUdpPort(): number {
  const socket = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const { port } = socket.addr as Deno.NetAddr;
  socket.close();
  return port;
}

/** srt-live-transmit listening on `port` and writing what it receives to `out`. */
async function srtLiveTransmitListener(port: number, out: string, query = "") {
  const file = await Deno.open(out, { write: true, create: true, truncate: true });
  const process = new Deno.Command("srt-live-transmit", {
    args: ["-a:no", `srt://127.0.0.1:${port}?mode=listener&latency=120${query}`, "file://con"],
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const writing = process.stdout.pipeTo(file.writable);
  const stderr = new Response(process.stderr).text();
  await new Promise((resolve) => setTimeout(resolve, 300)); // bound
  return {
    async stop() {
      try {
        process.kill("SIGTERM");
      } catch {
        // exited already
      }
      await process.status;
      await writing;
      return await stderr;
    },
  };
}

async function publishClip(send: (bytes: Uint8Array) => void): Promise<void> {
  for (let off = 0; off < clipBytes.length; off += sliceBytes) {
    send(clipBytes.subarray(off, Math.min(clipBytes.length, off + sliceBytes)));
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

for (const passphrase of [undefined, "caller-side-secret"]) {
  Deno.test(`our caller publishes to srt-live-transmit${passphrase ? " encrypted, keys refreshed" : ""}, 2% loss`, async () => {
    requireSrtTools();
    const port = freeUdpPort();
    const out = `${dir}/slt_${passphrase ? "enc" : "clear"}.ts`;
    const peer = await srtLiveTransmitListener(
      port,
      out,
      passphrase ? `&passphrase=${passphrase}` : "",
    );
    const relay = await LossRelay.open({ targetPort: port, dropRatio: 0.02, reorderRatio: 0.01 });
    let stats;
    try {
      const connection = await connectSrt({
        hostname: "127.0.0.1",
        port: relay.port,
        streamId: "publish/ours",
        latencyMs: 200,
        passphrase,
        keyLengthBytes: 24,
        keyRefreshPackets: 100,
        keyPreAnnouncePackets: 20,
      });
      assert.equal(connection.encrypted, passphrase !== undefined);
      await publishClip((bytes) => connection.send(bytes));
      await new Promise((resolve) => setTimeout(resolve, 600)); // retransmissions, latency
      stats = connection.stats();
      await connection.close();
    } finally {
      await relay.close();
      await peer.stop();
    }
    const summary = summarizeTs([await Deno.readFile(out)]);
    assert.equal(summary.continuityErrors, 0);
    assert.equal(summary.videoFrames, expected.videoFrames);
    assert.ok(stats.sent.retransmitted > 0, "retransmitted");
    if (passphrase) assert.ok(stats.keyAnnouncements >= 4, `${stats.keyAnnouncements} KMREQs`);
    assert.ok(stats.rttMs < 50, `rtt ${stats.rttMs} ms`);
  });
}

Deno.test("our caller pulls from an ffmpeg listener", async () => {
  const port = freeUdpPort();
  const ffmpeg = new Deno.Command("ffmpeg", {
    args: [
      "-v",
      "error",
      "-re",
      "-i",
      clip,
      "-c",
      "copy",
      "-f",
      "mpegts",
      `srt://127.0.0.1:${port}?mode=listener&latency=120000&pkt_size=1316`,
    ],
    stdin: "null",
    stdout: "null",
    stderr: "piped",
  }).spawn();
  const peer = {
    processes: [ffmpeg],
    done: ffmpeg.output().then((o) => ({
      code: o.code,
      stderr: new TextDecoder().decode(o.stderr),
    })),
  };
  const chunks: Uint8Array[] = [];
  try {
    let connection;
    for (let attempt = 0; !connection; attempt++) {
      try {
        connection = await connectSrt({ hostname: "127.0.0.1", port, connectTimeoutMs: 500 });
      } catch (e) {
        if (!(e instanceof SrtTimeoutError) || attempt > 10) throw e;
      }
    }
    for await (const payload of connection.payloads()) chunks.push(payload);
    assert.equal(await connection.closed, "shutdown");
  } finally {
    await stopPeer(peer);
  }
  const summary = summarizeTs(chunks);
  assert.equal(summary.continuityErrors, 0);
  assert.ok(summary.videoFrames >= expected.videoFrames - 4, `${summary.videoFrames} frames`);
});

Deno.test("our caller: wrong passphrase is a rejection with the bad-secret code", async () => {
  const listener = await SrtListener.listen({
    hostname: "127.0.0.1",
    port: 0,
    passphrase: "listener-secret",
    onConnection: () => {},
  });
  try {
    await assert.rejects(
      connectSrt({ hostname: "127.0.0.1", port: listener.port, passphrase: "caller-secret!" }),
      (e) => e instanceof SrtRejectedError && e.reason === RejectReason.badSecret,
    );
    const ok = await connectSrt({
      hostname: "127.0.0.1",
      port: listener.port,
      passphrase: "listener-secret",
    });
    assert.equal(ok.encrypted, true);
    await ok.close();
  } finally {
    await listener.close();
  }
});

Deno.test("our caller: nobody listening is a timeout", async () => {
  await assert.rejects(
    connectSrt({ hostname: "127.0.0.1", port: freeUdpPort(), connectTimeoutMs: 400 }),
    SrtTimeoutError,
  );
});

Deno.test({ name: "cleanup", fn: () => Deno.remove(dir, { recursive: true }) });
