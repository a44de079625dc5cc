import assert from "node:assert/strict";
import { silentLogger } from "../../core/log.ts";
import type { MediaFrame, Track } from "../frame.ts";
import { codecArgs, targetTrack } from "./audio_conversion.ts";
import { LiveTranscode } from "./live_transcode.ts";
import { createEngine } from "./select.ts";

/** A SIP call's G.722 track: 16 kHz coded under an 8 kHz RTP clock, 160 bytes a 20 ms. */
const g722: Track = {
  id: 0,
  kind: "audio",
  codec: "G722",
  clockRate: 8000,
  sampleRate: 16000,
  channels: 1,
};

Deno.test("G.722 frames convert live to Opus, AAC and PCMU on the input's timeline", async () => {
  const engine = createEngine("native");
  try {
    const raw = await new Deno.Command("ffmpeg", {
      args: [
        ...["-v", "error", "-f", "lavfi", "-i", "sine=frequency=1000:duration=1"],
        ...["-ar", "16000", "-ac", "1", "-c:a", "g722", "-f", "g722", "-"],
      ],
    }).output();
    assert.equal(raw.stdout.length, 8000);
    for (const target of ["OPUS", "AAC", "PCMU"] as const) {
      const output = targetTrack(g722, target, engine);
      const got: MediaFrame[] = [];
      const transcode = new LiveTranscode({
        engine,
        input: g722,
        output,
        codecArgs: codecArgs(output),
        onFrame: (f) => got.push(f),
        log: silentLogger,
      });
      for (let i = 0; i < 50; i++) {
        const data = raw.stdout.slice(i * 160, i * 160 + 160);
        transcode.push({
          trackId: 0,
          codec: "G722",
          pts: i * 160,
          dts: i * 160,
          keyframe: true,
          data,
        });
        await new Promise((r) => setTimeout(r, 20));
      }
      await new Promise((r) => setTimeout(r, 500));
      await transcode.close();
      // Most of the second comes out (the encoders hold their last frame or two).
      const spanSec = (got.at(-1)!.pts - got[0].pts) / output.clockRate;
      assert.ok(got.every((f) => f.codec === target), target);
      assert.ok(spanSec > 0.8 && spanSec <= 1, `${target}: ${spanSec} s`);
    }
  } finally {
    await engine.close();
  }
});
