import assert from "node:assert/strict";
import { buildWasm } from "../../wasm/build.ts";
import { AudioMixer } from "./audio_mixer.ts";
import { softClipReference } from "./audio_reference.ts";

await buildWasm({ ifStale: true });

/** 20 ms of a constant Int16 level, `channels` interleaved. */
function constant(value: number, sampleRate: number, channels: number): Int16Array {
  return new Int16Array((sampleRate / 50) * channels).fill(value);
}

function sine(hz: number, amplitude: number, sampleRate: number, start: number, frames: number) {
  return Float32Array.from(
    { length: frames },
    (_, i) => amplitude * Math.sin(2 * Math.PI * hz * (start + i) / sampleRate),
  );
}

Deno.test("two inputs mix with their gains into 20 ms frames with monotonic pts", async () => {
  using mixer = await AudioMixer.create({ sampleRate: 48000, channels: 2, jitterDelayMs: 20 });
  mixer.addInput("a", { sampleRate: 48000, channels: 2 });
  mixer.addInput("b", { sampleRate: 48000, channels: 1, gain: 0.5 });
  for (let tick = 0; tick < 5; tick++) {
    mixer.push("a", constant(4000, 48000, 2));
    mixer.push("b", constant(-2000, 48000, 1));
    const frame = mixer.mix();
    assert.equal(frame.pts, tick * 960);
    assert.equal(frame.samples.length, 1920);
    // 4000 + 0.5 x -2000 = 3000, in Int16 of 32767 per full scale.
    const expected = Math.round(3000 / 32768 * 32767);
    assert.ok(frame.samples.every((s) => Math.abs(s - expected) <= 1), `tick ${tick}`);
  }
  assert.ok(Math.abs(mixer.levels("a").rms - 4000 / 32768) < 1e-5);
  assert.ok(Math.abs(mixer.levels("b").peak - 2000 / 32768) < 1e-5);
});

Deno.test("loud inputs are soft-clipped, never wrapped", async () => {
  using mixer = await AudioMixer.create({ sampleRate: 16000, channels: 1, jitterDelayMs: 20 });
  for (const id of ["a", "b", "c"]) {
    mixer.addInput(id, { sampleRate: 16000, channels: 1 });
    mixer.push(id, constant(30000, 16000, 1));
  }
  const frame = mixer.mix();
  const expected = Math.round(softClipReference(3 * 30000 / 32768) * 32767);
  assert.ok(frame.samples.every((s) => Math.abs(s - expected) <= 1 && s > 0));
});

Deno.test("jittery arrival plays without gaps once the jitter buffer is filled", async () => {
  using mixer = await AudioMixer.create({
    sampleRate: 48000,
    channels: 1,
    jitterDelayMs: 60,
  });
  mixer.addInput("a", { sampleRate: 48000, channels: 1 });
  // Chunk k is due at tick k and arrives 0 to 2 ticks (40 ms) late, in order.
  const lateTicks = [0, 2, 1, 0, 2, 2, 0, 1, 0, 2, 1, 1, 0, 2, 0, 0, 1, 2, 2, 0, 1, 0, 0, 2];
  const arrival: number[] = [];
  lateTicks.forEach((late, k) => arrival.push(Math.max(arrival[k - 1] ?? 0, k + late)));
  const outputs: number[] = [];
  let sent = 0;
  for (let tick = 0; tick < lateTicks.length; tick++) {
    while (sent < arrival.length && arrival[sent] === tick) {
      mixer.push("a", sine(440, 0.5, 48000, 960 * sent, 960));
      sent++;
    }
    mixer.mix();
    outputs.push(mixer.levels("a").rms);
  }
  assert.equal(mixer.stats.underruns, 0);
  const playing = outputs.slice(outputs.findIndex((rms) => rms > 0));
  assert.ok(playing.length >= lateTicks.length - 3);
  for (const rms of playing) assert.ok(Math.abs(rms - 0.5 / Math.SQRT2) < 0.01, `rms ${rms}`);
});

Deno.test("an input that runs dry plays silence and buffers again", async () => {
  using mixer = await AudioMixer.create({ sampleRate: 8000, channels: 1, jitterDelayMs: 40 });
  mixer.addInput("a", { sampleRate: 8000, channels: 1 });
  mixer.push("a", constant(1000, 8000, 1));
  assert.ok(mixer.mix().samples.every((s) => s === 0), "buffering");
  mixer.push("a", constant(1000, 8000, 1));
  assert.ok(mixer.mix().samples.every((s) => s === 1000), "playing");
  assert.ok(mixer.mix().samples.every((s) => s === 1000), "playing");
  assert.ok(mixer.mix().samples.every((s) => s === 0), "dry");
  assert.equal(mixer.stats.underruns, 1);
  mixer.push("a", constant(1000, 8000, 1));
  assert.ok(mixer.mix().samples.every((s) => s === 0), "buffering again");
});

Deno.test("inputs at other rates and channel counts are converted", async () => {
  using mixer = await AudioMixer.create({ sampleRate: 48000, channels: 2, jitterDelayMs: 40 });
  mixer.addInput("narrow", { sampleRate: 16000, channels: 1 });
  mixer.addInput("cd", { sampleRate: 44100, channels: 2, gain: 0 });
  const levels: number[] = [];
  for (let tick = 0; tick < 10; tick++) {
    mixer.push("narrow", sine(1000, 0.25, 16000, 320 * tick, 320));
    mixer.push("cd", new Float32Array(882 * 2).fill(0.9));
    const frame = mixer.mix();
    const left = frame.samples.filter((_, i) => i % 2 === 0);
    const right = frame.samples.filter((_, i) => i % 2 === 1);
    assert.deepEqual(left, right, "mono is copied to both sides");
    if (tick >= 4) levels.push(mixer.levels("narrow").rms);
  }
  // The "cd" input plays too (gain 0): 44.1 kHz chunks resampled keep it fed.
  assert.ok(mixer.levels("cd").rms > 0.85);
  for (const rms of levels) assert.ok(Math.abs(rms - 0.25 / Math.SQRT2) < 0.01, `rms ${rms}`);
  assert.equal(mixer.stats.underruns, 0);
});

Deno.test("input overflow drops the oldest audio", async () => {
  using mixer = await AudioMixer.create({
    sampleRate: 8000,
    channels: 1,
    jitterDelayMs: 20,
    maxDelayMs: 40,
  });
  mixer.addInput("a", { sampleRate: 8000, channels: 1 });
  for (let i = 1; i <= 3; i++) mixer.push("a", constant(i * 100, 8000, 1));
  assert.equal(mixer.stats.droppedFrames, 160);
  assert.ok(mixer.mix().samples.every((s) => s === 200));
});

Deno.test("start mixes on the clock until closed", async () => {
  using mixer = await AudioMixer.create({ sampleRate: 48000, channels: 2 });
  const pts: number[] = [];
  await new Promise<void>((resolve, reject) => {
    mixer.start((frame) => {
      pts.push(frame.pts);
      if (pts.length === 3) resolve();
    }, reject);
  });
  mixer.close();
  assert.deepEqual(pts.slice(0, 3), [0, 960, 1920]);
});

Deno.test("align drops the oldest sound beyond the target, or puts silence before it", async () => {
  using mixer = await AudioMixer.create({ sampleRate: 48000, channels: 1, jitterDelayMs: 20 });
  mixer.addInput("a", { sampleRate: 48000, channels: 1 });
  const loud = (frame: { samples: Int16Array }) => frame.samples.every((s) => s !== 0);
  // 100 ms queued, 40 ms wanted: the oldest 60 ms go, two frames of sound are left.
  for (let i = 0; i < 5; i++) mixer.push("a", constant(1000, 48000, 1));
  mixer.align("a", 1920, 0);
  assert.deepEqual([0, 1, 2].map(() => loud(mixer.mix())), [true, true, false]);
  // 20 ms queued, 60 ms wanted: 40 ms of silence play first, then the sound.
  mixer.push("a", constant(1000, 48000, 1));
  mixer.align("a", 2880, 0);
  const silent = (frame: { samples: Int16Array }) => frame.samples.every((s) => s === 0);
  assert.deepEqual(
    [0, 1, 2].map(() => {
      const frame = mixer.mix();
      return silent(frame) ? "silence" : loud(frame) ? "sound" : "mixed";
    }),
    ["silence", "silence", "sound"],
  );
  // Within the tolerance nothing moves.
  mixer.push("a", constant(1000, 48000, 1));
  mixer.align("a", 1200, 300);
  assert.ok(loud(mixer.mix()));
});

Deno.test("minus-one mixes: each marked input gets the mix without itself", async () => {
  using mixer = await AudioMixer.create({ sampleRate: 48000, channels: 1, jitterDelayMs: 20 });
  mixer.addInput("a", { sampleRate: 48000, channels: 1, minusOne: true });
  mixer.addInput("b", { sampleRate: 48000, channels: 1, minusOne: true, gain: 0.5 });
  mixer.addInput("c", { sampleRate: 48000, channels: 1 });
  mixer.push("a", constant(1000, 48000, 1));
  mixer.push("b", constant(4000, 48000, 1));
  mixer.push("c", constant(300, 48000, 1));
  const frame = mixer.mix();
  const level = (samples: Int16Array | undefined) => Math.round(samples![0] * 32768 / 32767);
  assert.equal(level(frame.samples), 3300);
  assert.equal(level(frame.minusOne.get("a")), 2300);
  assert.equal(level(frame.minusOne.get("b")), 1300);
  assert.equal(frame.minusOne.has("c"), false);
  assert.ok(frame.minusOne.get("a")!.every((s) => s === frame.minusOne.get("a")![0]));
});
