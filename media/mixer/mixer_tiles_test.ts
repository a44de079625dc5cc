/**
 * A mixer's inputs are decoded at the size of their tiles: an input alone in a 640x360 mix
 * is decoded at its own 640x360; when a second input halves its tile, its decoder scales to
 * fit the tile (and the new input's does from the start); when that input leaves, the first
 * goes back to its own size. One decoder per input runs once each change is handed over.
 */
import assert from "node:assert/strict";
import { silentLogger } from "../../core/log.ts";
import type { RegisteredStream } from "../stream_record.ts";
import { DecoderHub } from "../transcoder/decoded_source.ts";
import { clipSource, WatchedEngine } from "../transcoder/test_source.ts";
import { Mixer } from "./mixer.ts";

const delay = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function until(what: string, check: () => boolean, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await delay(20);
  }
}

Deno.test("mixer: each input is decoded at its tile's size, re-sized as the layout changes", async () => {
  const [a, b] = await Promise.all([
    clipSource(640, 360, 8, "a"),
    clipSource(640, 360, 8, "b"),
  ]);
  const engine = new WatchedEngine();
  const hub = new DecoderHub(engine, silentLogger);
  const registered = new Set<RegisteredStream>();
  const mixer = await Mixer.create({
    name: "mix",
    mediaSessionId: "mix-id",
    settings: {
      width: 640,
      height: 360,
      fps: 15,
      keyFrameInterval: 30,
      videoBitrateKbps: 0,
      sampleRate: 48000,
      channels: 2,
      audioBitrateKbps: 0,
    },
    hasVideo: true,
    hasAudio: false,
    layout: "grid",
    streams: {
      add: (stream) => registered.add(stream),
      remove: (stream) => registered.delete(stream),
      published: () => undefined,
    },
    hub,
    engine,
    log: silentLogger,
    onEnded: () => {},
  });
  // Video decoders write raw video; the mixer's encoder reads it.
  const decoders = () => engine.jobs.filter((job) => job.output.includes("rawvideo"));
  const filterOf = (args: string[]) => args.includes("-vf") ? args[args.indexOf("-vf") + 1] : "";
  try {
    mixer.add(a.stream, { audioLevel: 100, videoMuted: false });
    for (let i = 0; i < a.frames.length; i++) {
      a.stream.push(a.frames[i]);
      b.stream.push(b.frames[i]);
      await delay(40);
      if (i === 30) mixer.add(b.stream, { audioLevel: 100, videoMuted: false });
      if (i === 110) await mixer.remove("b");
    }
    await until("the last handover", () => decoders().filter((job) => job.running).length === 1);
    // a alone (its size), a and b side by side in 320x360 tiles (scaled), a alone again.
    assert.deepEqual(decoders().map((job) => filterOf(job.output).includes("320/iw\\,360/ih")), [
      false,
      true,
      true,
      false,
    ]);
    assert.equal(filterOf(decoders()[0].output), "");
    assert.ok(mixer.stats.videoFrames > 80, `${mixer.stats.videoFrames} frames mixed`);
  } finally {
    await mixer.stop("test over");
    await hub.close();
    await engine.close();
  }
});
