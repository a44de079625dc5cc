import assert from "node:assert/strict";
import { SrtListener } from "./listener.ts";
import type { SrtConnection } from "./connection.ts";
import { LossRelay } from "./loss_relay.ts";
import { ffmpegReceive, makeTsClip, stopPeer, summarizeTs } from "./interop_fixtures.ts";

const dir = await Deno.makeTempDir({ prefix: "srt_play_" });
const clip = `${dir}/clip.ts`;
// Longer than ffmpeg probes (5 s of stream) plus what it records.
await makeTsClip(clip, 10);
const tsPacketBytes = 188;

/** Plays the clip in real time on `connection` in whole TS packets, until it ends or closes. */
async function play(connection: SrtConnection): Promise<void> {
  const feeder = new Deno.Command("ffmpeg", {
    args: ["-v", "error", "-re", "-i", clip, "-c", "copy", "-f", "mpegts", "-"],
    stdin: "null",
    stdout: "piped",
    stderr: "null",
  }).spawn();
  let carry = new Uint8Array(0);
  const closed = connection.closed.then(() => feeder.kill("SIGTERM"));
  for await (const chunk of feeder.stdout) {
    const joined = new Uint8Array(carry.length + chunk.length);
    joined.set(carry);
    joined.set(chunk, carry.length);
    const whole = joined.length - (joined.length % tsPacketBytes);
    connection.send(joined.subarray(0, whole));
    carry = joined.slice(whole);
  }
  await feeder.status;
  await Promise.race([closed, new Promise((r) => setTimeout(r, 0))]);
}

const cases = [
  { dropRatio: 0, passphrase: undefined },
  { dropRatio: 0.02, passphrase: undefined },
  { dropRatio: 0.02, passphrase: "playback-secret" },
];
for (const { dropRatio, passphrase } of cases) {
  const name = `${dropRatio * 100}% loss${passphrase ? ", encrypted" : ""}`;
  Deno.test(`SRT playback (m=request) to ffmpeg, ${name}: H.264+AAC decodes`, async () => {
    const playing: Promise<void>[] = [];
    let connection: SrtConnection | undefined;
    const listener = await SrtListener.listen({
      hostname: "127.0.0.1",
      port: 0,
      accept: (info) =>
        /m=request/.test(info.streamId)
          ? { accept: true, passphrase }
          : { accept: false, reason: 1405 },
      onConnection: (c) => {
        connection = c;
        playing.push(play(c));
      },
    });
    const relay = await LossRelay.open({ targetPort: listener.port, dropRatio });
    const out = `${dir}/out_${dropRatio}_${passphrase ? "enc" : "clear"}.ts`;
    const streamId = "#!::r=vod1,m=request"; // ffmpeg 5.1 does not URL-decode it
    const reader = ffmpegReceive(
      `srt://127.0.0.1:${relay.port}?mode=caller&latency=200000&streamid=${streamId}` +
        (passphrase ? `&passphrase=${passphrase}&pbkeylen=32` : ""),
      out,
      3,
    );
    try {
      const result = await reader.done;
      assert.equal(result.code, 0, result.stderr);
    } finally {
      await stopPeer(reader);
      await connection?.close();
      await Promise.all(playing);
      await relay.close();
      await listener.close();
    }
    assert.equal(connection?.streamId, "#!::r=vod1,m=request");
    const summary = summarizeTs([await Deno.readFile(out)]);
    assert.ok(summary.videoFrames >= 70, `${summary.videoFrames} video frames in 3 s`);
    assert.ok(summary.audioFrames >= 100, `${summary.audioFrames} audio frames in 3 s`);
    const check = await new Deno.Command("ffmpeg", {
      args: ["-v", "error", "-i", out, "-f", "null", "-"],
      stderr: "piped",
    }).output();
    assert.equal(new TextDecoder().decode(check.stderr), "", "decodes without errors");
    assert.equal(connection!.encrypted, passphrase !== undefined);
    if (dropRatio > 0) assert.ok(connection!.stats().sent.retransmitted > 0, "retransmitted");
  });
}

Deno.test({ name: "cleanup", fn: () => Deno.remove(dir, { recursive: true }) });
