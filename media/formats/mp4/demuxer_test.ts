import assert from "node:assert/strict";
import { ParseError } from "../../../core/errors.ts";
import { type ByteSource, memoryByteSource, Mp4Demuxer } from "./demuxer.ts";
import {
  type Fixture,
  fixture,
  mutate,
  prng,
  probeStreams,
  probeVideoKeyflags,
  randomBytes,
  run,
  tempPath,
} from "../test_fixtures.ts";

/** A ByteSource over a file, reading only the ranges asked for. */
async function fileSource(path: string): Promise<ByteSource & { close(): void }> {
  const file = await Deno.open(path);
  const size = (await file.stat()).size;
  return {
    size,
    async read(offset, length) {
      const out = new Uint8Array(Math.min(length, size - offset));
      await file.seek(offset, Deno.SeekMode.Start);
      let got = 0;
      while (got < out.length) {
        const n = await file.read(out.subarray(got));
        if (n === null) break;
        got += n;
      }
      return out.subarray(0, got);
    },
    close: () => file.close(),
  };
}

const expected: Record<Fixture, [string, string]> = {
  h264_aac: ["H264", "AAC"],
  h264_opus: ["H264", "OPUS"],
  h265_aac: ["H265", "AAC"],
};

async function remux(name: Fixture, flags: string): Promise<string> {
  const out = await tempPath(`${name}-${flags.replace(/\W/g, "")}.mp4`);
  await run("ffmpeg", [
    "-v",
    "error",
    "-y",
    "-i",
    await fixture(name, "mp4"),
    "-c",
    "copy",
    "-movflags",
    flags,
    out,
  ]);
  return out;
}

async function checkAgainstFfprobe(path: string, name: Fixture): Promise<void> {
  const source = await fileSource(path);
  try {
    const demuxer = await Mp4Demuxer.open(source);
    const [video, audio] = demuxer.tracks;
    assert.deepEqual([video.codec, audio.codec], expected[name]);
    assert.deepEqual([video.width, video.height, video.clockRate], [320, 240, 90000]);
    assert.deepEqual([audio.sampleRate, audio.channels, audio.clockRate], [48000, 1, 48000]);
    assert.ok(video.config && audio.config);
    const streams = await probeStreams(path);
    const counts = [0, 0];
    const keyflags: boolean[] = [];
    const lastDts = [-Infinity, -Infinity];
    for (const sample of demuxer.samples()) {
      counts[sample.trackId]++;
      assert.ok(sample.dts > lastDts[sample.trackId], "decode order");
      lastDts[sample.trackId] = sample.dts;
      if (sample.trackId === 0) keyflags.push(sample.keyframe);
    }
    assert.deepEqual(counts, streams.map((s) => Number(s.nb_read_packets)));
    assert.deepEqual(keyflags, await probeVideoKeyflags(path));
    assert.ok(Math.abs(demuxer.durationSec - 2) < 0.1, `duration ${demuxer.durationSec}`);
    const frames = demuxer.frames();
    const first = (await frames.next()).value!;
    assert.equal(first.keyframe, true);
    assert.ok(Math.abs(first.pts / 90000 - Number(streams[0].start_time)) < 0.001, "start");
    const nalLength = new DataView(first.data.buffer, first.data.byteOffset).getUint32(0);
    assert.ok(nalLength + 4 <= first.data.length, "4-byte NAL lengths");
  } finally {
    source.close();
  }
}

for (const name of ["h264_aac", "h264_opus", "h265_aac"] as const) {
  Deno.test(`Mp4Demuxer reads ffmpeg's ${name} MP4 (moov after mdat) like ffprobe`, async () => {
    await checkAgainstFfprobe(await fixture(name, "mp4"), name);
  });
}

Deno.test("Mp4Demuxer reads moov-first and fragmented MP4 like ffprobe", async () => {
  await checkAgainstFfprobe(await remux("h264_aac", "+faststart"), "h264_aac");
  await checkAgainstFfprobe(await remux("h264_opus", "frag_keyframe+empty_moov"), "h264_opus");
  await checkAgainstFfprobe(
    await remux("h265_aac", "frag_keyframe+empty_moov+default_base_moof"),
    "h265_aac",
  );
});

Deno.test("Mp4Demuxer enforces its box and sample limits", async () => {
  const data = await Deno.readFile(await fixture("h264_aac", "mp4"));
  await assert.rejects(
    () => Mp4Demuxer.open(memoryByteSource(data), { maxSampleCount: 100 }),
    ParseError,
  );
  await assert.rejects(
    () => Mp4Demuxer.open(memoryByteSource(data), { maxBoxBytes: 1000 }),
    ParseError,
  );
  const demuxer = await Mp4Demuxer.open(memoryByteSource(data), { maxSampleBytes: 100 });
  const big = [...demuxer.samples()].find((s) => s.size > 100)!;
  await assert.rejects(() => demuxer.readFrame(big), ParseError);
});

Deno.test("Mp4Demuxer fuzz: random, mutated and truncated files throw ParseError only", async () => {
  const rand = prng(8);
  const progressive = await Deno.readFile(await remux("h264_aac", "+faststart"));
  const fragmented = await Deno.readFile(await remux("h264_opus", "frag_keyframe+empty_moov"));
  const moovEnd = 4000; // mutate where the boxes are, not the media data
  let opened = 0;
  for (let i = 0; i < 400; i++) {
    const base = i % 2 ? progressive : fragmented;
    let data: Uint8Array;
    if (i % 4 === 0) data = randomBytes(rand, Math.floor(rand() * 2000));
    else if (i % 4 === 1) data = base.subarray(0, Math.floor(rand() * base.length));
    else {
      data = base.slice();
      const head = mutate(rand, data.subarray(0, moovEnd), 1 + Math.floor(rand() * 6));
      data.set(head);
    }
    try {
      const demuxer = await Mp4Demuxer.open(memoryByteSource(data));
      opened++;
      let n = 0;
      for (const sample of demuxer.samples()) {
        if (n++ % 7 === 0) await demuxer.readFrame(sample);
      }
    } catch (e) {
      if (!(e instanceof ParseError)) throw new Error(`case ${i}: ${e}`, { cause: e });
    }
  }
  assert.ok(opened > 50, `only ${opened} inputs got past open`);
});
