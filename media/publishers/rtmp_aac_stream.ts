/**
 * A stream's Opus audio as AAC-LC 48 kHz, for RTMP receivers (RTMP players and pushes
 * expect AAC): one conversion per source stream, shared by all of them, through the codec
 * engine in chunks (see rtmp_audio_chunks.ts). Each chunk starts a fresh encoder, which can
 * leave a faint click at chunk edges.
 */
import type { Logger } from "../../core/log.ts";
import { buildAsc } from "../codecs/aac.ts";
import { opusPacketSamples } from "../codecs/opus.ts";
import type { CodecEngine } from "../engine/engine.ts";
import { transcodeFrames } from "../engine/transcode.ts";
import type { Track } from "../frame.ts";
import type { Stream } from "../stream.ts";
import { ChunkedAudioStream } from "./rtmp_audio_chunks.ts";

/** Bitrate of the AAC made from Opus, in bit/s. */
export const aacFromOpusBitrate = 128_000;
/** Longest one conversion job may run, in milliseconds. */
const chunkJobTimeoutMs = 10_000;
/** AAC-LC audio object type. */
const aacLcObjectType = 2;
/** Sample rate of the AAC made from Opus, in Hz (Opus decodes at 48 kHz). */
const aacSampleRate = 48_000;

const conversions = new WeakMap<Stream, ChunkedAudioStream>();

/**
 * The stream to read for AAC: `stream` itself unless its audio is Opus, else the shared
 * converted stream (started on first use, stopped when its last reader has gone).
 */
export function aacStreamFor(stream: Stream, engine: CodecEngine, log: Logger): Stream {
  const opus = stream.tracks.find((t) => t.kind === "audio" && t.codec === "OPUS");
  if (!opus) return stream;
  let conversion = conversions.get(stream);
  if (!conversion || conversion.stopped || conversion.output.ended) {
    const channels = Math.min(opus.channels ?? 2, 2);
    const output: Track = {
      id: opus.id,
      kind: "audio",
      codec: "AAC",
      clockRate: aacSampleRate,
      sampleRate: aacSampleRate,
      channels,
      config: { codec: "AAC", asc: buildAsc(aacLcObjectType, aacSampleRate, channels) },
    };
    const input = { ...opus, id: 0 };
    conversion = new ChunkedAudioStream({
      source: stream,
      audio: opus,
      output,
      samplesOf: (frame) => opusPacketSamples(frame.data),
      convert: async ({ frames }) => {
        const result = await transcodeFrames(
          engine,
          [input],
          frames.map((f) => ({ ...f, trackId: 0 })),
          [
            ...["-vn", "-c:a", "aac", "-b:a", String(aacFromOpusBitrate)],
            ...["-ar", String(aacSampleRate), "-ac", String(channels)],
          ],
          chunkJobTimeoutMs,
        );
        // The first frame is the encoder's priming.
        return result.frames.filter((f) => f.codec === "AAC").slice(1).map((f) => f.data);
      },
      stopWhenUnread: true,
      log,
    });
    conversions.set(stream, conversion);
  }
  return conversion.output;
}
