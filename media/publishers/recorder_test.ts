import assert from "node:assert/strict";
import { silentLogger } from "../../core/log.ts";
import { run } from "../formats/test_fixtures.ts";
import type { MediaFrame } from "../frame.ts";
import { Stream } from "../stream.ts";
import { Recorder } from "./recorder.ts";

/** An Opus frame of 20 ms (a TOC byte for a 20 ms CELT frame, then filler). */
function opusFrame(pts: number): MediaFrame {
  const data = new Uint8Array(40);
  data[0] = 0xf8;
  return { trackId: 0, codec: "OPUS", pts, dts: pts, keyframe: true, data };
}

Deno.test("an audio frame stepping back in time is not written: the file's decode times rise", async () => {
  const folder = await Deno.makeTempDir();
  try {
    const stream = new Stream({
      name: "a",
      mediaSessionId: "m",
      tracks: [{
        id: 0,
        kind: "audio",
        codec: "OPUS",
        clockRate: 48000,
        sampleRate: 48000,
        channels: 2,
        config: { codec: "OPUS" },
      }],
      mediaProvider: "test",
      stopProvider: () => Promise.resolve(),
    });
    const recorder = new Recorder({
      folder,
      template: "{streamName}",
      names: { streamName: "a", mediaSessionId: "m" },
      log: silentLogger,
    });
    await recorder.add(stream);
    // 50 frames of 20 ms; the 26th steps 28 ms back, as a publisher's adjusted timeline did.
    for (let i = 0; i < 50; i++) {
      stream.push(opusFrame(i * 960 - (i === 25 ? 1344 + 960 : 0)));
      await new Promise((r) => setTimeout(r, 1));
    }
    stream.end();
    await recorder.stop();
    const [file] = recorder.closedFiles;
    const { out } = await run("ffprobe", [
      ...["-v", "error", "-select_streams", "a", "-show_entries", "packet=dts"],
      ...["-of", "csv=p=0", `${folder}/${file}`],
    ]);
    const dts = out.trim().split("\n").map(Number);
    assert.equal(dts.length, 49);
    for (let i = 1; i < dts.length; i++) assert.ok(dts[i] > dts[i - 1], `dts ${dts[i]} at ${i}`);
  } finally {
    await Deno.remove(folder, { recursive: true });
  }
});
