/**
 * A stream's Opus (WebRTC) or G.711 (SIP call) audio as AAC-LC 48 kHz, for RTMP receivers
 * (RTMP players and pushes expect AAC): the stream's shared live conversion through the codec
 * engine (one per source stream, started with its first reader and stopped with its last).
 */
import type { Logger } from "../../core/log.ts";
import { convertedAudio } from "../engine/audio_conversion.ts";
import type { CodecEngine } from "../engine/engine.ts";
import type { Stream } from "../stream.ts";

/** Audio codecs converted to AAC (AAC and MP3 pass as they are). */
const convertedToAac = new Set(["OPUS", "PCMU", "PCMA", "G722"]);

/**
 * The stream to read for AAC: `stream` itself unless its audio is Opus or G.711, else the
 * shared converted stream.
 */
export function aacStreamFor(stream: Stream, engine: CodecEngine, log: Logger): Stream {
  const audio = stream.tracks.find((t) => t.kind === "audio" && convertedToAac.has(t.codec));
  return audio ? convertedAudio(stream, "AAC", engine, log) : stream;
}
