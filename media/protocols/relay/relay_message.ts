/**
 * The relay protocol between nodes: an origin pushes one stream's media units to an edge.
 *
 * Each message is one transport message (a WebSocket binary message) starting with a type
 * byte. Control messages carry JSON after it; frames are binary only, so the per-frame cost
 * is a 19-byte header and one copy of the payload.
 *
 *   hello     0x01 version:u8 JSON{streamName, tracks}       origin → edge, first message
 *   frame     0x02 trackId:u8 flags:u8 pts:f64 dts:f64 data  origin → edge
 *   end       0x03 JSON{reason}                              origin → edge, last message
 *   dropped   0x04 frames:u32                                origin → edge, after a drop
 *   keyframe  0x10                                           edge → origin
 *
 * Timestamps are float64: every JS number, and so every integer up to 2^53, survives
 * exactly; the decoder accepts safe integers only. The version in `hello` changes only when
 * an existing message changes meaning; a new message gets a new type byte, which older
 * nodes decode as `unknown` and skip.
 */
import { ParseError, TruncatedError } from "../../../core/errors.ts";
import {
  type Codec,
  type CodecConfig,
  codecKind,
  type MediaFrame,
  type Track,
} from "../../frame.ts";

/** The protocol version this node speaks. */
export const relayVersion = 1;
/** Largest frame payload accepted, in bytes (a 4K keyframe is well under 2 MB). */
export const maxRelayFrameBytes = 16 * 1024 * 1024;
/** Most tracks a relayed stream may have. */
export const maxRelayTracks = 16;
/** Largest hello or end message, in bytes. */
export const maxRelayControlBytes = 64 * 1024;
/** Longest stream name or end reason, in characters. */
export const maxRelayTextChars = 1024;
/** Most parameter sets of one kind (SPS, PPS, VPS) in a track's config. */
const maxParameterSets = 32;

/** Type bytes. */
export const RelayType = {
  hello: 0x01,
  frame: 0x02,
  end: 0x03,
  dropped: 0x04,
  keyframe: 0x10,
} as const;

/** Bytes before a frame's payload: type, trackId, flags, pts, dts. */
export const relayFrameHeaderBytes = 19;
const keyframeFlag = 0x01;

/** A decoded relay message. */
export type RelayMessage =
  | { type: "hello"; version: number; streamName: string; tracks: Track[] }
  | { type: "frame"; frame: MediaFrame }
  | { type: "end"; reason: string }
  | { type: "dropped"; frames: number }
  | { type: "keyframe" }
  /** A type this node does not know (sent by a newer node): skip it. */
  | { type: "unknown"; code: number };

const encoder = new TextEncoder();
const decoder = new TextDecoder("utf-8", { fatal: true });

/** The hello message: the protocol version, the stream's name and its tracks with configs. */
export function encodeHello(streamName: string, tracks: readonly Track[]): Uint8Array {
  const json = encoder.encode(JSON.stringify({ streamName, tracks: tracks.map(trackJson) }));
  const out = new Uint8Array(2 + json.length);
  out[0] = RelayType.hello;
  out[1] = relayVersion;
  out.set(json, 2);
  return out;
}

/** One frame: header and payload in one buffer. */
export function encodeFrame(frame: MediaFrame): Uint8Array {
  const out = new Uint8Array(relayFrameHeaderBytes + frame.data.length);
  const view = new DataView(out.buffer);
  out[0] = RelayType.frame;
  out[1] = frame.trackId;
  out[2] = frame.keyframe ? keyframeFlag : 0;
  view.setFloat64(3, frame.pts);
  view.setFloat64(11, frame.dts);
  out.set(frame.data, relayFrameHeaderBytes);
  return out;
}

/** The end message: the origin stops sending, for `reason` (cut to `maxRelayTextChars`). */
export function encodeEnd(reason: string): Uint8Array {
  return control(RelayType.end, { reason: reason.slice(0, maxRelayTextChars) });
}

/** The dropped message: the sender skipped `frames` frames just before the next one. */
export function encodeDropped(frames: number): Uint8Array {
  const out = new Uint8Array(5);
  out[0] = RelayType.dropped;
  new DataView(out.buffer).setUint32(1, Math.min(frames, 0xffffffff));
  return out;
}

/** The keyframe request of an edge. */
export function encodeKeyframeRequest(): Uint8Array {
  return Uint8Array.of(RelayType.keyframe);
}

function control(type: number, body: unknown): Uint8Array {
  const json = encoder.encode(JSON.stringify(body));
  const out = new Uint8Array(1 + json.length);
  out[0] = type;
  out.set(json, 1);
  return out;
}

/**
 * Decodes one message. Frames need the tracks of the hello (`tracks`), to check the track id
 * and give the frame its codec. ParseError (TruncatedError when cut short) on anything
 * malformed or beyond the bounds above.
 */
export function decodeRelayMessage(message: Uint8Array, tracks?: readonly Track[]): RelayMessage {
  if (message.length === 0) throw new TruncatedError("empty relay message");
  switch (message[0]) {
    case RelayType.frame:
      return { type: "frame", frame: decodeFrame(message, tracks) };
    case RelayType.hello:
      return decodeHello(message);
    case RelayType.end: {
      const body = controlJson(message.subarray(1), "end");
      return { type: "end", reason: text(body.reason, "end.reason") };
    }
    case RelayType.dropped: {
      if (message.length < 5) throw new TruncatedError("relay dropped message cut short");
      const view = new DataView(message.buffer, message.byteOffset, message.byteLength);
      return { type: "dropped", frames: view.getUint32(1) };
    }
    case RelayType.keyframe:
      return { type: "keyframe" };
    default:
      return { type: "unknown", code: message[0] };
  }
}

function decodeFrame(message: Uint8Array, tracks: readonly Track[] | undefined): MediaFrame {
  if (!tracks) throw new ParseError("relay frame before hello");
  if (message.length < relayFrameHeaderBytes) {
    throw new TruncatedError(`relay frame header cut short (${message.length} bytes)`);
  }
  const size = message.length - relayFrameHeaderBytes;
  if (size > maxRelayFrameBytes) throw new ParseError(`relay frame of ${size} bytes`);
  const track = tracks[message[1]];
  if (!track) throw new ParseError(`relay frame of unknown track ${message[1]}`);
  const flags = message[2];
  if ((flags & ~keyframeFlag) !== 0) throw new ParseError(`relay frame flags ${flags}`);
  const view = new DataView(message.buffer, message.byteOffset, message.byteLength);
  const pts = view.getFloat64(3);
  const dts = view.getFloat64(11);
  if (!Number.isSafeInteger(pts) || !Number.isSafeInteger(dts)) {
    throw new ParseError(`relay frame timestamps ${pts}/${dts} are not safe integers`);
  }
  return {
    trackId: track.id,
    codec: track.codec,
    pts,
    dts,
    keyframe: flags === keyframeFlag,
    data: message.subarray(relayFrameHeaderBytes),
  };
}

function decodeHello(message: Uint8Array): RelayMessage {
  if (message.length < 2) throw new TruncatedError("relay hello cut short");
  const version = message[1];
  if (version !== relayVersion) {
    throw new ParseError(`relay version ${version}, this node speaks ${relayVersion}`);
  }
  const body = controlJson(message.subarray(2), "hello");
  const streamName = text(body.streamName, "hello.streamName");
  if (!Array.isArray(body.tracks) || body.tracks.length === 0) {
    throw new ParseError("relay hello.tracks is not a non-empty array");
  }
  if (body.tracks.length > maxRelayTracks) {
    throw new ParseError(`relay hello has ${body.tracks.length} tracks`);
  }
  const tracks = body.tracks.map((t: unknown, i: number) => parseTrack(t, i));
  return { type: "hello", version, streamName, tracks };
}

type JsonObject = Record<string, unknown>;

function controlJson(body: Uint8Array, what: string): JsonObject {
  if (body.length > maxRelayControlBytes) {
    throw new ParseError(`relay ${what} of ${body.length} bytes`);
  }
  let value: unknown;
  try {
    value = JSON.parse(decoder.decode(body));
  } catch (err) {
    throw new ParseError(`relay ${what} is not JSON: ${(err as Error).message}`);
  }
  return object(value, what);
}

function object(value: unknown, field: string): JsonObject {
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new ParseError(`relay ${field} is not an object`);
  }
  return value as JsonObject;
}

function text(value: unknown, field: string): string {
  if (typeof value !== "string" || value.length > maxRelayTextChars) {
    throw new ParseError(`relay ${field} is not a string of at most ${maxRelayTextChars} chars`);
  }
  return value;
}

const codecs = new Set<Codec>([
  "H264",
  "H265",
  "VP8",
  "AAC",
  "OPUS",
  "PCMU",
  "PCMA",
  "G722",
  "MP3",
]);

/** A positive integer up to `max`, or undefined when absent. */
function count(value: unknown, field: string, max: number): number | undefined {
  if (value === undefined) return undefined;
  if (!Number.isInteger(value) || (value as number) <= 0 || (value as number) > max) {
    throw new ParseError(`relay ${field} is not an integer in 1..${max}`);
  }
  return value as number;
}

function parseTrack(value: unknown, index: number): Track {
  const field = `hello.tracks[${index}]`;
  const t = object(value, field);
  if (t.id !== index) throw new ParseError(`relay ${field}.id is not ${index}`);
  if (!codecs.has(t.codec as Codec)) throw new ParseError(`relay ${field}.codec is unknown`);
  const codec = t.codec as Codec;
  const kind = codecKind(codec);
  if (t.kind !== kind) throw new ParseError(`relay ${field}.kind is not ${kind}`);
  const track: Track = {
    id: index,
    kind,
    codec,
    clockRate: count(t.clockRate, `${field}.clockRate`, 10_000_000) ??
      fail(`relay ${field}.clockRate is missing`),
  };
  const width = count(t.width, `${field}.width`, 65535);
  const height = count(t.height, `${field}.height`, 65535);
  const sampleRate = count(t.sampleRate, `${field}.sampleRate`, 10_000_000);
  const channels = count(t.channels, `${field}.channels`, 255);
  if (width !== undefined) track.width = width;
  if (height !== undefined) track.height = height;
  if (sampleRate !== undefined) track.sampleRate = sampleRate;
  if (channels !== undefined) track.channels = channels;
  if (t.config !== undefined) track.config = parseConfig(t.config, codec, `${field}.config`);
  return track;
}

function fail(message: string): never {
  throw new ParseError(message);
}

/** A config as JSON: its byte strings in base64. */
function trackJson(track: Track): JsonObject {
  const { config, ...rest } = track;
  if (!config) return rest;
  const b64 = (list: Uint8Array[]) => list.map((b) => b.toBase64());
  switch (config.codec) {
    case "H264":
      return { ...rest, config: { codec: "H264", sps: b64(config.sps), pps: b64(config.pps) } };
    case "H265":
      return {
        ...rest,
        config: {
          codec: "H265",
          vps: b64(config.vps),
          sps: b64(config.sps),
          pps: b64(config.pps),
        },
      };
    case "AAC":
      return { ...rest, config: { codec: "AAC", asc: config.asc.toBase64() } };
    case "OPUS":
      return {
        ...rest,
        config: config.head ? { codec: "OPUS", head: config.head.toBase64() } : { codec: "OPUS" },
      };
  }
}

function parseConfig(value: unknown, codec: Codec, field: string): CodecConfig {
  const c = object(value, field);
  if (c.codec !== codec) throw new ParseError(`relay ${field}.codec is not ${codec}`);
  switch (codec) {
    case "H264":
      return {
        codec,
        sps: bytesList(c.sps, `${field}.sps`),
        pps: bytesList(c.pps, `${field}.pps`),
      };
    case "H265":
      return {
        codec,
        vps: bytesList(c.vps, `${field}.vps`),
        sps: bytesList(c.sps, `${field}.sps`),
        pps: bytesList(c.pps, `${field}.pps`),
      };
    case "AAC":
      return { codec, asc: bytes(c.asc, `${field}.asc`) };
    case "OPUS":
      return c.head === undefined ? { codec } : { codec, head: bytes(c.head, `${field}.head`) };
    default:
      throw new ParseError(`relay ${field}: ${codec} has no config`);
  }
}

function bytesList(value: unknown, field: string): Uint8Array[] {
  if (!Array.isArray(value) || value.length > maxParameterSets) {
    throw new ParseError(`relay ${field} is not an array of at most ${maxParameterSets}`);
  }
  return value.map((v, i) => bytes(v, `${field}[${i}]`));
}

function bytes(value: unknown, field: string): Uint8Array {
  if (typeof value !== "string") throw new ParseError(`relay ${field} is not a base64 string`);
  try {
    return Uint8Array.fromBase64(value);
  } catch {
    throw new ParseError(`relay ${field} is not base64`);
  }
}
