import assert from "node:assert/strict";
import type { MediaFrame, Track } from "./frame.ts";
import { Stream } from "./stream.ts";

const tracks: Track[] = [
  { id: 0, kind: "video", codec: "H264", clockRate: 90000, width: 320, height: 240 },
  { id: 1, kind: "audio", codec: "AAC", clockRate: 48000, sampleRate: 48000, channels: 1 },
];

function testStream(): Stream {
  return new Stream({
    name: "s",
    mediaSessionId: "id",
    tracks,
    mediaProvider: "test",
    stopProvider: () => Promise.resolve(),
  });
}

/** Video frame n of a 25 fps stream with a keyframe every `gop` frames; `data[0]` is n. */
function video(n: number, gop = 10): MediaFrame {
  return {
    trackId: 0,
    codec: "H264",
    pts: n * 3600,
    dts: n * 3600,
    keyframe: n % gop === 0,
    data: new Uint8Array([n & 0xff]),
  };
}

function audio(n: number): MediaFrame {
  return {
    trackId: 1,
    codec: "AAC",
    pts: n * 1024,
    dts: n * 1024,
    keyframe: true,
    data: new Uint8Array(4),
  };
}

Deno.test("a slow reader drops and resumes at a keyframe without blocking the provider or a fast reader", async () => {
  const stream = testStream();
  const slow = stream.reader(8);
  const fast = stream.reader(8);
  const fastSeen: number[] = [];
  const consume = (async () => {
    for await (const frame of fast) fastSeen.push(frame.data[0]);
  })();
  const started = performance.now();
  for (let n = 0; n < 95; n++) {
    stream.push(video(n));
    // The fast reader runs between pushes; the slow one never reads during the burst.
    await new Promise((r) => setTimeout(r, 0));
  }
  const pushMs = performance.now() - started;
  stream.end();
  await consume;
  assert.deepEqual(fastSeen, Array.from({ length: 95 }, (_, n) => n), "fast reader lost frames");
  assert.ok(pushMs < 500, `provider was slowed down: ${pushMs} ms`);
  const slowSeen: MediaFrame[] = [];
  for await (const frame of slow) slowSeen.push(frame);
  assert.ok(slow.dropped > 0, "the slow reader dropped nothing");
  // Frames 90.. are the GOP after the last drop: the reader resumed at keyframe 90.
  assert.deepEqual(slowSeen.map((f) => f.data[0]), [90, 91, 92, 93, 94]);
});

Deno.test("a late reader starts at the last keyframe, with the frames since then", async () => {
  const stream = testStream();
  for (let n = 0; n < 25; n++) {
    stream.push(video(n));
    stream.push(audio(n));
  }
  const late = stream.reader();
  stream.push(video(25));
  stream.end();
  const seen: MediaFrame[] = [];
  for await (const frame of late) seen.push(frame);
  assert.equal(seen[0].trackId, 0);
  assert.ok(seen[0].keyframe);
  assert.equal(seen[0].data[0], 20, "must start at the last keyframe (frame 20)");
  assert.deepEqual(seen.filter((f) => f.trackId === 0).map((f) => f.data[0]), [
    20,
    21,
    22,
    23,
    24,
    25,
  ]);
  assert.equal(seen.filter((f) => f.trackId === 1).length, 5, "audio since the keyframe is kept");
});

Deno.test("a reader of a stream without a cached keyframe waits for the next one", async () => {
  const stream = testStream();
  const reader = stream.reader();
  stream.push(video(1));
  stream.push(audio(1));
  stream.push(video(10));
  stream.end();
  const seen = [];
  for await (const frame of reader) seen.push(frame.data[0]);
  assert.deepEqual(seen, [10]);
});

Deno.test("the stream measures fps and bitrate from what it carries", async () => {
  const stream = testStream();
  for (let n = 0; n < 30; n++) {
    stream.push({ ...video(n), data: new Uint8Array(1000) });
    await new Promise((r) => setTimeout(r, 40));
  }
  const record = stream.record({ metrics: true });
  stream.end();
  assert.equal(record.fps, 25);
  assert.ok(record.bitrate >= 150 && record.bitrate <= 250, `bitrate ${record.bitrate} kbps`);
  assert.equal(record.gop, 10);
  assert.equal(record.width, 320);
  assert.equal(record.videoCodec, "H264");
  assert.equal(record.audioCodec, "AAC");
  assert.equal(record.metrics?.VIDEO_K_FRAMES, 3);
});

Deno.test("poll: queued frames without waiting, one wake from a microtask, drained at the end", async () => {
  const stream = testStream();
  const reader = stream.reader(8);
  let wakes = 0;
  const wake = () => wakes++;
  assert.equal(reader.poll(wake), undefined);
  stream.push(video(0));
  stream.push(video(1));
  assert.equal(wakes, 0, "a wake never runs inside the provider's push");
  await Promise.resolve();
  assert.equal(wakes, 1, "one wake for the frames pushed meanwhile");
  assert.equal(reader.poll(wake)?.data[0], 0);
  assert.equal(reader.poll(wake)?.data[0], 1);
  assert.equal(reader.poll(wake), undefined);
  assert.equal(reader.drained, false);
  stream.end();
  await Promise.resolve();
  assert.equal(wakes, 2, "the end wakes the reader too");
  assert.equal(reader.poll(wake), undefined);
  assert.equal(reader.drained, true);
});

Deno.test("poll: a reader that falls behind drops to the next keyframe like an iterating one", async () => {
  const stream = testStream();
  const reader = stream.reader(4);
  // Frame 4 overflows the queue of 4; frames up to the keyframe 10 are skipped.
  for (let n = 0; n < 13; n++) stream.push(video(n, 10));
  await Promise.resolve();
  const seen: number[] = [];
  for (let frame = reader.poll(() => {}); frame; frame = reader.poll(() => {})) {
    seen.push(frame.data[0]);
  }
  assert.deepEqual(seen, [10, 11, 12]);
  assert.equal(reader.dropped, 10);
  stream.end();
});

Deno.test("a reader that cannot start from the cached GOP asks the provider for a keyframe", () => {
  let requests = 0;
  class AskingStream extends Stream {
    override requestKeyframe(): void {
      requests++;
    }
  }
  const stream = new AskingStream({
    name: "s",
    mediaSessionId: "m",
    tracks: [{ id: 0, kind: "video", codec: "H264", clockRate: 90000 }],
    mediaProvider: "test",
    stopProvider: () => Promise.resolve(),
  });
  const frame = (pts: number, keyframe: boolean) => ({
    trackId: 0,
    codec: "H264" as const,
    pts,
    dts: pts,
    keyframe,
    data: new Uint8Array(1),
  });
  stream.reader(4).close();
  assert.equal(requests, 1, "no GOP cached yet");
  stream.push(frame(0, true));
  stream.push(frame(3000, false));
  stream.reader(4).close();
  assert.equal(requests, 1, "the cached GOP fits");
  for (let i = 2; i < 6; i++) stream.push(frame(i * 3000, false));
  stream.reader(4).close();
  assert.equal(requests, 2, "the cached GOP is longer than the reader's queue");
});
