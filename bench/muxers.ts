/**
 * Container throughput: frames per second the MPEG-TS muxer and demuxer and the fragmented
 * MP4 writer and MP4 demuxer sustain on synthetic 1280x720-sized H.264 frames (20 KB, an IDR
 * every 2 s) interleaved with AAC frames at their real-time ratio (25 video : 46.875 audio),
 * Each figure is the best of a few runs over the same frames, to damp noise from other load.
 * No peer ratio: ffmpeg cannot remux these undecodable synthetic payloads (it probes them).
 */

import type { MediaFrame, Track } from "../media/frame.ts";
import { TsMuxer } from "../media/formats/mpegts/muxer.ts";
import { TsDemuxer } from "../media/formats/mpegts/demuxer.ts";
import { Fmp4Writer } from "../media/formats/mp4/fmp4_writer.ts";
import { memoryByteSource, Mp4Demuxer } from "../media/formats/mp4/demuxer.ts";

/** Media seconds generated: 25 fps video plus 48 kHz AAC. */
const mediaSeconds = 120;
const videoFrameBytes = 20_000;
const audioFrameBytes = 370;
const gopFrames = 50;
const readChunkBytes = 64 * 1024;
const runs = 3;

/** x264 SPS (High, 1280x720) and PPS, so the MP4 sample entry is a real one. */
const sps = hex("6764001facd9405005bb011000000300100000030320f1831960");
const pps = hex("68ebe3cb22c0");

function hex(s: string): Uint8Array {
  return new Uint8Array(s.match(/../g)!.map((b) => parseInt(b, 16)));
}

const tracks: Track[] = [
  {
    id: 0,
    kind: "video",
    codec: "H264",
    clockRate: 90000,
    width: 1280,
    height: 720,
    config: { codec: "H264", sps: [sps], pps: [pps] },
  },
  {
    id: 1,
    kind: "audio",
    codec: "AAC",
    clockRate: 48000,
    sampleRate: 48000,
    channels: 2,
    config: { codec: "AAC", asc: new Uint8Array([0x11, 0x90]) },
  },
];

function frames(): MediaFrame[] {
  const out: MediaFrame[] = [];
  const idr = syntheticNal(0x65);
  const slice = syntheticNal(0x41);
  const audio = new Uint8Array(audioFrameBytes).fill(0x21);
  const videoFrames = mediaSeconds * 25;
  let a = 0;
  for (let v = 0; v < videoFrames; v++) {
    const pts = v * 3600;
    out.push({
      trackId: 0,
      codec: "H264",
      pts,
      dts: pts,
      keyframe: v % gopFrames === 0,
      data: v % gopFrames === 0 ? idr : slice,
    });
    for (; a * 1024 * 90000 / 48000 <= pts; a++) {
      out.push({
        trackId: 1,
        codec: "AAC",
        pts: a * 1024,
        dts: a * 1024,
        keyframe: true,
        data: audio,
      });
    }
  }
  return out;
}

/** One length-prefixed NAL unit of `videoFrameBytes`, no start-code emulation inside. */
function syntheticNal(header: number): Uint8Array {
  const data = new Uint8Array(videoFrameBytes);
  new DataView(data.buffer).setUint32(0, videoFrameBytes - 4);
  data[4] = header;
  for (let i = 5; i < data.length; i++) data[i] = 0x80 | (i * 31 & 0x7f);
  return data;
}

function report(label: string, count: number, bytes: number, ms: number): void {
  const fps = count / (ms / 1000);
  const mbps = bytes / 1e6 / (ms / 1000);
  console.log(
    `${label.padEnd(30)} ${fps.toFixed(0).padStart(9)} frames/s ${
      mbps.toFixed(0).padStart(6)
    } MB/s` +
      `  (${(fps / (25 + 46.875)).toFixed(0)}x real time of one 720p stream)`,
  );
}

/** Runs `body` a few times; returns its result and the fastest run's duration in ms. */
async function best<T>(body: () => T | Promise<T>): Promise<{ result: T; ms: number }> {
  let ms = Infinity;
  let result!: T;
  for (let run = 0; run < runs; run++) {
    const t = performance.now();
    result = await body();
    ms = Math.min(ms, performance.now() - t);
  }
  return { result, ms };
}

function concat(chunks: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(chunks.reduce((n, c) => n + c.length, 0));
  let pos = 0;
  for (const c of chunks) {
    out.set(c, pos);
    pos += c.length;
  }
  return out;
}

const input = frames();
const inputBytes = input.reduce((n, f) => n + f.data.length, 0);

const tsMux = await best(() => {
  const muxer = new TsMuxer({ tracks });
  return concat(input.map((f) => muxer.mux(f)));
});
report("MPEG-TS mux", input.length, inputBytes, tsMux.ms);
const ts = tsMux.result;

const tsDemux = await best(() => {
  const demuxer = new TsDemuxer();
  let count = 0;
  for (let p = 0; p < ts.length; p += readChunkBytes) {
    count += demuxer.push(ts.subarray(p, p + readChunkBytes)).length;
  }
  return count + demuxer.flush().length;
});
report("MPEG-TS demux", tsDemux.result, ts.length, tsDemux.ms);

const mp4Write = await best(() => {
  const writer = new Fmp4Writer({ tracks });
  const chunks: Uint8Array[] = [];
  for (const f of input) {
    const out = writer.push(f);
    if (out) chunks.push(out);
  }
  chunks.push(writer.finish()!);
  return concat(chunks);
});
report("fMP4 write", input.length, inputBytes, mp4Write.ms);
const mp4 = mp4Write.result;

const mp4Demux = await best(async () => {
  // A file-like source: every read copies, as a file read would.
  const source = memoryByteSource(mp4);
  const demuxer = await Mp4Demuxer.open({
    size: source.size,
    read: async (offset, length) => (await source.read(offset, length)).slice(),
  });
  let count = 0;
  for await (const _ of demuxer.frames()) count++;
  return count;
});
report("MP4 demux (fragmented)", mp4Demux.result, mp4.length, mp4Demux.ms);
