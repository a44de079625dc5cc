/**
 * The wire parsers the fuzz runner drives, each the way the server feeds it: byte streams in
 * socket-sized reads (RTSP, RTMP chunks, MPEG-TS), whole files (MP4, FLV), packets (RTP,
 * RTCP) and text (SDP, signalling frames). A parser may refuse an input only with a
 * ParseError (TruncatedError included); anything else is a crash.
 */
import { BadRequestError, ParseError } from "../core/errors.ts";
import { parseH264Sps } from "../media/codecs/h264.ts";
import { parseH265Sps } from "../media/codecs/h265.ts";
import { splitLengthPrefixed } from "../media/codecs/nalu.ts";
import type { MediaFrame, Track } from "../media/frame.ts";
import { memoryByteSource, Mp4Demuxer } from "../media/formats/mp4/demuxer.ts";
import { TsDemuxer } from "../media/formats/mpegts/demuxer.ts";
import { parseSdp } from "../media/formats/sdp/sdp.ts";
import { decodePng } from "../media/formats/png.ts";
import { restampPngChecks } from "../media/formats/png_fixtures.ts";
import { decodeAmf0All } from "../media/protocols/rtmp/amf0.ts";
import { ChunkReader } from "../media/protocols/rtmp/chunk_reader.ts";
import { parseCommand } from "../media/protocols/rtmp/command.ts";
import { parseHandshakeHello } from "../media/protocols/rtmp/handshake.ts";
import {
  MessageType,
  parseSetChunkSize,
  parseUserControl,
  parseWindowAckSize,
  type RtmpMessage,
} from "../media/protocols/rtmp/message.ts";
import { pickChallenge } from "../media/protocols/rtsp/auth.ts";
import {
  parsePublic,
  parseRtpInfo,
  parseSession,
  parseTransport,
} from "../media/protocols/rtsp/headers.ts";
import { RtspStreamParser } from "../media/protocols/rtsp/message.ts";
import { authorizationFor } from "../media/protocols/sip/digest.ts";
import { parseCSeq, parseVia } from "../media/protocols/sip/headers.ts";
import {
  maxSipMessageBytes,
  parseSipMessage,
  serializeSipMessage,
  type SipMessage,
  SipStreamParser,
} from "../media/protocols/sip/message.ts";
import { parseNameAddr, parseSipUri } from "../media/protocols/sip/uri.ts";
import {
  decodeRelayMessage,
  encodeEnd,
  encodeFrame,
  encodeHello,
} from "../media/protocols/relay/relay_message.ts";
import { RtmpMediaReceiver } from "../media/providers/rtmp_receiver.ts";
import {
  ControlType,
  parseAck,
  parseDropRequest,
  parseNak,
  parsePacket,
} from "../media/protocols/srt/packet.ts";
import { parseHandshake, readConclusion } from "../media/protocols/srt/handshake.ts";
import { Receiver } from "../media/protocols/srt/receiver.ts";
import { AacDepacketizer, auHeaderLayout } from "../media/rtp/aac_depacketizer.ts";
import type { Depacketizer } from "../media/rtp/depacketizer.ts";
import { H264Depacketizer } from "../media/rtp/h264_depacketizer.ts";
import { H265Depacketizer } from "../media/rtp/h265_depacketizer.ts";
import { parseRtpPacket } from "../media/rtp/packet.ts";
import { parseSenderReports } from "../media/rtp/rtcp.ts";
import { sdpTrack } from "../media/rtp/sdp_track.ts";
import { parseTransportCc, transportCcPacket } from "../media/rtp/transport_cc.ts";
import { parseFrame } from "../signaling/frame.ts";
import { prng } from "./mutators.ts";
import { decodePacketList, encodePacketList } from "./packet_list.ts";

/** One parser under fuzz. */
export interface FuzzTarget {
  /** Name, also the folder of its seeds under fuzz/corpus/ (unless `corpus` says another). */
  readonly name: string;
  /** Folder of fuzz/corpus/ the seeds come from. */
  readonly corpus?: string;
  /** Turns the corpus files into seeds (default: the files as they are). */
  readonly seeds?: (files: Uint8Array[]) => Uint8Array[];
  /** Largest input made, in bytes. */
  readonly maxBytes: number;
  /** A typed refusal the parser documents besides ParseError. */
  readonly refusal?: (err: unknown) => boolean;
  /** Parses one input; resolves or returns when done, throws what the parser throws. */
  run(input: Uint8Array): void | Promise<void>;
}

/** True for the errors `target` may refuse input with: ParseError, or its documented one. */
export function isTypedError(target: FuzzTarget, err: unknown): boolean {
  return err instanceof ParseError || (target.refusal?.(err) ?? false);
}

/** The RTMP receiver refuses an audio codec it cannot carry (Speex, ...) with a 400. */
const unsupportedCodec = (err: unknown) =>
  err instanceof BadRequestError && err.field === "audiocodecid";

const decoder = new TextDecoder();

/** Seeds of the transport_cc target: feedback packets of a few shapes. */
function transportCcSeeds(): Uint8Array[] {
  const shapes = [
    (i: number) => 1000 + i * 5, // all received, small deltas: one run
    (i: number) => i % 3 === 1 ? undefined : 1000 + i * 2, // losses: status vectors
    (i: number) => 1000 + (i % 4 === 0 ? -20 : 80) * i, // large and negative deltas
  ];
  return shapes.map((arrival, k) =>
    transportCcPacket(
      k,
      k + 1,
      k,
      Array.from({ length: 30 + k * 11 }, (_, i) => ({
        sequence: (65530 + i) & 0xffff,
        arrivalMs: arrival(i),
      })),
    )
  );
}

/** Splits `data` into reads of 1 to 1,500 bytes, the same for the same input. */
function* reads(data: Uint8Array): Generator<Uint8Array> {
  const rng = prng(data.length * 2654435761);
  for (let at = 0; at < data.length;) {
    const n = rng() < 0.1 ? 1 + Math.floor(rng() * 16) : 1 + Math.floor(rng() * 1500);
    yield data.subarray(at, at + n);
    at += n;
  }
}

/** The parameter sets in a frame's NAL units, parsed as a player would. */
function parseParameterSets(frame: MediaFrame): void {
  if (!frame.keyframe || (frame.codec !== "H264" && frame.codec !== "H265")) return;
  for (const nal of splitLengthPrefixed(frame.data)) {
    if (frame.codec === "H264" && (nal[0] & 0x1f) === 7) parseH264Sps(nal);
    if (frame.codec === "H265" && ((nal[0] >> 1) & 0x3f) === 33) parseH265Sps(nal);
  }
}

/** The RTMP messages an RTMP peer's bytes carry, as the connection handles them. */
function handleRtmpMessages(messages: RtmpMessage[], receiver: RtmpMediaReceiver): void {
  for (const message of messages) {
    switch (message.type) {
      case MessageType.commandAmf0:
        parseCommand(message.payload);
        break;
      case MessageType.setChunkSize:
        parseSetChunkSize(message.payload);
        break;
      case MessageType.windowAckSize:
        parseWindowAckSize(message.payload);
        break;
      case MessageType.userControl:
        parseUserControl(message.payload);
        break;
      default:
        for (const frame of receiver.receive(message)) parseParameterSets(frame);
    }
  }
}

/** RTMP messages of an FLV file: the header, then tags with their previous-tag sizes. */
function flvMessages(data: Uint8Array): RtmpMessage[] {
  if (data.length < 9 || data[0] !== 0x46 || data[1] !== 0x4c || data[2] !== 0x56) {
    throw new ParseError("not an FLV file");
  }
  const messages: RtmpMessage[] = [];
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  let at = view.getUint32(5) + 4;
  while (at + 11 <= data.length) {
    const type = data[at] & 0x1f;
    const size = (data[at + 1] << 16) | (data[at + 2] << 8) | data[at + 3];
    const timestamp = ((data[at + 7] << 24) | (data[at + 4] << 16) | (data[at + 5] << 8) |
      data[at + 6]) >>> 0;
    if (at + 11 + size > data.length) break;
    messages.push({
      type,
      timestamp,
      streamId: 1,
      payload: data.subarray(at + 11, at + 11 + size),
    });
    at += 11 + size + 4;
  }
  return messages;
}

/** An RTP packet stream through a depacketizer, with sequence gaps resetting it. */
function depacketize(data: Uint8Array, depacketizer: Depacketizer): void {
  const typed = (err: unknown) => err instanceof ParseError;
  let last = -1;
  let failure: unknown;
  for (const bytes of decodePacketList(data)) {
    try {
      const packet = parseRtpPacket(bytes);
      if (last >= 0 && packet.sequenceNumber !== ((last + 1) & 0xffff)) depacketizer.reset();
      last = packet.sequenceNumber;
      depacketizer.push(packet, parseParameterSets);
    } catch (err) {
      // The server drops a bad packet and goes on with the next one.
      if (!typed(err)) throw err;
      failure ??= err;
    }
  }
  if (failure) throw failure;
}

/** Header values the RTSP client reads, parsed as it parses them. */
function parseRtspHeaders(message: ReturnType<RtspStreamParser["next"]>): void {
  if (!message || message.kind === "interleaved") return;
  const { headers } = message;
  const transport = headers.get("transport");
  if (transport !== undefined) parseTransport(transport);
  const session = headers.get("session");
  if (session !== undefined) parseSession(session);
  const rtpInfo = headers.get("rtp-info");
  if (rtpInfo !== undefined) parseRtpInfo(rtpInfo);
  parsePublic(headers.get("public"));
  pickChallenge(headers.getAll("www-authenticate"));
  if (headers.get("content-type")?.startsWith("application/sdp")) {
    parseSdp(decoder.decode(message.body));
  }
}

/** Headers of name-addr values a SIP user agent reads. */
const sipAddressHeaders = [
  "from",
  "to",
  "contact",
  "route",
  "record-route",
  "refer-to",
  "referred-by",
];

/**
 * A SIP message read as the user agent reads it: Request-URI, Vias, CSeq, addresses, digest
 * challenges and SDP body, each tried (the first refusal is thrown once all ran). A message
 * that parsed must serialise to bytes that parse again: failing that is a crash.
 */
function readSipMessage(message: SipMessage): void {
  const { headers } = message;
  let failure: unknown;
  const attempt = (read: () => unknown) => {
    try {
      read();
    } catch (err) {
      if (!(err instanceof ParseError)) throw err;
      failure ??= err;
    }
  };
  const written = serializeSipMessage(message);
  if (written.length <= maxSipMessageBytes) {
    try {
      parseSipMessage(written);
    } catch (err) {
      throw new Error(`a parsed SIP message does not parse once written: ${err}`);
    }
  }
  if (message.kind === "request" && /^sips?:/i.test(message.uri)) {
    attempt(() => parseSipUri(message.uri));
  }
  attempt(() => headers.getAll("via").forEach((via) => parseVia(via)));
  attempt(() => parseCSeq(headers.get("cseq") ?? ""));
  for (const name of sipAddressHeaders) {
    for (const value of headers.getAll(name)) {
      if (value !== "*") attempt(() => parseNameAddr(value));
    }
  }
  for (
    const value of [...headers.getAll("www-authenticate"), ...headers.getAll("proxy-authenticate")]
  ) {
    attempt(() => authorizationFor(value, { user: "u", password: "p" }, "INVITE", "sip:b@h", 1));
  }
  if (headers.get("content-type")?.startsWith("application/sdp")) {
    attempt(() => parseSdp(decoder.decode(message.body)));
  }
  if (failure) throw failure;
}

/** SIP bytes as a datagram, then as a TCP stream in socket-sized reads. */
function sipInput(input: Uint8Array): void {
  let failure: unknown;
  try {
    readSipMessage(parseSipMessage(input));
  } catch (err) {
    if (!(err instanceof ParseError)) throw err;
    failure = err;
  }
  const parser = new SipStreamParser();
  try {
    for (const read of reads(input)) {
      for (const message of parser.push(read)) readSipMessage(message);
      if (parser.buffered > maxSipMessageBytes + read.length) {
        throw new Error(`the SIP stream parser holds ${parser.buffered} bytes`);
      }
    }
  } catch (err) {
    if (!(err instanceof ParseError)) throw err;
    failure ??= err;
  }
  if (failure) throw failure;
}

/** The AU header layout of the camera's AAC (fmtp of fuzz/corpus/sdp). */
const aacLayout = auHeaderLayout(
  new Map([["sizelength", "13"], ["indexlength", "3"], ["indexdeltalength", "3"]]),
);

/**
 * SRT datagrams as a listener takes them: each parsed, control bodies read by type, data
 * packets fed to a receive buffer whose timers run between datagrams.
 */
function srtDatagrams(input: Uint8Array): void {
  let nowMs = 0;
  let receiver: Receiver | undefined;
  for (const datagram of decodePacketList(input)) {
    const packet = parsePacket(datagram);
    nowMs += 5;
    if (packet.kind === "data") {
      receiver ??= new Receiver({
        initialSeq: packet.seq,
        latencyMs: 20,
        peerStartMs: 0,
        bufferPackets: 1024,
        sendControl: () => {},
        deliver: () => {},
      });
      receiver.onData(packet, nowMs);
      receiver.tick(nowMs);
    } else if (packet.type === ControlType.handshake) {
      readConclusion(parseHandshake(packet.body));
    } else if (packet.type === ControlType.ack) parseAck(packet.body);
    else if (packet.type === ControlType.nak) parseNak(packet.body);
    else if (packet.type === ControlType.dropRequest) {
      receiver?.onDropRequest(parseDropRequest(packet.body));
    } else if (packet.type === ControlType.ackAck) receiver?.onAckAck(packet.typeInfo, nowMs);
  }
  receiver?.flush();
}

/**
 * Relay messages as an edge reads them (a packet list, one message each): the hello gives the
 * tracks the frames are checked against; a bad message is refused and the next one still read.
 */
function relayMessages(input: Uint8Array): void {
  let tracks: Track[] | undefined;
  let failure: unknown;
  for (const bytes of decodePacketList(input)) {
    try {
      const message = decodeRelayMessage(bytes, tracks);
      if (message.type === "hello") tracks = message.tracks;
      if (message.type === "frame") parseParameterSets(message.frame);
    } catch (err) {
      if (!(err instanceof ParseError)) throw err;
      failure ??= err;
    }
  }
  if (failure) throw failure;
}

/** What an origin sends of an FLV capture: hello, its frames, end. */
function relaySeed(flv: Uint8Array): Uint8Array {
  const receiver = new RtmpMediaReceiver();
  const frames = flvMessages(flv).flatMap((m) => receiver.receive(m));
  frames.push(...receiver.finishProbe());
  const tracks = receiver.tracks ?? [];
  return encodePacketList([
    encodeHello("relay", tracks),
    ...frames.map(encodeFrame).filter((m) => m.length <= 0xffff),
    encodeEnd("source ended"),
  ]);
}

/** Every fuzz target. */
export const targets: readonly FuzzTarget[] = [
  {
    name: "sdp",
    maxBytes: 70_000,
    run(input) {
      const sdp = parseSdp(decoder.decode(input));
      sdp.media.forEach((media, i) => sdpTrack(media, i));
    },
  },
  {
    name: "rtsp",
    maxBytes: 64_000,
    run(input) {
      const parser = new RtspStreamParser();
      for (const read of reads(input)) {
        parser.push(read);
        for (let m = parser.next(); m; m = parser.next()) parseRtspHeaders(m);
      }
    },
  },
  {
    name: "sip",
    maxBytes: 64_000,
    run: sipInput,
  },
  {
    name: "rtmp_chunks",
    maxBytes: 64_000,
    refusal: unsupportedCodec,
    run(input) {
      const reader = new ChunkReader();
      const receiver = new RtmpMediaReceiver();
      for (const read of reads(input)) handleRtmpMessages(reader.push(read), receiver);
    },
  },
  {
    name: "amf0",
    corpus: "rtmp_chunks",
    // The AMF0 payloads (commands, metadata) of the captured chunk stream.
    seeds: (files) =>
      files.flatMap((file) =>
        new ChunkReader().push(file)
          .filter((m) => m.type === MessageType.commandAmf0 || m.type === MessageType.dataAmf0)
          .map((m) => m.payload.slice())
      ),
    maxBytes: 16_000,
    run(input) {
      decodeAmf0All(input);
    },
  },
  {
    name: "rtmp_handshake",
    maxBytes: 4_000,
    run(input) {
      parseHandshakeHello(input);
    },
  },
  {
    name: "flv",
    maxBytes: 64_000,
    refusal: unsupportedCodec,
    run(input) {
      const receiver = new RtmpMediaReceiver();
      handleRtmpMessages(flvMessages(input), receiver);
      for (const frame of receiver.finishProbe()) parseParameterSets(frame);
    },
  },
  {
    name: "mpegts",
    maxBytes: 64_000,
    run(input) {
      const demuxer = new TsDemuxer();
      const frames: MediaFrame[] = [];
      for (const read of reads(input)) frames.push(...demuxer.push(read));
      frames.push(...demuxer.flush());
      for (const frame of frames) parseParameterSets(frame);
    },
  },
  {
    name: "mp4",
    maxBytes: 64_000,
    async run(input) {
      const demuxer = await Mp4Demuxer.open(memoryByteSource(input));
      for await (const frame of demuxer.frames()) parseParameterSets(frame);
    },
  },
  {
    name: "png",
    maxBytes: 16_000,
    // A watermark file is read whole. Its checks (signature, CRCs, the Adler-32 of stored
    // zlib) are written again after the mutation, or nearly every input would stop there.
    async run(input) {
      await decodePng(restampPngChecks(input));
    },
  },
  {
    name: "rtp_h264",
    maxBytes: 32_000,
    run: (input) => depacketize(input, new H264Depacketizer(0)),
  },
  {
    name: "rtp_h265",
    maxBytes: 32_000,
    run: (input) => depacketize(input, new H265Depacketizer(0)),
  },
  {
    name: "rtp_aac",
    maxBytes: 16_000,
    run: (input) => depacketize(input, new AacDepacketizer(1, aacLayout)),
  },
  {
    name: "rtcp",
    maxBytes: 8_000,
    run(input) {
      for (const packet of decodePacketList(input)) parseSenderReports(packet);
    },
  },
  {
    // Transport-cc feedback (RTPFB FMT 15) as a browser sends it: runs, both status vectors,
    // small and large deltas, padding to 32 bits.
    name: "transport_cc",
    corpus: "rtcp",
    seeds: () => transportCcSeeds(),
    maxBytes: 2_000,
    run(input) {
      parseTransportCc(input);
    },
  },
  {
    name: "srt",
    maxBytes: 16_000,
    run: srtDatagrams,
  },
  {
    name: "relay",
    corpus: "flv",
    seeds: (files) => files.map(relaySeed),
    maxBytes: 64_000,
    run: relayMessages,
  },
  {
    name: "signaling",
    maxBytes: 8_000,
    run(input) {
      const frame = parseFrame(decoder.decode(input));
      const stream = frame.data[0] as { sdp?: unknown } | null | undefined;
      if (typeof stream === "object" && stream && typeof stream.sdp === "string") {
        parseSdp(stream.sdp);
      }
    },
  },
];
