/**
 * MP4 demuxer for VOD input: progressive files (moov before or after mdat) and fragmented
 * files (moof + mdat). It reads through a random-access ByteSource, holds only box headers,
 * moov and moof boxes and a compact sample table, and reads sample data on demand.
 */

import { ParseError, TruncatedError } from "../../../core/errors.ts";
import type { MediaFrame, Track } from "../../frame.ts";
import { codecKind } from "../../frame.ts";
import {
  type Box,
  ByteReader,
  findBox,
  iterateBoxes,
  maxBoxHeaderBytes,
  readBoxHeader,
} from "./box_reader.ts";
import { parseSampleEntry, type SampleEntryInfo, stsdEntries } from "./sample_entry.ts";

/** Random-access bytes, e.g. a file: the demuxer reads only what it needs. */
export interface ByteSource {
  /** Total length in bytes. */
  size: number;
  /** `length` bytes from `offset`; fewer only at the end of the source. */
  read(offset: number, length: number): Promise<Uint8Array>;
}

/** A ByteSource over bytes already in memory. */
export function memoryByteSource(data: Uint8Array): ByteSource {
  return {
    size: data.length,
    read: (offset, length) => Promise.resolve(data.subarray(offset, offset + length)),
  };
}

/** Bounds that keep a hostile file from making the demuxer allocate without limit. */
export interface Mp4DemuxerLimits {
  /** Largest moov or moof box read into memory, in bytes. */
  maxBoxBytes?: number;
  /** Most samples over all tracks. */
  maxSampleCount?: number;
  /** Largest single sample, in bytes. */
  maxSampleBytes?: number;
}

/** Default largest moov/moof, in bytes. */
export const defaultMaxBoxBytes = 64 * 1024 * 1024;
/** Default most samples per file (about 10 hours of 25 fps video plus 48 kHz AAC). */
export const defaultMaxSampleCount = 4_000_000;
/** Default largest sample, in bytes. */
export const defaultMaxSampleBytes = 16 * 1024 * 1024;

/** Clock of video timestamps produced by the demuxer, in Hz (MediaFrame convention). */
const videoClockRate = 90000;

/** One sample in decode order, timestamps in its track's clock (Track.clockRate). */
export interface Mp4Sample {
  trackId: number;
  pts: number;
  dts: number;
  keyframe: boolean;
  /** Offset of the sample data in the source, in bytes. */
  offset: number;
  /** Length of the sample data, in bytes. */
  size: number;
}

/** Growable columns of one track's sample table. */
class SampleColumns {
  dts: number[] = [];
  cto: number[] = [];
  offset: number[] = [];
  size: number[] = [];
  key: boolean[] = [];
}

interface TrackTable {
  track: Track;
  info: SampleEntryInfo;
  mp4TrackId: number;
  timescale: number;
  /** Media ticks added to every timestamp by the edit list. */
  editShift: number;
  samples: SampleColumns;
  /** Decode time after the last sample, for fragments without tfdt. */
  endDts: number;
  trex: { duration: number; size: number; flags: number };
}

/** Sample flag is_non_sync_sample (ISO 14496-12 §8.8.3.1). */
const nonSyncFlag = 0x10000;

/** Reads an MP4 file's tracks and samples. Create with `Mp4Demuxer.open`. */
export class Mp4Demuxer {
  /** Tracks with a codec of the media plane, ids 0..n-1 in file order. */
  readonly tracks: Track[];
  #source: ByteSource;
  #tables: TrackTable[];
  #limits: Required<Mp4DemuxerLimits>;

  private constructor(
    source: ByteSource,
    tables: TrackTable[],
    limits: Required<Mp4DemuxerLimits>,
  ) {
    this.#source = source;
    this.#tables = tables;
    this.#limits = limits;
    this.tracks = tables.map((t) => t.track);
  }

  /** Scans the file's top-level boxes and builds the sample tables. */
  static async open(source: ByteSource, limits: Mp4DemuxerLimits = {}): Promise<Mp4Demuxer> {
    const lim: Required<Mp4DemuxerLimits> = {
      maxBoxBytes: limits.maxBoxBytes ?? defaultMaxBoxBytes,
      maxSampleCount: limits.maxSampleCount ?? defaultMaxSampleCount,
      maxSampleBytes: limits.maxSampleBytes ?? defaultMaxSampleBytes,
    };
    const budget = { samples: lim.maxSampleCount };
    let tables: TrackTable[] | undefined;
    const moofs: { start: number; box: Uint8Array }[] = [];
    let offset = 0;
    let sawFtypOrMoov = false;
    while (offset + 8 <= source.size) {
      const head = await source.read(offset, Math.min(maxBoxHeaderBytes, source.size - offset));
      const header = readBoxHeader(head, 0);
      const size = header.size ?? source.size - offset;
      const complete = offset + size <= source.size;
      if (header.type === "moov" || header.type === "moof") {
        // A box cut by the end of the file is a recording stopped mid-write: keep what is whole.
        if (!complete) break;
        if (size > lim.maxBoxBytes) throw new ParseError(`${header.type} box too large`);
        const box = await source.read(offset, size);
        if (box.length < size) throw new TruncatedError("source returned fewer bytes");
        if (header.type === "moov") {
          if (tables) throw new ParseError("two moov boxes");
          tables = parseMoov(box.subarray(header.headerBytes), budget);
          sawFtypOrMoov = true;
        } else {
          moofs.push({ start: offset, box: box.subarray(header.headerBytes) });
        }
      } else if (header.type === "ftyp") {
        sawFtypOrMoov = true;
      } else if (!sawFtypOrMoov && !/^[\x20-\x7e]{4}$/.test(header.type)) {
        throw new ParseError("not an MP4 file");
      }
      offset += size;
    }
    if (!tables) throw new ParseError("MP4 file without moov");
    for (const moof of moofs) parseMoof(moof.box, moof.start, tables, budget);
    for (const t of tables) dropBeyond(t.samples, source.size);
    return new Mp4Demuxer(source, tables, lim);
  }

  /** Number of samples over all tracks. */
  get sampleCount(): number {
    let n = 0;
    for (const t of this.#tables) n += t.samples.dts.length;
    return n;
  }

  /** Duration of the longest track, in seconds. */
  get durationSec(): number {
    let longest = 0;
    for (const t of this.#tables) {
      const s = t.samples;
      if (s.dts.length === 0) continue;
      longest = Math.max(longest, (t.endDts + t.editShift) / t.timescale);
    }
    return longest;
  }

  /** Samples of all tracks in decode order, interleaved by decode time. */
  *samples(): Generator<Mp4Sample> {
    const next = this.#tables.map(() => 0);
    for (;;) {
      let best = -1;
      let bestSec = Infinity;
      for (let i = 0; i < this.#tables.length; i++) {
        const t = this.#tables[i];
        if (next[i] >= t.samples.dts.length) continue;
        const sec = (t.samples.dts[next[i]] + t.editShift) / t.timescale;
        if (sec < bestSec) {
          bestSec = sec;
          best = i;
        }
      }
      if (best < 0) return;
      yield this.#sample(this.#tables[best], next[best]++);
    }
  }

  #sample(t: TrackTable, i: number): Mp4Sample {
    const s = t.samples;
    const clock = t.track.clockRate;
    const toClock = (ticks: number) =>
      clock === t.timescale ? ticks : Math.round(ticks * clock / t.timescale);
    const dts = s.dts[i] + t.editShift;
    return {
      trackId: t.track.id,
      dts: toClock(dts),
      pts: toClock(dts + s.cto[i]),
      keyframe: s.key[i],
      offset: s.offset[i],
      size: s.size[i],
    };
  }

  /** The frame of a sample, read from the source (NAL lengths rewritten to 4 bytes). */
  async readFrame(sample: Mp4Sample): Promise<MediaFrame> {
    const table = this.#tables[sample.trackId];
    if (sample.size > this.#limits.maxSampleBytes) throw new ParseError("sample too large");
    let data = await this.#source.read(sample.offset, sample.size);
    if (data.length < sample.size) throw new TruncatedError("sample cut by end of file");
    const lengthSize = table.info.nalLengthSize;
    if (lengthSize && lengthSize !== 4) data = widenNalLengths(data, lengthSize);
    return {
      trackId: sample.trackId,
      codec: table.track.codec,
      pts: sample.pts,
      dts: sample.dts,
      keyframe: sample.keyframe,
      data,
    };
  }

  /** Every frame in decode order. */
  async *frames(): AsyncGenerator<MediaFrame> {
    for (const sample of this.samples()) yield await this.readFrame(sample);
  }
}

function widenNalLengths(data: Uint8Array, lengthSize: number): Uint8Array {
  let count = 0;
  let total = 0;
  for (let pos = 0; pos < data.length;) {
    if (pos + lengthSize > data.length) throw new ParseError("NAL length prefix cut");
    let len = 0;
    for (let i = 0; i < lengthSize; i++) len = len * 256 + data[pos + i];
    pos += lengthSize + len;
    if (pos > data.length) throw new ParseError("NAL unit longer than its sample");
    count++;
    total += len;
  }
  const out = new Uint8Array(total + 4 * count);
  const view = new DataView(out.buffer);
  let o = 0;
  for (let pos = 0; pos < data.length;) {
    let len = 0;
    for (let i = 0; i < lengthSize; i++) len = len * 256 + data[pos + i];
    view.setUint32(o, len);
    out.set(data.subarray(pos + lengthSize, pos + lengthSize + len), o + 4);
    o += 4 + len;
    pos += lengthSize + len;
  }
  return out;
}

function dropBeyond(s: SampleColumns, size: number): void {
  let n = s.dts.length;
  while (n > 0 && s.offset[n - 1] + s.size[n - 1] > size) n--;
  for (const column of [s.dts, s.cto, s.offset, s.size, s.key]) column.length = n;
}

function spend(budget: { samples: number }, count: number): void {
  budget.samples -= count;
  if (budget.samples < 0) throw new ParseError("too many samples");
}

function parseMoov(moov: Uint8Array, budget: { samples: number }): TrackTable[] {
  let movieTimescale = 1000;
  const mvhd = findBox(moov, "mvhd");
  if (mvhd) {
    const r = new ByteReader(mvhd.payload);
    const [version] = r.fullBox();
    r.skip(version === 1 ? 16 : 8);
    movieTimescale = r.u32() || 1000;
  }
  const trex = new Map<number, TrackTable["trex"]>();
  const mvex = findBox(moov, "mvex");
  if (mvex) {
    for (const box of iterateBoxes(mvex.payload)) {
      if (box.type !== "trex") continue;
      const r = new ByteReader(box.payload, 4);
      const id = r.u32();
      r.skip(4);
      trex.set(id, { duration: r.u32(), size: r.u32(), flags: r.u32() });
    }
  }
  const tables: TrackTable[] = [];
  for (const trak of iterateBoxes(moov)) {
    if (trak.type !== "trak") continue;
    const table = parseTrak(trak, movieTimescale, tables.length, budget);
    if (!table) continue;
    table.trex = trex.get(table.mp4TrackId) ?? table.trex;
    tables.push(table);
  }
  return tables;
}

function child(parent: Box | Uint8Array, type: string): Box {
  const box = findBox(parent instanceof Uint8Array ? parent : parent.payload, type);
  if (!box) throw new ParseError(`missing ${type} box`);
  return box;
}

function parseTrak(
  trak: Box,
  movieTimescale: number,
  id: number,
  budget: { samples: number },
): TrackTable | undefined {
  const tkhd = new ByteReader(child(trak, "tkhd").payload);
  const [tkhdVersion] = tkhd.fullBox();
  tkhd.skip(tkhdVersion === 1 ? 16 : 8);
  const mp4TrackId = tkhd.u32();
  const mdia = child(trak, "mdia");
  const mdhd = new ByteReader(child(mdia, "mdhd").payload);
  const [mdhdVersion] = mdhd.fullBox();
  mdhd.skip(mdhdVersion === 1 ? 16 : 8);
  const timescale = mdhd.u32();
  if (timescale === 0) throw new ParseError("mdhd timescale 0");
  const stbl = child(child(mdia, "minf"), "stbl");
  const stsd = child(stbl, "stsd");
  const entry = stsdEntries(stsd.payload)[0];
  const info = entry && parseSampleEntry(entry);
  if (!info) return undefined;
  const kind = codecKind(info.codec);
  const clockRate = kind === "video" ? videoClockRate : info.sampleRate ?? timescale;
  const track: Track = {
    id,
    kind,
    codec: info.codec,
    clockRate: Math.round(clockRate),
    config: info.config,
  };
  if (kind === "video") {
    track.width = info.width;
    track.height = info.height;
  } else {
    track.sampleRate = info.sampleRate;
    track.channels = info.channels;
  }
  const table: TrackTable = {
    track,
    info,
    mp4TrackId,
    timescale,
    editShift: editShift(trak, movieTimescale, timescale),
    samples: new SampleColumns(),
    endDts: 0,
    trex: { duration: 0, size: 0, flags: 0 },
  };
  readSampleTable(stbl.payload, table, budget);
  return table;
}

/** Media ticks to add so the edit list's first presented sample lands at its movie time. */
function editShift(trak: Box, movieTimescale: number, timescale: number): number {
  const edts = findBox(trak.payload, "edts");
  const elst = edts && findBox(edts.payload, "elst");
  if (!elst) return 0;
  const r = new ByteReader(elst.payload);
  const [version] = r.fullBox();
  const count = r.u32();
  let delay = 0;
  for (let i = 0; i < count; i++) {
    const duration = version === 1 ? r.u64() : r.u32();
    const mediaTime = version === 1 ? r.i64() : r.i32();
    r.skip(4);
    if (mediaTime === -1) {
      delay += Math.round(duration * timescale / movieTimescale);
      continue;
    }
    return delay - mediaTime;
  }
  return delay;
}

/** Reads `count` table entries of `bytes` each, refusing counts the payload cannot hold. */
function entries(r: ByteReader, bytesPerEntry: number): number {
  const count = r.u32();
  if (count * bytesPerEntry > r.left) throw new TruncatedError("sample table cut");
  return count;
}

function readSampleTable(stbl: Uint8Array, table: TrackTable, budget: { samples: number }): void {
  const stszBox = findBox(stbl, "stsz");
  const stz2Box = findBox(stbl, "stz2");
  const sizes: number[] = [];
  if (stszBox) {
    const r = new ByteReader(stszBox.payload, 4);
    const fixed = r.u32();
    const count = r.u32();
    spend(budget, count);
    if (fixed === 0 && count * 4 > r.left) throw new TruncatedError("stsz cut");
    for (let i = 0; i < count; i++) sizes.push(fixed || r.u32());
  } else if (stz2Box) {
    const r = new ByteReader(stz2Box.payload, 4);
    const field = r.u32() & 0xff;
    const count = r.u32();
    spend(budget, count);
    if (field !== 4 && field !== 8 && field !== 16) throw new ParseError("bad stz2 field size");
    if (Math.ceil(count * field / 8) > r.left) throw new TruncatedError("stz2 cut");
    for (let i = 0; i < count; i++) {
      if (field === 16) sizes.push(r.u16());
      else if (field === 8) sizes.push(r.u8());
      else sizes.push(i % 2 === 0 ? r.data[r.pos] >> 4 : r.data[r.pos++] & 0xf);
    }
  }
  const count = sizes.length;
  if (count === 0) return;
  const s = table.samples;
  s.size = sizes;

  const stts = new ByteReader(child(stbl, "stts").payload, 4);
  let dts = 0;
  for (let e = entries(stts, 8); e > 0 && s.dts.length < count; e--) {
    const run = stts.u32();
    const delta = stts.u32();
    for (let i = 0; i < run && s.dts.length < count; i++) {
      s.dts.push(dts);
      dts += delta;
    }
  }
  while (s.dts.length < count) s.dts.push(dts);
  table.endDts = dts;

  const cttsBox = findBox(stbl, "ctts");
  if (cttsBox) {
    const r = new ByteReader(cttsBox.payload);
    const [version] = r.fullBox();
    for (let e = entries(r, 8); e > 0 && s.cto.length < count; e--) {
      const run = r.u32();
      const offset = version === 1 ? r.i32() : r.u32();
      for (let i = 0; i < run && s.cto.length < count; i++) s.cto.push(offset);
    }
  }
  while (s.cto.length < count) s.cto.push(0);

  const stssBox = findBox(stbl, "stss");
  const video = table.track.kind === "video";
  if (stssBox && video) {
    s.key = new Array(count).fill(false);
    const r = new ByteReader(stssBox.payload, 4);
    for (let e = entries(r, 4); e > 0; e--) {
      const n = r.u32();
      if (n >= 1 && n <= count) s.key[n - 1] = true;
    }
  } else {
    s.key = new Array(count).fill(true);
  }

  const chunkOffsets: number[] = [];
  const stcoBox = findBox(stbl, "stco");
  const co64Box = findBox(stbl, "co64");
  if (stcoBox) {
    const r = new ByteReader(stcoBox.payload, 4);
    for (let e = entries(r, 4); e > 0; e--) chunkOffsets.push(r.u32());
  } else if (co64Box) {
    const r = new ByteReader(co64Box.payload, 4);
    for (let e = entries(r, 8); e > 0; e--) chunkOffsets.push(r.u64());
  } else {
    throw new ParseError("missing stco box");
  }
  const stsc = new ByteReader(child(stbl, "stsc").payload, 4);
  const stscCount = entries(stsc, 12);
  const runs: { firstChunk: number; perChunk: number }[] = [];
  for (let e = 0; e < stscCount; e++) {
    runs.push({ firstChunk: stsc.u32(), perChunk: stsc.u32() });
    stsc.skip(4);
  }
  let sample = 0;
  for (let r = 0; r < runs.length && sample < count; r++) {
    const lastChunk = r + 1 < runs.length ? runs[r + 1].firstChunk - 1 : chunkOffsets.length;
    for (let c = runs[r].firstChunk; c <= lastChunk && sample < count; c++) {
      if (c < 1 || c > chunkOffsets.length) throw new ParseError("stsc names a missing chunk");
      let offset = chunkOffsets[c - 1];
      for (let i = 0; i < runs[r].perChunk && sample < count; i++) {
        s.offset.push(offset);
        offset += sizes[sample++];
      }
    }
  }
  if (sample < count) throw new ParseError("stsc/stco cover fewer samples than stsz");
}

function parseMoof(
  moof: Uint8Array,
  moofStart: number,
  tables: TrackTable[],
  budget: { samples: number },
): void {
  for (const traf of iterateBoxes(moof)) {
    if (traf.type !== "traf") continue;
    const tfhd = new ByteReader(child(traf, "tfhd").payload);
    const [, flags] = tfhd.fullBox();
    const mp4TrackId = tfhd.u32();
    const table = tables.find((t) => t.mp4TrackId === mp4TrackId);
    if (!table) continue;
    const base = flags & 0x01 ? tfhd.u64() : moofStart;
    if (flags & 0x02) tfhd.skip(4);
    const defaultDuration = flags & 0x08 ? tfhd.u32() : table.trex.duration;
    const defaultSize = flags & 0x10 ? tfhd.u32() : table.trex.size;
    const defaultFlags = flags & 0x20 ? tfhd.u32() : table.trex.flags;
    const tfdtBox = findBox(traf.payload, "tfdt");
    let dts = table.endDts;
    if (tfdtBox) {
      const r = new ByteReader(tfdtBox.payload);
      const [version] = r.fullBox();
      dts = version === 1 ? r.u64() : r.u32();
    }
    let dataOffset = base;
    const s = table.samples;
    const video = table.track.kind === "video";
    for (const trun of iterateBoxes(traf.payload)) {
      if (trun.type !== "trun") continue;
      const r = new ByteReader(trun.payload);
      const [version, trFlags] = r.fullBox();
      const perSample = 4 * ((trFlags >> 8 & 1) + (trFlags >> 9 & 1) + (trFlags >> 10 & 1) +
        (trFlags >> 11 & 1));
      const count = r.u32();
      if (trFlags & 0x01) dataOffset = base + r.i32();
      const firstFlags = trFlags & 0x04 ? r.u32() : undefined;
      if (count * perSample > r.left) throw new TruncatedError("trun cut");
      spend(budget, count);
      for (let i = 0; i < count; i++) {
        const duration = trFlags & 0x100 ? r.u32() : defaultDuration;
        const size = trFlags & 0x200 ? r.u32() : defaultSize;
        let sampleFlags = trFlags & 0x400 ? r.u32() : defaultFlags;
        if (i === 0 && firstFlags !== undefined) sampleFlags = firstFlags;
        const cto = trFlags & 0x800 ? (version === 0 ? r.u32() : r.i32()) : 0;
        s.dts.push(dts);
        s.cto.push(cto);
        s.offset.push(dataOffset);
        s.size.push(size);
        s.key.push(!video || !(sampleFlags & nonSyncFlag));
        dts += duration;
        dataOffset += size;
      }
    }
    table.endDts = dts;
  }
}
