import assert from "node:assert/strict";
import { IvfReader, IvfWriter } from "./ivf.ts";
import { probeStreams, run, tempPath } from "./test_fixtures.ts";

Deno.test("IvfWriter streams frames that IvfReader and ffprobe read back, 90 kHz timestamps", async () => {
  const source = await tempPath("writer-source.ivf");
  await run("ffmpeg", [
    ...["-v", "error", "-y", "-f", "lavfi", "-i", "testsrc2=size=176x144:rate=10", "-t", "1"],
    ...["-c:v", "libvpx", "-g", "5", "-b:v", "200k", "-f", "ivf", source],
  ]);
  const frames = new IvfReader().push(await Deno.readFile(source));
  const writer = new IvfWriter(176, 144, 90000);
  const parts = frames.map((f) => writer.frame(f.data, f.timestamp * 9000));
  // The file header comes with the first frame only.
  assert.equal(parts[0].length, 32 + 12 + frames[0].data.length);
  assert.equal(parts[1].length, 12 + frames[1].data.length);
  const bytes = Uint8Array.from(parts.flatMap((p) => [...p]));

  const reader = new IvfReader();
  const back = reader.push(bytes);
  reader.end();
  assert.deepEqual(reader.header, {
    fourcc: "VP80",
    width: 176,
    height: 144,
    timeBaseNum: 1,
    timeBaseDen: 90000,
  });
  assert.deepEqual(back.map((f) => f.timestamp), frames.map((f) => f.timestamp * 9000));
  assert.deepEqual(back.map((f) => f.data), frames.map((f) => f.data));

  const written = await tempPath("writer-out.ivf");
  await Deno.writeFile(written, bytes);
  const [stream] = await probeStreams(written);
  assert.equal(stream.codec_name, "vp8");
  assert.equal(stream.width, 176);
  assert.equal(Number(stream.nb_read_packets), frames.length);
});
