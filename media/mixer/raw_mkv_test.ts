import assert from "node:assert/strict";
import { mkvAudioTrack, mkvVideoTrack, RawMkvWriter } from "./raw_mkv.ts";

Deno.test("ffmpeg reads a raw Matroska stream's pictures and sound on their times, across clusters", async () => {
  const writer = new RawMkvWriter({
    width: 64,
    height: 36,
    fps: 25,
    sampleRate: 48000,
    channels: 2,
  });
  const parts: Uint8Array[] = [writer.header()];
  const picture = new Uint8Array(64 * 36 * 3 / 2).fill(100);
  const pcm = new Uint8Array(960 * 4);
  // 12 s from 7 s on: clusters of 5 s; each picture written ahead of the sound before its
  // time, whose blocks then fall before the cluster a picture opened.
  for (let ms = 7000; ms < 19000; ms += 20) {
    if (ms % 40 === 0) {
      parts.push(writer.blockHeader(mkvVideoTrack, ms + 30, picture.length), picture);
    }
    parts.push(writer.blockHeader(mkvAudioTrack, ms, pcm.length), pcm);
  }
  const child = new Deno.Command("ffprobe", {
    args: [
      ...[
        "-v",
        "error",
        "-show_entries",
        "packet=stream_index,pts_time:stream=codec_name,pix_fmt,avg_frame_rate",
      ],
      // Read as the A/V encoder's ffmpeg reads it: no packet analysed for the frame rate.
      ...["-probesize", "32", "-analyzeduration", "0", "-of", "csv=p=0", "-i", "pipe:0"],
    ],
    stdin: "piped",
    stdout: "piped",
  }).spawn();
  const writing = (async () => {
    const writer = child.stdin.getWriter();
    for (const part of parts) await writer.write(part);
    await writer.close();
  })();
  const [{ stdout, success }] = await Promise.all([child.output(), writing]);
  assert.ok(success);
  const lines = new TextDecoder().decode(stdout).trim().split("\n");
  const times = (stream: number) =>
    lines.filter((l) => l.startsWith(`${stream},`)).map((l) =>
      Math.round(Number(l.split(",")[1]) * 1000)
    );
  // The frame rate the encoder's rate control spends the bitrate over.
  assert.ok(lines.includes("rawvideo,yuv420p,25/1"), lines.slice(-3).join(" | "));
  assert.ok(lines.some((l) => l.startsWith("pcm_s16le")));
  assert.deepEqual(times(0), Array.from({ length: 300 }, (_, i) => 7030 + 40 * i));
  assert.deepEqual(times(1), Array.from({ length: 600 }, (_, i) => 7000 + 20 * i));
});
