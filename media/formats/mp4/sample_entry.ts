/**
 * Sample entries of the stsd box for the codecs of the media plane: avc1/avcC, hvc1/hvcC
 * (ISO 14496-15), vp08/vpcC ("VP Codec ISO Media File Format Binding"), mp4a/esds (ISO
 * 14496-14) and Opus/dOps ("Encapsulation of Opus in ISO Base Media File Format").
 */

import { ParseError } from "../../../core/errors.ts";
import type { CodecConfig, Track } from "../../frame.ts";
import { buildAsc, parseAsc } from "../../codecs/aac.ts";
import { buildAvcC, parseAvcC, parseH264Sps } from "../../codecs/h264.ts";
import { buildHvcC, parseH265Sps, parseHvcC } from "../../codecs/h265.ts";
import { buildOpusHead, opusClockRate, parseOpusHead } from "../../codecs/opus.ts";
import { type Box, ByteReader, findBox, iterateBoxes } from "./box_reader.ts";
import type { BoxWriter } from "./box_writer.ts";

/** Codec facts read from a sample entry. */
export interface SampleEntryInfo {
  codec: Track["codec"];
  width?: number;
  height?: number;
  sampleRate?: number;
  channels?: number;
  config?: CodecConfig;
  /** Bytes of each NAL length prefix in H.264/H.265 samples. */
  nalLengthSize: number;
}

/** Writes the sample entry box of `track` (its config must be complete). */
export function writeSampleEntry(w: BoxWriter, track: Track): void {
  const config = track.config;
  switch (track.codec) {
    case "H264": {
      if (config?.codec !== "H264") throw new ParseError("H.264 track without SPS/PPS");
      writeVisualEntry(w, "avc1", track);
      w.box("avcC").bytes(buildAvcC(config.sps, config.pps)).end();
      w.end();
      return;
    }
    case "H265": {
      if (config?.codec !== "H265") throw new ParseError("H.265 track without VPS/SPS/PPS");
      writeVisualEntry(w, "hvc1", track);
      w.box("hvcC").bytes(buildHvcC(config.vps, config.sps, config.pps)).end();
      w.end();
      return;
    }
    case "VP8": {
      writeVisualEntry(w, "vp08", track);
      writeVpcC(w);
      w.end();
      return;
    }
    case "AAC": {
      const asc = config?.codec === "AAC"
        ? config.asc
        : buildAsc(2, track.sampleRate ?? track.clockRate, track.channels ?? 2);
      writeAudioEntry(w, "mp4a", track, track.sampleRate ?? track.clockRate);
      writeEsds(w, track.id + 1, asc);
      w.end();
      return;
    }
    case "OPUS": {
      const head = config?.codec === "OPUS" && config.head ? parseOpusHead(config.head) : {
        channels: track.channels ?? 2,
        preSkip: 0,
        inputSampleRate: track.sampleRate ?? opusClockRate,
        outputGain: 0,
        mappingFamily: 0,
      };
      writeAudioEntry(w, "Opus", { ...track, channels: head.channels }, opusClockRate);
      w.box("dOps").u8(0).u8(head.channels).u16(head.preSkip).u32(head.inputSampleRate);
      w.i16(head.outputGain).u8(head.mappingFamily);
      if (head.mappingFamily !== 0) {
        w.u8(head.streamCount!).u8(head.coupledCount!).bytes(head.channelMapping!);
      }
      w.end().end();
      return;
    }
    default:
      throw new ParseError(`codec ${track.codec} has no MP4 sample entry here`);
  }
}

function writeVisualEntry(w: BoxWriter, type: string, track: Track): void {
  w.box(type).zeros(6).u16(1); // reserved, data_reference_index
  w.zeros(16).u16(track.width ?? 0).u16(track.height ?? 0);
  w.u32(0x00480000).u32(0x00480000).u32(0).u16(1); // 72 dpi, reserved, frame_count
  w.zeros(32).u16(0x18).i16(-1); // compressorname, depth, pre_defined
}

/**
 * The VP codec configuration box (version 1) of a VP8 track, per "VP Codec ISO Media File
 * Format Binding": profile 0 (the only VP8 version browsers send), level and colour
 * unspecified, 8-bit 4:2:0, and no initialization data (VP8 has none).
 */
function writeVpcC(w: BoxWriter): void {
  const bitDepth = 8;
  const chroma420Colocated = 1;
  const unspecified = 2; // colour primaries, transfer and matrix: "unspecified" (ISO 23091-2)
  w.fullBox("vpcC", 1, 0).u8(0).u8(0); // profile, level
  w.u8((bitDepth << 4) | (chroma420Colocated << 1)); // bitDepth, chromaSubsampling, fullRange 0
  w.u8(unspecified).u8(unspecified).u8(unspecified).u16(0).end();
}

function writeAudioEntry(w: BoxWriter, type: string, track: Track, rate: number): void {
  w.box(type).zeros(6).u16(1).zeros(8);
  w.u16(track.channels ?? 2).u16(16).u16(0).u16(0);
  w.u32(rate > 0xffff ? 0 : rate * 65536);
}

/** Writes one MPEG-4 descriptor header with a 4-byte length, as common muxers do. */
function descriptor(w: BoxWriter, tag: number, length: number): void {
  w.u8(tag).u8(0x80 | ((length >> 21) & 0x7f)).u8(0x80 | ((length >> 14) & 0x7f));
  w.u8(0x80 | ((length >> 7) & 0x7f)).u8(length & 0x7f);
}

function writeEsds(w: BoxWriter, esId: number, asc: Uint8Array): void {
  const dsi = 5 + asc.length;
  const decoderConfig = 13 + dsi;
  const es = 3 + 5 + decoderConfig + 5 + 1;
  w.fullBox("esds", 0, 0);
  descriptor(w, 3, es);
  w.u16(esId).u8(0);
  descriptor(w, 4, decoderConfig);
  w.u8(0x40).u8(0x15).u8(0).u16(0).u32(0).u32(0); // AAC, audio stream, sizes unknown
  descriptor(w, 5, asc.length);
  w.bytes(asc);
  descriptor(w, 6, 1);
  w.u8(2); // SLConfig predefined: MP4
  w.end();
}

/** Codec facts of a sample entry box, or undefined for a codec the media plane lacks. */
export function parseSampleEntry(entry: Box): SampleEntryInfo | undefined {
  const r = new ByteReader(entry.payload);
  switch (entry.type) {
    case "avc1":
    case "avc3": {
      const { width, height, children } = visualEntry(r);
      const avcC = findBox(children, "avcC");
      if (!avcC) throw new ParseError("avc1 without avcC");
      const rec = parseAvcC(avcC.payload);
      const sps = rec.sps.map((s) => s.slice());
      const info: SampleEntryInfo = {
        codec: "H264",
        width,
        height,
        nalLengthSize: rec.nalLengthSize,
        config: { codec: "H264", sps, pps: rec.pps.map((s) => s.slice()) },
      };
      if (sps.length > 0) Object.assign(info, sizeOf(parseH264Sps(sps[0])));
      return info;
    }
    case "hvc1":
    case "hev1": {
      const { width, height, children } = visualEntry(r);
      const hvcC = findBox(children, "hvcC");
      if (!hvcC) throw new ParseError("hvc1 without hvcC");
      const rec = parseHvcC(hvcC.payload);
      const sps = rec.sps.map((s) => s.slice());
      const info: SampleEntryInfo = {
        codec: "H265",
        width,
        height,
        nalLengthSize: rec.nalLengthSize,
        config: {
          codec: "H265",
          vps: rec.vps.map((s) => s.slice()),
          sps,
          pps: rec.pps.map((s) => s.slice()),
        },
      };
      if (sps.length > 0) Object.assign(info, sizeOf(parseH265Sps(sps[0])));
      return info;
    }
    case "mp4a": {
      const { channels, sampleRate, children } = audioEntry(r);
      const esds = findBox(children, "esds");
      if (!esds) throw new ParseError("mp4a without esds");
      const asc = parseEsds(esds.payload);
      if (!asc) return undefined;
      const parsed = parseAsc(asc);
      return {
        codec: "AAC",
        sampleRate: parsed.sampleRate || sampleRate,
        channels: parsed.channels || channels,
        config: { codec: "AAC", asc: asc.slice() },
        nalLengthSize: 0,
      };
    }
    case "Opus": {
      const { children } = audioEntry(r);
      const dOps = findBox(children, "dOps");
      if (!dOps) throw new ParseError("Opus entry without dOps");
      const d = new ByteReader(dOps.payload);
      if (d.u8() !== 0) throw new ParseError("unknown dOps version");
      const channels = d.u8();
      const preSkip = d.u16();
      const inputSampleRate = d.u32();
      const outputGain = d.i16();
      const mappingFamily = d.u8();
      const head = mappingFamily === 0
        ? { channels, preSkip, inputSampleRate, outputGain, mappingFamily }
        : {
          channels,
          preSkip,
          inputSampleRate,
          outputGain,
          mappingFamily,
          streamCount: d.u8(),
          coupledCount: d.u8(),
          channelMapping: d.bytes(channels),
        };
      return {
        codec: "OPUS",
        sampleRate: opusClockRate,
        channels,
        config: { codec: "OPUS", head: buildOpusHead(head) },
        nalLengthSize: 0,
      };
    }
    default:
      return undefined;
  }
}

function sizeOf(sps: { width: number; height: number }): { width: number; height: number } {
  return { width: sps.width, height: sps.height };
}

function visualEntry(r: ByteReader): { width: number; height: number; children: Uint8Array } {
  r.skip(8 + 16);
  const width = r.u16();
  const height = r.u16();
  r.skip(50);
  return { width, height, children: r.data.subarray(r.pos) };
}

function audioEntry(
  r: ByteReader,
): { channels: number; sampleRate: number; children: Uint8Array } {
  r.skip(8);
  const version = r.u16(); // QuickTime sound description version
  r.skip(6);
  const channels = r.u16();
  r.skip(6);
  const sampleRate = r.u32() / 65536;
  if (version === 1) r.skip(16);
  else if (version === 2) r.skip(36);
  return { channels, sampleRate, children: r.data.subarray(r.pos) };
}

/** Reads an expandable descriptor length (ISO 14496-1 §8.3.3). */
function descriptorLength(r: ByteReader): number {
  let length = 0;
  for (let i = 0; i < 4; i++) {
    const b = r.u8();
    length = (length << 7) | (b & 0x7f);
    if (!(b & 0x80)) break;
  }
  return length;
}

/** The AudioSpecificConfig inside an esds payload, when its object type is AAC. */
function parseEsds(payload: Uint8Array): Uint8Array | undefined {
  const r = new ByteReader(payload, 4);
  if (r.u8() !== 3) throw new ParseError("esds without ES descriptor");
  descriptorLength(r);
  r.skip(2);
  const flags = r.u8();
  if (flags & 0x80) r.skip(2);
  if (flags & 0x40) r.skip(r.u8());
  if (flags & 0x20) r.skip(2);
  if (r.u8() !== 4) throw new ParseError("esds without decoder config");
  descriptorLength(r);
  const objectType = r.u8();
  r.skip(12);
  if (objectType !== 0x40 && (objectType < 0x66 || objectType > 0x68)) return undefined;
  if (r.u8() !== 5) throw new ParseError("esds without AudioSpecificConfig");
  return r.bytes(descriptorLength(r));
}

/** The sample entries of an stsd payload (after its version/flags and count). */
export function stsdEntries(stsdPayload: Uint8Array): Box[] {
  return [...iterateBoxes(stsdPayload, 8)];
}
