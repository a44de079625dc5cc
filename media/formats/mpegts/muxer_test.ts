import assert from "node:assert/strict";
import type { MediaFrame, Track } from "../../frame.ts";
import { memoryByteSource, Mp4Demuxer } from "../mp4/demuxer.ts";
import { TsDemuxer } from "./demuxer.ts";
import { defaultTimestampOffset90k, TsMuxer } from "./muxer.ts";
import {
  decode,
  type Fixture,
  fixture,
  probeDuration,
  probeStreams,
  tempPath,
} from "../test_fixtures.ts";

async function demuxMp4(name: Fixture): Promise<{ tracks: Track[]; frames: MediaFrame[] }> {
  const demuxer = await Mp4Demuxer.open(
    memoryByteSource(await Deno.readFile(await fixture(name, "mp4"))),
  );
  const frames: MediaFrame[] = [];
  for await (const frame of demuxer.frames()) frames.push(frame);
  return { tracks: demuxer.tracks, frames };
}

const codecNames = {
  h264_aac: ["h264", "aac"],
  h264_opus: ["h264", "opus"],
  h265_aac: ["hevc", "aac"],
};

for (const name of ["h264_aac", "h264_opus", "h265_aac"] as const) {
  Deno.test(`TsMuxer output of ${name} decodes cleanly in ffmpeg and in TsDemuxer`, async () => {
    const { tracks, frames } = await demuxMp4(name);
    const muxer = new TsMuxer({ tracks });
    const packets = frames.map((f) => muxer.mux(f));
    const bytes = new Uint8Array(packets.reduce((n, p) => n + p.length, 0));
    let pos = 0;
    for (const p of packets) {
      assert.equal(p.length % 188, 0);
      bytes.set(p, pos);
      pos += p.length;
    }
    const path = await tempPath(`${name}-ours.ts`);
    await Deno.writeFile(path, bytes);

    const counts = [0, 1].map((id) => frames.filter((f) => f.trackId === id).length);
    const streams = await probeStreams(path);
    assert.deepEqual(streams.map((s) => s.codec_name), codecNames[name]);
    assert.deepEqual(streams.map((s) => Number(s.nb_read_packets)), counts);
    const decoded = await decode(path);
    assert.deepEqual(decoded, { errors: "", video: counts[0], audio: counts[1] });
    const duration = await probeDuration(path);
    assert.ok(Math.abs(duration - 2) < 0.2, `duration ${duration}`);

    // Our demuxer gets the same frames back at the same times (plus the muxer's offset).
    const demuxer = new TsDemuxer();
    const back = [...demuxer.push(bytes), ...demuxer.flush()];
    for (const track of tracks) {
      const sent = frames.filter((f) => f.trackId === track.id);
      const got = back.filter((f) => f.trackId === track.id);
      assert.equal(got.length, sent.length);
      const offset = Math.round(defaultTimestampOffset90k * track.clockRate / 90000);
      assert.deepEqual(got.map((f) => f.pts - offset), sent.map((f) => f.pts));
      assert.deepEqual(got.map((f) => f.dts - offset), sent.map((f) => f.dts));
      assert.deepEqual(got.map((f) => f.keyframe), sent.map((f) => f.keyframe));
      if (track.kind === "audio") assert.deepEqual(got.map((f) => f.data), sent.map((f) => f.data));
    }
  });
}
