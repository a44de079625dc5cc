/**
 * Fuzz-style tests (seeded PRNG, so a failure replays) of what an RTSP camera feeds the
 * server: the RTSP byte stream, the SDP, RTP/RTCP packets and every depacketizer. Random,
 * mutated and truncated input must give a typed ParseError or nothing, never another
 * exception, a hang, or a buffer that grows past its bound.
 */
import assert from "node:assert/strict";
import { ParseError } from "../core/errors.ts";
import { parseSdp } from "../media/formats/sdp/sdp.ts";
import { parseChallenge } from "../media/protocols/rtsp/auth.ts";
import { parseRtpInfo, parseSession, parseTransport } from "../media/protocols/rtsp/headers.ts";
import { parserCapacityBytes, RtspStreamParser } from "../media/protocols/rtsp/message.ts";
import { AacDepacketizer } from "../media/rtp/aac_depacketizer.ts";
import type { Depacketizer } from "../media/rtp/depacketizer.ts";
import { maxAccessUnitBytes } from "../media/rtp/depacketizer.ts";
import { FrameDepacketizer } from "../media/rtp/frame_depacketizer.ts";
import { prng } from "../media/formats/test_fixtures.ts";
import { H264Depacketizer } from "../media/rtp/h264_depacketizer.ts";
import { H265Depacketizer } from "../media/rtp/h265_depacketizer.ts";
import { parseRtpPacket } from "../media/rtp/packet.ts";
import { parseSenderReports } from "../media/rtp/rtcp.ts";
import { sdpTrack } from "../media/rtp/sdp_track.ts";
import { rtp } from "../media/rtp/test_packet.ts";

/** Iterations per target; with the per-run time limit this keeps the file near a second. */
const iterations = 3000;
/** Longest a target may take for all its iterations, in milliseconds (a hang fails it). */
const targetTimeLimitMs = 5000;

/** Random bytes, up to `max` of them. */
function randomBytes(rand: () => number, max: number): Uint8Array {
  const out = new Uint8Array(Math.floor(rand() * max));
  for (let i = 0; i < out.length; i++) out[i] = Math.floor(rand() * 256);
  return out;
}

/** A valid sample with a few bytes flipped, or cut short. */
function mutate(rand: () => number, sample: Uint8Array): Uint8Array {
  const out = sample.slice(0, rand() < 0.3 ? Math.floor(rand() * sample.length) : sample.length);
  const flips = Math.floor(rand() * 4);
  for (let i = 0; i < flips && out.length > 0; i++) {
    out[Math.floor(rand() * out.length)] = Math.floor(rand() * 256);
  }
  return out;
}

/** Runs `fn` on each input; only ParseError may escape. Counts how many inputs threw. */
function fuzz(
  name: string,
  seed: number,
  input: (rand: () => number) => Uint8Array,
  fn: (b: Uint8Array) => void,
) {
  const rand = prng(seed);
  const started = performance.now();
  let rejected = 0;
  for (let i = 0; i < iterations; i++) {
    const bytes = input(rand);
    try {
      fn(bytes);
    } catch (err) {
      if (!(err instanceof ParseError)) {
        throw new Error(`${name} #${i}: ${(err as Error).name} is not a ParseError`, {
          cause: err,
        });
      }
      rejected++;
    }
  }
  assert.ok(performance.now() - started < targetTimeLimitMs, `${name} too slow`);
  return rejected;
}

const enc = new TextEncoder();
const response = enc.encode(
  "RTSP/1.0 200 OK\r\nCSeq: 3\r\nContent-Base: rtsp://h/s/\r\nContent-Length: 24\r\n\r\n" +
    "v=0\r\no=- 1 1 IN IP4 h\r\ns=",
);

Deno.test("fuzz: the RTSP stream parser rejects or waits, and never holds more than its capacity", () => {
  const rejected = fuzz("rtsp", 1, (rand) => {
    const r = rand();
    if (r < 0.3) return randomBytes(rand, 300);
    const frame = Uint8Array.of(0x24, 0, 0, 4, 1, 2, 3, 4);
    const sample = r < 0.6 ? response : new Uint8Array([...frame, ...response, ...frame]);
    return mutate(rand, sample);
  }, (bytes) => {
    const parser = new RtspStreamParser();
    // Fed in small reads, as a socket would, and drained after each.
    for (let i = 0; i < bytes.length; i += 7) {
      parser.push(bytes.subarray(i, i + 7));
      for (let m = parser.next(); m; m = parser.next()) assert.ok(m.kind);
      assert.ok(parser.buffered <= parserCapacityBytes);
    }
  });
  assert.ok(rejected > 100, `only ${rejected} inputs rejected: the fuzzer is not reaching errors`);

  // A peer streaming header bytes without end is refused once the header limit passes.
  const parser = new RtspStreamParser();
  const chunk = enc.encode("RTSP/1.0 200 OK\r\nX: " + "a".repeat(4096));
  assert.throws(() => {
    for (let i = 0; i < 1000; i++) {
      parser.push(chunk);
      parser.next();
    }
  }, ParseError);
});

Deno.test("fuzz: SDP and RTSP header parsers", () => {
  const sdp = enc.encode(
    "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=x\r\nt=0 0\r\nm=video 0 RTP/AVP 96\r\n" +
      "a=rtpmap:96 H264/90000\r\na=fmtp:96 packetization-mode=1;sprop-parameter-sets=" +
      "Z0LAHtoCgL/lwFqDAwNSgAAAAwCAAAAZR4sXUA==,aM48gA==\r\na=control:stream=0\r\n" +
      "m=audio 0 RTP/AVP 97\r\na=rtpmap:97 MPEG4-GENERIC/44100/1\r\n" +
      "a=fmtp:97 mode=AAC-hbr;config=1208;sizelength=13;indexlength=3;indexdeltalength=3\r\n",
  );
  const dec = new TextDecoder();
  fuzz("sdp", 2, (rand) => rand() < 0.2 ? randomBytes(rand, 200) : mutate(rand, sdp), (b) => {
    const parsed = parseSdp(dec.decode(b));
    parsed.media.forEach((m, i) => sdpTrack(m, i));
  });
  const headers = [
    "RTP/AVP/TCP;unicast;interleaved=0-1",
    "RTP/AVP;unicast;client_port=31000-31001;server_port=5000-5001",
    "12345678;timeout=60",
    "url=rtsp://h/s/stream=0;seq=1;rtptime=2",
    'Digest realm="r", nonce="n", qop="auth"',
  ].map((h) => enc.encode(h));
  fuzz("headers", 3, (rand) => mutate(rand, headers[Math.floor(rand() * headers.length)]), (b) => {
    const text = dec.decode(b);
    parseTransport(text);
    parseSession(text);
    parseRtpInfo(text);
    parseChallenge(text);
  });
});

Deno.test("fuzz: RTP and RTCP packet parsers", () => {
  fuzz("rtp", 4, (rand) => randomBytes(rand, 64), (b) => {
    const p = parseRtpPacket(b);
    assert.ok(p.payload.length <= b.length);
  });
  fuzz("rtcp", 5, (rand) => randomBytes(rand, 64), (b) => parseSenderReports(b));
});

const depacketizers: [string, () => Depacketizer][] = [
  ["h264", () => new H264Depacketizer(0)],
  ["h265", () => new H265Depacketizer(0)],
  ["aac", () => new AacDepacketizer(0, { sizeLength: 13, indexLength: 3, indexDeltaLength: 3 })],
  ["pcmu", () => new FrameDepacketizer(0, "PCMU")],
];

for (const [i, [name, make]] of depacketizers.entries()) {
  Deno.test(`fuzz: ${name} depacketizer over random packet sequences`, () => {
    const d = make();
    let frames = 0;
    let bytes = 0;
    let seq = 0;
    const rejected = fuzz(name, 10 + i, (rand) => randomBytes(rand, 1400), (payload) => {
      const packet = rtp({
        seq: seq++,
        ts: Math.floor(seq / 5) * 3000,
        marker: seq % 5 === 0,
        payload,
      });
      d.push(packet, (f) => {
        frames++;
        bytes += f.data.length;
        assert.ok(f.data.length <= maxAccessUnitBytes + 4096);
      });
    });
    assert.ok(frames + rejected > 0);
    assert.ok(bytes < iterations * 1400 * 2, "output larger than what went in");
  });
}

Deno.test("fuzz: an FU-A that never ends is bounded by the access unit limit", () => {
  const d = new H264Depacketizer(0);
  const chunk = new Uint8Array(60_000);
  chunk[0] = 0x7c;
  chunk[1] = 0x85;
  d.push(rtp({ seq: 0, payload: chunk }), () => {});
  chunk[1] = 0x05;
  let error: unknown;
  for (let i = 1; i < 1 + maxAccessUnitBytes / 50_000 && !error; i++) {
    try {
      d.push(rtp({ seq: i, payload: chunk }), () => {});
    } catch (err) {
      error = err;
    }
  }
  assert.ok(error instanceof ParseError, "an endless unit must be refused");
});
