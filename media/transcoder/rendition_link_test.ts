import assert from "node:assert/strict";
import { silentLogger } from "../../core/log.ts";
import { NativeEngine } from "../engine/native.ts";
import type { MediaFrame, Track } from "../frame.ts";
import { i420Size } from "../mixer/i420.ts";
import { openPictureLinks, PictureLink } from "./picture_link.ts";
import { Rendition } from "./rendition.ts";

const source: Track = {
  id: 0,
  kind: "video",
  codec: "H264",
  clockRate: 90000,
  width: 320,
  height: 240,
};
/** Output frame spacing at 30 fps on the 90 kHz clock. */
const tickTicks = 3000;
/** pts of the source's first picture. */
const originPts = 1000;

async function until(what: string, ok: () => boolean, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!ok()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

Deno.test("a linked rendition leaves the link at a picture off its tick; after the cut the next encoder's frames follow the drained one's", async () => {
  const engine = new NativeEngine();
  const frames: MediaFrame[] = [];
  const rendition = new Rendition({
    engine,
    profile: {
      width: 160,
      height: 120,
      fps: 30,
      keyFrameInterval: 30,
      videoCodec: "H264",
      bitrateKbps: 0,
    },
    sourceVideo: source,
    sourceAudio: undefined,
    onFrame: (frame) => frames.push(frame),
    log: silentLogger,
  });
  let changes = 0;
  rendition.onLinkChange(() => changes++);
  // Only a source at the output's rate (or one not measured, when the link already runs).
  assert.equal(rendition.link.linkSize(25), undefined);
  assert.deepEqual(rendition.link.linkSize(30), { width: 160, height: 120 });

  const fifo = new PictureLink();
  try {
    rendition.link.onLinked(fifo.path);
    // The decoder's part: 10 pictures of the output's size into the FIFO.
    const writer = new Deno.Command("ffmpeg", {
      args: [
        ...["-v", "error", "-f", "lavfi", "-i", "testsrc2=size=160x120:rate=30"],
        ...["-frames:v", "10", "-f", "rawvideo", "-pix_fmt", "yuv420p", "-y", fifo.path],
      ],
      stdout: "null",
      stderr: "null",
    }).spawn();
    // Nine on their ticks, then one a tick late (tick 9 has no picture): the kernels' path
    // would repeat picture 8 there; a link cannot, so it asks to be cut.
    for (let tick = 0; tick < 9; tick++) {
      rendition.link.onLinkedPicture(originPts + tick * tickTicks);
    }
    await new Promise((r) => setTimeout(r, 0));
    assert.equal(changes, 0);
    rendition.link.onLinkedPicture(originPts + 10 * tickTicks);
    await new Promise((r) => setTimeout(r, 0));
    assert.equal(changes, 1);
    assert.equal(rendition.link.linkSize(), undefined);
    assert.ok((await writer.status).success);

    // The cut: the FIFO has ended; pictures now come through the server, from tick 11 on.
    rendition.link.onUnlinked(false);
    for (let tick = 11; tick < 20; tick++) {
      const data = new Uint8Array(i420Size(160, 120)).fill(128);
      rendition.pushPicture({ width: 160, height: 120, data, pts: originPts + tick * tickTicks });
    }
    await until("19 frames", () => frames.length >= 19);
    const ticks = frames.map((f) => (f.pts - originPts) / tickTicks);
    assert.deepEqual(ticks, [0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19]);
    assert.ok(frames[0].keyframe && frames[10].keyframe, "each encoder starts with a keyframe");
    assert.equal(rendition.stats.encodedFrames, 19);
  } finally {
    await rendition.close();
    fifo.remove();
    await engine.close();
  }
  assert.equal(engine.runningJobs, 0);
  assert.equal(openPictureLinks(), 0);
});
