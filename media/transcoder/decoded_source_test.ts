/**
 * The decoder hub sizes its decoder for its subscribers: a 320x180 consumer of a 640x360
 * source gets 320x180 pictures from an ffmpeg told to scale; a 640x360 consumer joining
 * later gets full-size pictures, while the first goes on getting every picture (none lost,
 * none twice) through the handover to the larger decoder, and back when the larger one
 * leaves. One ffmpeg decodes once the handover is done.
 */
import assert from "node:assert/strict";
import { silentLogger } from "../../core/log.ts";
import { DecoderHub, type SourceListener } from "./decoded_source.ts";
import { clipSource, WatchedEngine } from "./test_source.ts";
import type { RawVideoFrame } from "./video_codec.ts";
import { i420Bytes, scaledSize } from "./video_decoder_input.ts";

/** A subscriber noting its pictures. */
function viewer(): SourceListener & { pictures: RawVideoFrame[] } {
  const pictures: RawVideoFrame[] = [];
  return { pictures, onPicture: (p) => pictures.push(p), onAudio: () => {}, onEnd: () => {} };
}

const delay = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function until(what: string, check: () => boolean, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await delay(10);
  }
}

Deno.test("decoder hub: pictures at the largest size asked, resized without a picture lost", async () => {
  const { frames, stream } = await clipSource(640, 360, 8);
  const engine = new WatchedEngine();
  const hub = new DecoderHub(engine, silentLogger);
  const small = viewer();
  const large = viewer();
  try {
    const first = hub.subscribe(stream, small, { width: 320, height: 180 });
    const ptsOf = (i: number) => frames[i].pts;
    let second: ReturnType<DecoderHub["subscribe"]> | undefined;
    for (const [i, frame] of frames.entries()) {
      stream.push(frame);
      // About real time (25 fps): the handover happens as it would live.
      await delay(40);
      // In the second GOP, then in the fifth (mid-GOP: the new decoder starts at the next
      // keyframe, the old one goes on meanwhile).
      if (i === 30) second = hub.subscribe(stream, large, "source");
      if (i === 110) second!.release();
    }
    const lastPts = Math.max(...frames.map((f) => f.pts));
    // The last pictures stay in ffmpeg's reorder buffer without a following frame.
    await until(
      "the small viewer's pictures",
      () => small.pictures.at(-1)!.pts >= lastPts - 6 * 3600,
    );

    // The first decoder was told to scale to 320x180 (area averaging, as the peers).
    const [scaling] = engine.jobs;
    const filter = scaling.output[scaling.output.indexOf("-vf") + 1];
    assert.match(filter, /^scale=.*320\/iw.*180\/ih.*flags=area$/);
    // The small viewer saw every picture from its first, in order, none twice.
    const presented = frames.map((f) => f.pts).sort((a, b) => a - b);
    const seen = small.pictures.map((p) => p.pts);
    assert.deepEqual(
      seen,
      presented.slice(presented.indexOf(seen[0]), presented.indexOf(seen[0]) + seen.length),
    );
    for (const p of [...small.pictures, ...large.pictures]) {
      assert.equal(p.data.length, i420Bytes(p), "picture bytes match its size");
    }
    const sizes = small.pictures.map((p) => `${p.width}x${p.height}`);
    // 320x180 first, then the large decoder's 640x360 once it caught up, then 320x180 again.
    const runs = sizes.filter((size, i) => size !== sizes[i - 1]);
    assert.deepEqual(runs, ["320x180", "640x360", "320x180"]);
    assert.ok(small.pictures.filter((p) => p.width === 320).length > 100);
    // The large viewer got only full-size pictures, from the keyframe after it joined.
    assert.ok(large.pictures.length >= 50, `${large.pictures.length} large pictures`);
    assert.ok(large.pictures.every((p) => p.width === 640 && p.height === 360));
    assert.ok(large.pictures[0].pts >= ptsOf(30));
    // Three decoders in all (320x180, source size, 320x180 again); one left running.
    assert.equal(engine.jobs.length, 3);
    assert.equal(engine.running, 1);
    assert.ok(!engine.jobs[1].output.includes("-vf"), "the source-size decoder does not scale");
    assert.equal(hub.droppedFrames(stream), 0);
    first.release();
    await until("the decoder stopped", () => engine.running === 0);
  } finally {
    await hub.close();
    await engine.close();
  }
});

Deno.test("scaled size: fits the box, keeps the aspect, even sides, never larger than the source", () => {
  assert.deepEqual(scaledSize({ width: 1280, height: 720 }, { width: 640, height: 360 }), {
    width: 640,
    height: 360,
  });
  assert.deepEqual(scaledSize({ width: 1280, height: 720 }, { width: 444, height: 4096 }), {
    width: 444,
    height: 250,
  });
  assert.deepEqual(scaledSize({ width: 640, height: 360 }, { width: 1280, height: 720 }), {
    width: 640,
    height: 360,
  });
  assert.deepEqual(scaledSize({ width: 853, height: 480 }, { width: 640, height: 360 }), {
    width: 640,
    height: 360,
  });
  assert.deepEqual(scaledSize({ width: 640, height: 360 }, undefined), {
    width: 640,
    height: 360,
  });
});
