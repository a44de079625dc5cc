/**
 * Opus helpers: the OpusHead identification header (RFC 7845 §5.1) and packet durations
 * from the TOC byte (RFC 6716 §3.1).
 */

import { ParseError, TruncatedError } from "../../core/errors.ts";

/** Opus always decodes at 48 kHz; packet durations are in samples of this clock. */
export const opusClockRate = 48000;

/** Fields of an OpusHead. */
export interface OpusHead {
  channels: number;
  /** Samples at 48 kHz to drop at the start of decoding. */
  preSkip: number;
  /** Sample rate of the original input, in Hz (informative). */
  inputSampleRate: number;
  /** Output gain in Q7.8 dB. */
  outputGain: number;
  /** 0: mono/stereo, 1: Vorbis order surround, 255: undefined. */
  mappingFamily: number;
  /** Present when mappingFamily is not 0. */
  streamCount?: number;
  coupledCount?: number;
  channelMapping?: Uint8Array;
}

const magic = "OpusHead";

/** Builds an OpusHead; a mapping table is needed when mappingFamily is not 0. */
export function buildOpusHead(head: OpusHead): Uint8Array {
  const family = head.mappingFamily;
  if (head.channels < 1 || (family === 0 && head.channels > 2)) {
    throw new ParseError("Opus channel count not allowed by mapping family");
  }
  const mapping = head.channelMapping;
  if (family !== 0 && (!mapping || mapping.length !== head.channels)) {
    throw new ParseError("Opus mapping family needs a channel mapping");
  }
  const out = new Uint8Array(19 + (family !== 0 ? 2 + head.channels : 0));
  const view = new DataView(out.buffer);
  for (let i = 0; i < 8; i++) out[i] = magic.charCodeAt(i);
  out[8] = 1;
  out[9] = head.channels;
  view.setUint16(10, head.preSkip, true);
  view.setUint32(12, head.inputSampleRate, true);
  view.setInt16(16, head.outputGain, true);
  out[18] = family;
  if (family !== 0) {
    out[19] = head.streamCount ?? 0;
    out[20] = head.coupledCount ?? 0;
    out.set(mapping!, 21);
  }
  return out;
}

/** Parses an OpusHead. */
export function parseOpusHead(data: Uint8Array): OpusHead {
  if (data.length < 19) throw new TruncatedError("OpusHead too short");
  for (let i = 0; i < 8; i++) {
    if (data[i] !== magic.charCodeAt(i)) throw new ParseError("no OpusHead magic");
  }
  if (data[8] >> 4 !== 0) throw new ParseError("unsupported OpusHead version");
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  const head: OpusHead = {
    channels: data[9],
    preSkip: view.getUint16(10, true),
    inputSampleRate: view.getUint32(12, true),
    outputGain: view.getInt16(16, true),
    mappingFamily: data[18],
  };
  if (head.channels === 0) throw new ParseError("OpusHead with 0 channels");
  if (head.mappingFamily === 0) {
    if (head.channels > 2) throw new ParseError("Opus family 0 allows at most 2 channels");
  } else {
    if (data.length < 21 + head.channels) throw new TruncatedError("OpusHead mapping cut");
    head.streamCount = data[19];
    head.coupledCount = data[20];
    if (head.streamCount === 0 || head.coupledCount > head.streamCount) {
      throw new ParseError("bad Opus stream counts");
    }
    head.channelMapping = data.slice(21, 21 + head.channels);
  }
  return head;
}

/** Frame sizes in 48 kHz samples by TOC configuration number. */
const frameSamplesByConfig = Array.from({ length: 32 }, (_, config) => {
  if (config < 12) return [480, 960, 1920, 2880][config & 3];
  if (config < 16) return [480, 960][config & 1];
  return [120, 240, 480, 960][config & 3];
});

/** Longest Opus packet, in 48 kHz samples (120 ms). */
const maxPacketSamples = 5760;

/** Duration of an Opus packet in 48 kHz samples, from its TOC byte (and frame count byte). */
export function opusPacketSamples(packet: Uint8Array): number {
  if (packet.length < 1) throw new TruncatedError("empty Opus packet");
  const toc = packet[0];
  let frames: number;
  switch (toc & 3) {
    case 0:
      frames = 1;
      break;
    case 1:
    case 2:
      frames = 2;
      break;
    default:
      if (packet.length < 2) throw new TruncatedError("Opus code 3 packet without frame count");
      frames = packet[1] & 0x3f;
  }
  const samples = frames * frameSamplesByConfig[toc >> 3];
  if (frames === 0 || samples > maxPacketSamples) throw new ParseError("bad Opus frame count");
  return samples;
}
