/**
 * A sound file mixed into a stream's AAC audio, for `/push/sound_on`. The file is decoded
 * once to PCM at the stream's rate and channels (at most `maxSoundSeconds`); then each chunk
 * of the stream's audio is decoded by the codec engine, the sound added with the mixer's
 * audio kernels (soft-clipped sum), and encoded back to AAC (see rtmp_audio_chunks.ts).
 * Decoding each chunk on its own loses the overlap with the previous chunk's last frame, so
 * the stream's audio may click faintly at chunk edges while a sound plays.
 */
import { BadRequestError, ConflictError, NotImplementedError } from "../../core/errors.ts";
import type { Logger } from "../../core/log.ts";
import {
  aacSamplesPerFrame,
  adtsHeaderBytes,
  parseAdtsHeader,
  parseAsc,
  writeAdtsHeader,
} from "../codecs/aac.ts";
import { type CodecEngine, EngineError } from "../engine/engine.ts";
import { AudioKernels } from "../mixer/audio_kernels.ts";
import type { Stream } from "../stream.ts";
import { type AudioChunk, ChunkedAudioStream, chunkSamples } from "./rtmp_audio_chunks.ts";

/** Longest part of a sound file that is mixed (and held decoded in memory), in seconds. */
export const maxSoundSeconds = 120;
/** Bitrate of the AAC with the sound mixed in, in bit/s. */
export const soundMixBitrate = 128_000;
/** Longest one engine job may run, in milliseconds. */
const jobTimeoutMs = 10_000;
/** AAC-LC audio object type. */
const aacLcObjectType = 2;

/** What a sound mix is made of. */
export interface SoundMixOptions {
  /** The stream (its audio must be AAC-LC, mono or stereo). */
  source: Stream;
  /** Real path of the sound file. */
  soundPath: string;
  /** Start the sound again when it ends; else the stream's audio passes unchanged after it. */
  loop: boolean;
  engine: CodecEngine;
  log: Logger;
  /** The REST operation, named by NotImplementedError. */
  operation: string;
}

/** Starts mixing: resolves with the mixed stream once the sound file is decoded. */
export async function openSoundMix(options: SoundMixOptions): Promise<ChunkedAudioStream> {
  const { source, engine, operation } = options;
  const audio = source.tracks.find((t) => t.kind === "audio");
  if (!audio) throw new ConflictError(`stream ${source.name} has no audio to mix a sound into`);
  if (audio.config?.codec !== "AAC") {
    throw new NotImplementedError(operation, `sound mixing is built for AAC, not ${audio.codec}`);
  }
  const asc = parseAsc(audio.config.asc);
  if (asc.objectType !== aacLcObjectType || asc.extensionSampleRate || asc.channels > 2) {
    throw new NotImplementedError(operation, "sound mixing is built for mono or stereo AAC-LC");
  }
  const rate = String(asc.sampleRate);
  const channels = String(asc.channels);
  let sound: Int16Array;
  try {
    sound = toInt16(
      await engine.run({
        inputArgs: [],
        input: await Deno.readFile(options.soundPath),
        outputArgs: [
          "-vn",
          "-t",
          String(maxSoundSeconds),
          "-ar",
          rate,
          "-ac",
          channels,
          "-f",
          "s16le",
        ],
        timeoutMs: jobTimeoutMs,
      }),
    );
  } catch (err) {
    if (!(err instanceof EngineError)) throw err;
    throw new BadRequestError(
      "soundFile",
      `not a sound file the engine can decode: ${err.message}`,
    );
  }
  if (sound.length === 0) throw new BadRequestError("soundFile", "the sound file holds no audio");

  const kernels = await AudioKernels.create();
  const count = chunkSamples * asc.channels;
  const heap = kernels.heap;
  const acc = heap.alloc(count * 4);
  const streamPcm = heap.alloc(count * 2);
  const soundPcm = heap.alloc(count * 2);
  const mixed = heap.alloc(count * 2);
  let position = 0; // in samples of all channels

  const convert = async (chunk: AudioChunk): Promise<Uint8Array[]> => {
    const n = chunk.samples * asc.channels;
    if ((!options.loop && position >= sound.length) || n > count) {
      return chunk.frames.map((f) => f.data);
    }
    let adtsBytes = 0;
    for (const f of chunk.frames) adtsBytes += adtsHeaderBytes + f.data.length;
    const adts = new Uint8Array(adtsBytes);
    let offset = 0;
    for (const f of chunk.frames) {
      writeAdtsHeader(adts, offset, asc, f.data.length);
      adts.set(f.data, offset + adtsHeaderBytes);
      offset += adtsHeaderBytes + f.data.length;
    }
    const decoded = toInt16(
      await engine.run({
        inputArgs: ["-f", "aac"],
        input: adts,
        outputArgs: ["-ar", rate, "-ac", channels, "-f", "s16le"],
        timeoutMs: jobTimeoutMs,
        live: true,
      }),
    );
    const streamView = heap.int16(streamPcm, n);
    streamView.fill(0);
    streamView.set(decoded.subarray(0, n));
    const soundView = heap.int16(soundPcm, n);
    for (let i = 0; i < n; i++, position++) {
      soundView[i] = options.loop
        ? sound[position % sound.length]
        : position < sound.length
        ? sound[position]
        : 0;
    }
    kernels.clear(acc, n);
    kernels.mixAdd(acc, streamPcm, "int16", n, 1);
    kernels.mixAdd(acc, soundPcm, "int16", n, 1);
    kernels.mixOut(acc, mixed, "int16", n);
    const encoded = await engine.run({
      inputArgs: ["-f", "s16le", "-ar", rate, "-ac", channels],
      input: heap.bytes(mixed, n * 2).slice(),
      outputArgs: ["-c:a", "aac", "-b:a", String(soundMixBitrate), "-f", "adts"],
      timeoutMs: jobTimeoutMs,
      live: true,
    });
    // The first frame is the encoder's priming.
    return adtsPayloads(encoded).slice(1);
  };

  return new ChunkedAudioStream({
    source,
    audio,
    output: audio,
    samplesOf: () => aacSamplesPerFrame,
    convert,
    stopWhenUnread: false,
    log: options.log,
  });
}

function toInt16(bytes: Uint8Array): Int16Array {
  const even = bytes.length & ~1;
  return new Int16Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + even));
}

function adtsPayloads(data: Uint8Array): Uint8Array[] {
  const out: Uint8Array[] = [];
  for (let offset = 0; offset + adtsHeaderBytes <= data.length;) {
    const header = parseAdtsHeader(data, offset);
    if (offset + header.frameBytes > data.length) break;
    out.push(data.slice(offset + header.headerBytes, offset + header.frameBytes));
    offset += header.frameBytes;
  }
  return out;
}
