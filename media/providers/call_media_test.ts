import assert from "node:assert/strict";
import dgram from "node:dgram";
import { ServiceUnavailableError } from "../../core/errors.ts";
import { silentLogger } from "../../core/log.ts";
import { DtmfDetector, goertzelPower } from "../codecs/dtmf_tone.ts";
import { g711Decode, g711Encode } from "../codecs/g711.ts";
import type { CodecEngine } from "../engine/engine.ts";
import { createEngine } from "../engine/select.ts";
import type { MediaFrame, Track } from "../frame.ts";
import { opusPacketSamples } from "../codecs/opus.ts";
import {
  answerCallOffer,
  buildCallOffer,
  negotiateAnswer,
  type NegotiatedMedia,
} from "../protocols/sip/call_sdp.ts";
import { H264NalType, h264NalType } from "../codecs/h264.ts";
import { joinLengthPrefixed, splitAnnexB, splitLengthPrefixed } from "../codecs/nalu.ts";
import { writeRtpHeader } from "../rtp/rtp_writer.ts";
import { TsDemuxer } from "../formats/mpegts/demuxer.ts";
import { TsMuxer } from "../formats/mpegts/muxer.ts";
import { Stream } from "../stream.ts";
import { CallMedia } from "./call_media.ts";
import { PortPool } from "./port_pool.ts";

const host = "127.0.0.1";
/** A range per test file run, away from other suites' ports. */
const rangeBase = 43000 + Math.floor(Math.random() * 50) * 40;
const pool = new PortPool(rangeBase, rangeBase + 29);

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/** A stream the test pushes `tracks` into, named (and identified) `name`. */
function testStream(name: string, tracks: Track[]): Stream {
  return new Stream({
    name,
    mediaSessionId: name,
    tracks,
    mediaProvider: "test",
    stopProvider: () => Promise.resolve(),
  });
}

/** A mono 8 kHz G.711 audio track, id 0. */
function g711Track(codec: "PCMU" | "PCMA"): Track {
  return { id: 0, kind: "audio", codec, clockRate: 8000, sampleRate: 8000, channels: 1 };
}

/** A G.711 frame of track 0 at `pts` (samples). */
function g711Frame(codec: "PCMU" | "PCMA", pts: number, data: Uint8Array): MediaFrame {
  return { trackId: 0, codec, pts, dts: pts, keyframe: true, data };
}

async function until(what: string, test: () => boolean, timeoutMs = 5000): Promise<void> {
  const end = performance.now() + timeoutMs;
  while (!test()) {
    if (performance.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

/** A 1 kHz tone of `seconds` as a WAV file in a temporary folder. */
async function toneFile(dir: string, seconds: number): Promise<string> {
  const path = `${dir}/tone.wav`;
  const out = await new Deno.Command("ffmpeg", {
    args: [
      ...["-v", "error", "-f", "lavfi", "-i", `sine=frequency=1000:duration=${seconds}`],
      ...["-ac", "1", "-ar", "44100", "-y", path],
    ],
  }).output();
  assert.equal(out.code, 0, new TextDecoder().decode(out.stderr));
  return path;
}

/** What one side received. */
class Received {
  frames: MediaFrame[] = [];
  digits: string[] = [];
  sink = (frame: MediaFrame) => this.frames.push({ ...frame, data: frame.data.slice() });

  pcm(codec: "PCMU" | "PCMA" = "PCMU"): Int16Array {
    const bytes = new Uint8Array(this.frames.reduce((n, f) => n + f.data.length, 0));
    let at = 0;
    for (const f of this.frames) {
      bytes.set(f.data, at);
      at += f.data.length;
    }
    return g711Decode(codec, bytes);
  }
}

interface Pair {
  a: CallMedia;
  b: CallMedia;
  atA: Received;
  atB: Received;
  mediaA: NegotiatedMedia;
  mediaB: NegotiatedMedia;
  engine: CodecEngine;
  close(): Promise<void>;
}

/** A calls B: A offers, B answers, both start. `bPort` overrides the port B's SDP names. */
async function call(
  options: {
    bPort?: number;
    start?: boolean;
    video?: boolean;
    preferOpus?: boolean;
    idleSilence?: boolean;
    /** Payload types A's offer keeps in its audio `m=` line (all by default). */
    audioFormats?: string;
  } = {},
): Promise<Pair> {
  const engine = createEngine("native");
  const open = () =>
    CallMedia.open({
      hostname: host,
      ports: pool,
      video: options.video ?? false,
      engine,
      log: silentLogger,
      rtcpIntervalMs: 300,
      idleSilence: options.idleSilence,
    });
  const a = await open();
  const b = await open();
  const fullOffer = buildCallOffer({
    address: a.address,
    audioPort: a.audioPort,
    videoPort: a.videoPort,
    preferOpus: options.preferOpus,
  });
  const offer = options.audioFormats === undefined
    ? fullOffer
    : fullOffer.replace(/(m=audio \d+ RTP\/AVP) [\d ]+/, `$1 ${options.audioFormats}`);
  const answer = answerCallOffer(offer, {
    address: b.address,
    audioPort: options.bPort ?? b.audioPort,
    videoPort: b.videoPort,
  });
  const mediaA = negotiateAnswer(answer.sdp);
  const mediaB = answer.media;
  const atA = new Received();
  const atB = new Received();
  a.onDtmf = (d) => atA.digits.push(d);
  b.onDtmf = (d) => atB.digits.push(d);
  if (options.start !== false) {
    a.start(mediaA, atA.sink);
    b.start(mediaB, atB.sink);
  }
  return {
    a,
    b,
    atA,
    atB,
    mediaA,
    mediaB,
    engine,
    async close() {
      await a.close();
      await b.close();
      await engine.close();
    },
  };
}

Deno.test("call media: a sound injected at A arrives at B as PCMU frames with the tone", async () => {
  const dir = await Deno.makeTempDir();
  const p = await call();
  try {
    assert.equal(p.mediaA.audio?.codec, "PCMU");
    await p.a.injectSound(await toneFile(dir, 1));
    await sleep(100);
    const frames = p.atB.frames;
    assert.ok(frames.length >= 45 && frames.length <= 52, `${frames.length} frames`);
    assert.ok(frames.every((f) => f.codec === "PCMU" && f.trackId === 0 && f.data.length === 160));
    for (let i = 1; i < frames.length; i++) assert.equal(frames[i].pts - frames[i - 1].pts, 160);
    assert.deepEqual(p.b.tracks.map((t) => [t.id, t.kind, t.codec, t.clockRate]), [
      [0, "audio", "PCMU", 8000],
    ]);
    const pcm = p.atB.pcm();
    const rms = Math.sqrt(pcm.reduce((n, s) => n + s * s, 0) / pcm.length);
    assert.ok(rms > 1000, `rms ${rms}`);
    const tone = goertzelPower(pcm, 1000, 8000);
    assert.ok(tone > 100 * goertzelPower(pcm, 700, 8000), "1 kHz dominates");
    assert.ok(2 * Math.sqrt(tone) / pcm.length > 0.8 * rms * Math.SQRT2, "most energy at 1 kHz");
    assert.equal(p.a.stats.packetsSent, frames.length);
    assert.equal(p.b.stats.packetsReceived, frames.length);
    assert.equal(p.b.stats.packetsLost, 0);
    assert.ok(p.b.stats.jitterMs < 20, `jitter ${p.b.stats.jitterMs}`);
    // RTCP ran both ways: B reported on A's audio, A measured the round trip.
    await until("a round trip from RTCP", () => p.a.stats.roundTripMs !== undefined, 2000);
    assert.equal(p.a.stats.remotePacketsLost, 0);
    assert.ok(p.a.stats.roundTripMs! < 100, `rtt ${p.a.stats.roundTripMs}`);
  } finally {
    await p.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("call media: RFC 2833 digits arrive once each, in order", async () => {
  const p = await call();
  try {
    assert.equal(p.mediaA.audio?.telephoneEventPt, 101);
    await p.a.sendDtmf("123#", "RFC2833");
    await until("four digits", () => p.atB.digits.length === 4);
    await sleep(100);
    assert.deepEqual(p.atB.digits, ["1", "2", "3", "#"]);
    assert.equal(p.b.stats.dtmfReceived, 4);
    assert.equal(p.atB.frames.length, 0, "events are not audio frames");
    // Each key: 2 updates + 3 end packets.
    assert.equal(p.a.stats.packetsSent, 20);
    await assert.rejects(() => p.a.sendDtmf("12x", "RFC2833"), /0-9/);
  } finally {
    await p.close();
  }
});

Deno.test("call media: INBAND digits are tones in the call's codec, found by the Goertzel detector", async () => {
  const p = await call();
  try {
    await p.a.sendDtmf("159*", "INBAND");
    await sleep(100);
    const keys: string[] = [];
    new DtmfDetector((k) => keys.push(k)).push(p.atB.pcm());
    assert.deepEqual(keys, ["1", "5", "9", "*"]);
    assert.deepEqual(p.atB.digits, [], "no RFC 2833 events");
  } finally {
    await p.close();
  }
});

Deno.test("call media: without telephone-event RFC 2833 is refused", async () => {
  const p = await call({ start: false });
  try {
    const audio = { ...p.mediaA.audio!, telephoneEventPt: undefined };
    p.a.start({ audio }, () => {});
    await assert.rejects(() => p.a.sendDtmf("1", "RFC2833"), /telephone-event/);
  } finally {
    await p.close();
  }
});

Deno.test("call media: symmetric RTP sends back to where the far end's RTP comes from", async () => {
  // B's SDP names a port nobody listens on; B's media really comes from its own port.
  const p = await call({ bPort: rangeBase + 34 });
  try {
    await p.a.sendDtmf("1", "RFC2833");
    await sleep(50);
    assert.deepEqual(p.atB.digits, [], "A sent to the SDP's port");
    await p.b.sendDtmf("9", "RFC2833");
    await until("B's digit at A", () => p.atA.digits.length === 1);
    await p.a.sendDtmf("2", "RFC2833");
    await until("A's digit at B after the latch", () => p.atB.digits.length === 1);
    assert.deepEqual(p.atB.digits, ["2"]);
  } finally {
    await p.close();
  }
});

Deno.test("call media: hold — nothing is sent while the far end is sendonly or inactive", async () => {
  const p = await call();
  try {
    p.a.update({ audio: { ...p.mediaA.audio!, direction: "sendonly" } });
    await p.a.sendDtmf("1", "INBAND");
    assert.equal(p.a.stats.packetsSent, 0);
    p.a.update({ audio: { ...p.mediaA.audio!, direction: "sendrecv" } });
    await p.a.sendDtmf("1", "INBAND");
    assert.ok(p.a.stats.packetsSent >= 7);
    // B holds A (A is recvonly from B's view): what A still sends is dropped at B.
    const before = p.atB.frames.length;
    p.b.update({ audio: { ...p.mediaB.audio!, direction: "recvonly" } });
    await p.a.sendDtmf("1", "INBAND");
    assert.equal(p.atB.frames.length, before);
  } finally {
    await p.close();
  }
});

Deno.test("call media: a stream's audio is sent in 20 ms packets; A-law is recoded to the call's μ-law", async () => {
  const p = await call();
  const source = testStream("src", [g711Track("PCMA")]);
  try {
    p.a.send(source);
    // 400 ms of a 1 kHz tone in A-law frames of 80 ms, pushed in real time.
    const tone = Int16Array.from({ length: 3200 }, (_, i) => 8000 * Math.sin(2 * Math.PI * i / 8));
    for (let i = 0; i < 5; i++) {
      source.push(
        g711Frame("PCMA", i * 640, g711Encode("PCMA", tone.subarray(i * 640, (i + 1) * 640))),
      );
      await sleep(80);
    }
    await sleep(150);
    p.a.stopSending();
    const pcm = p.atB.pcm("PCMU");
    assert.ok(pcm.length >= 2880 && pcm.length <= 3200, `${pcm.length} samples`);
    assert.ok(p.atB.frames.every((f) => f.data.length === 160));
    assert.ok(goertzelPower(pcm, 1000, 8000) > 100 * goertzelPower(pcm, 600, 8000));
  } finally {
    source.end();
    await p.close();
  }
});

Deno.test("call media: reordering, loss and an SSRC change mid-call give continuous pts", async () => {
  const p = await call({ start: false });
  const received = new Received();
  p.b.start(p.mediaB, received.sink);
  const socket = dgram.createSocket("udp4");
  await new Promise<void>((r) => socket.bind(0, host, () => r()));
  const send = (
    seq: number,
    ts: number,
    ssrc: number,
    pt = 0,
    payload = new Uint8Array(160).fill(0xff),
  ) => {
    const packet = new Uint8Array(12 + payload.length);
    packet.set(payload, 12);
    writeRtpHeader(packet, 0, {
      marker: false,
      payloadType: pt,
      sequenceNumber: seq,
      timestamp: ts,
      ssrc,
    });
    socket.send(packet, p.b.audioPort, host);
  };
  try {
    // Deno's node:dgram sends a socket's first burst in reverse order: a first datagram (not
    // RTP, ignored) goes alone.
    socket.send(Uint8Array.of(1, 2, 3), p.b.audioPort, host);
    await sleep(50);
    // Source 1: 65534, 65535, 1 (0 lost), 3 before 2; then source 2 far away in time stamps.
    for (const seq of [65534, 65535, 1, 3, 2]) send(seq, 1000 + ((seq + 2) & 0xffff) * 160, 11);
    await sleep(150);
    for (let seq = 500; seq < 503; seq++) send(seq, 9_000_000 + (seq - 500) * 160, 22);
    send(9, 0, 22, 96); // an unnegotiated payload type is ignored
    // A key under an SSRC of its own, beside the audio, which goes on undisturbed.
    const digits: string[] = [];
    p.b.onDtmf = (d) => digits.push(d);
    send(40, 5, 33, 101, Uint8Array.of(7, 0x0a, 0x01, 0x90));
    await sleep(30);
    send(503, 9_000_000 + 3 * 160, 22);
    await until("nine frames", () => received.frames.length === 9);
    assert.deepEqual(digits, ["7"]);
    const pts = received.frames.map((f) => f.pts);
    assert.deepEqual(pts.slice(0, 5), [0, 160, 480, 640, 800]);
    // Source 2 carries on after the wall-clock gap (150 ms = 1200 samples at least).
    assert.ok(pts[5] >= 800 + 1200 && pts[5] < 800 + 4000, `pts ${pts[5]}`);
    assert.deepEqual([pts[6] - pts[5], pts[7] - pts[6], pts[8] - pts[7]], [160, 160, 160]);
    assert.equal(p.b.stats.packetsLost, 1);
    assert.equal(p.b.stats.packetsReceived, 10);
  } finally {
    await new Promise<void>((r) => socket.close(() => r()));
    await p.close();
  }
});

Deno.test("call media: an exhausted port range is a ServiceUnavailableError, and close frees it", async () => {
  const engine = createEngine("native");
  const small = new PortPool(rangeBase + 36, rangeBase + 37);
  const o = { hostname: host, ports: small, video: false, engine, log: silentLogger };
  const first = await CallMedia.open(o);
  try {
    assert.equal(first.audioPort, rangeBase + 36);
    await assert.rejects(() => CallMedia.open(o), ServiceUnavailableError);
    await assert.rejects(
      () =>
        CallMedia.open({ ...o, ports: new PortPool(rangeBase + 36, rangeBase + 39), video: true }),
      ServiceUnavailableError,
    );
  } finally {
    await first.close();
  }
  const again = await CallMedia.open(o);
  await again.close();
  await engine.close();
});

Deno.test("call media: sipp's -rtp_echo sends our tone and our RFC 2833 digits back", async () => {
  const dir = await Deno.makeTempDir();
  const sippMediaPort = rangeBase + 30;
  // sipp echoes RTP on its -mp port from startup, with no call: the media phase alone.
  const sipp = new Deno.Command("sipp", {
    args: [
      ...["-sn", "uas", "-rtp_echo", "-mp", String(sippMediaPort)],
      ...["-p", String(45000 + Math.floor(Math.random() * 1000)), "-i", host, "-mi", host],
      "-nostdin",
    ],
    stdin: "null",
    stdout: "null",
    stderr: "null",
  }).spawn();
  const engine = createEngine("native");
  const media = await CallMedia.open({
    hostname: host,
    ports: pool,
    video: false,
    engine,
    log: silentLogger,
  });
  try {
    // The answer of peers/sipp/uas_echo_dtmf.xml.
    const answer = [
      "v=0",
      "o=user1 53655765 2353687637 IN IP4 127.0.0.1",
      "s=-",
      "c=IN IP4 127.0.0.1",
      "t=0 0",
      `m=audio ${sippMediaPort} RTP/AVP 0 8 101`,
      "a=rtpmap:0 PCMU/8000",
      "a=rtpmap:8 PCMA/8000",
      "a=rtpmap:101 telephone-event/8000",
      "a=fmtp:101 0-15",
      "a=sendrecv",
      "",
    ].join("\r\n");
    const received = new Received();
    media.onDtmf = (d) => received.digits.push(d);
    media.start(negotiateAnswer(answer), received.sink);
    // Until sipp listens, what we send is lost: a short tone at a time until one comes back.
    const deadline = performance.now() + 10_000;
    while (received.frames.length === 0) {
      assert.ok(performance.now() < deadline, "no echo from sipp");
      await media.sendDtmf("0", "INBAND");
      await sleep(50);
    }
    await sleep(100);
    received.frames.length = 0;
    await media.injectSound(await toneFile(dir, 1));
    await sleep(200);
    const pcm = received.pcm();
    assert.ok(received.frames.length >= 45, `${received.frames.length} frames echoed`);
    const rms = Math.sqrt(pcm.reduce((n, s) => n + s * s, 0) / pcm.length);
    assert.ok(rms > 1000, `rms ${rms}`);
    assert.ok(goertzelPower(pcm, 1000, 8000) > 100 * goertzelPower(pcm, 700, 8000));
    received.digits.length = 0;
    await media.sendDtmf("123#", "RFC2833");
    await until("the echoed digits", () => received.digits.length === 4);
    assert.deepEqual(received.digits, ["1", "2", "3", "#"]);
  } finally {
    await media.close();
    await engine.close();
    sipp.kill("SIGTERM");
    await sipp.status;
    await Deno.remove(dir, { recursive: true });
  }
});

/** `count` H.264 access units (length-prefixed, AUDs dropped) of a 320x240 test picture. */
async function h264AccessUnits(count: number): Promise<Uint8Array[]> {
  const out = await new Deno.Command("ffmpeg", {
    args: [
      ...["-v", "error", "-f", "lavfi", "-i", "testsrc=size=320x240:rate=30"],
      ...["-frames:v", String(count), "-c:v", "libx264", "-profile:v", "baseline", "-g", "5"],
      ...["-pix_fmt", "yuv420p"],
      ...["-x264-params", "aud=1", "-f", "h264", "pipe:1"],
    ],
    stdout: "piped",
    stderr: "piped",
  }).output();
  assert.equal(out.code, 0, new TextDecoder().decode(out.stderr));
  const units: Uint8Array[][] = [];
  for (const nal of splitAnnexB(out.stdout)) {
    if (h264NalType(nal) === H264NalType.aud) units.push([]);
    else units.at(-1)!.push(nal);
  }
  return units.map((nals) => joinLengthPrefixed(nals));
}

Deno.test("call media: H.264 sent into the call arrives whole, with the parameter sets on the track", async () => {
  const units = await h264AccessUnits(10);
  const p = await call({ video: true });
  const source = testStream("video", [{ id: 0, kind: "video", codec: "H264", clockRate: 90000 }]);
  try {
    assert.equal(p.mediaA.video?.payloadType, 96);
    assert.deepEqual(p.b.tracks.map((t) => [t.id, t.kind, t.codec]), [
      [0, "audio", "PCMU"],
      [1, "video", "H264"],
    ]);
    p.a.send(source);
    for (const [i, data] of units.entries()) {
      source.push({
        trackId: 0,
        codec: "H264",
        pts: i * 3000,
        dts: i * 3000,
        keyframe: i % 5 === 0,
        data,
      });
      await sleep(10);
    }
    await until("ten pictures", () => p.atB.frames.length === 10);
    const frames = p.atB.frames;
    assert.ok(frames.every((f) => f.trackId === 1 && f.codec === "H264"));
    assert.deepEqual(frames.map((f) => f.pts - frames[0].pts), units.map((_, i) => i * 3000));
    assert.deepEqual(frames.map((f) => f.keyframe), units.map((_, i) => i % 5 === 0));
    // Every picture's slices arrive byte for byte (the packetizer may add parameter sets).
    const slices = (au: Uint8Array) =>
      splitLengthPrefixed(au).filter((n) =>
        h264NalType(n) !== H264NalType.sps && h264NalType(n) !== H264NalType.pps
      );
    for (let i = 0; i < 10; i++) {
      assert.deepEqual(slices(frames[i].data), slices(units[i]), `picture ${i}`);
    }
    const config = p.b.tracks[1].config;
    assert.equal(config?.codec, "H264");
    assert.ok(config?.codec === "H264" && config.sps.length === 1 && config.pps.length === 1);
  } finally {
    source.end();
    await p.close();
  }
});

Deno.test("call media: an AAC stream is converted by the engine and arrives as the call's μ-law", async () => {
  const dir = await Deno.makeTempDir();
  const p = await call();
  try {
    const path = `${dir}/tone.ts`;
    const made = await new Deno.Command("ffmpeg", {
      args: [
        ...["-v", "error", "-f", "lavfi", "-i", "sine=frequency=1000:sample_rate=48000"],
        ...["-t", "2", "-c:a", "aac", "-f", "mpegts", path],
      ],
    }).output();
    assert.equal(made.code, 0);
    const demuxer = new TsDemuxer();
    const bytes = await Deno.readFile(path);
    const frames = [...demuxer.push(bytes), ...demuxer.flush()];
    const source = testStream("aac", [{ ...demuxer.tracks[0], id: 0 }]);
    p.a.send(source);
    const clock = demuxer.tracks[0].clockRate;
    const startMs = performance.now();
    for (const frame of frames) {
      await sleep(startMs + frame.pts * 1000 / clock - performance.now());
      source.push({ ...frame, trackId: 0 });
    }
    await until("a second of audio at B", () => p.atB.frames.length >= 50, 5000);
    source.end();
    const pcm = p.atB.pcm();
    assert.ok(p.atB.frames.every((f) => f.codec === "PCMU" && f.data.length === 160));
    assert.ok(goertzelPower(pcm, 1000, 8000) > 100 * goertzelPower(pcm, 700, 8000));
  } finally {
    await p.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("call media: the sent audio pauses while an RFC 2833 event plays, then resumes in time", async () => {
  const p = await call({ start: false });
  const source = testStream("live", [g711Track("PCMU")]);
  const tone = g711Encode("PCMU", Int16Array.from({ length: 160 }, (_, i) => 8000 * Math.sin(i)));
  let pushing = true;
  const pusher = (async () => {
    const startMs = performance.now();
    for (let i = 0; pushing; i++) {
      source.push(g711Frame("PCMU", i * 160, tone));
      await sleep(startMs + (i + 1) * 20 - performance.now());
    }
  })();
  try {
    // Sent before start: it begins with the call.
    p.a.send(source);
    p.a.start(p.mediaA, p.atA.sink);
    p.b.start(p.mediaB, p.atB.sink);
    await until("audio at B", () => p.atB.frames.length >= 10);
    await p.a.sendDtmf("5", "RFC2833");
    await sleep(300);
    assert.deepEqual(p.atB.digits, ["5"]);
    const pts = p.atB.frames.map((f) => f.pts);
    const gaps = pts.slice(1).map((t, i) => t - pts[i]);
    // One gap of the event (100 ms + the end packets' 40 ms), the rest 20 ms apart.
    const long = gaps.filter((g) => g > 160);
    assert.equal(long.length, 1, `gaps ${gaps}`);
    assert.ok(long[0] >= 7 * 160 && long[0] <= 10 * 160, `gap of ${long[0]}`);
  } finally {
    pushing = false;
    await pusher;
    source.end();
    await p.close();
  }
});

/** Received Opus frames decoded by ffmpeg (through MPEG-TS) to 8 kHz mono samples. */
async function decodeOpus(received: Received, track: Track): Promise<Int16Array> {
  const muxer = new TsMuxer({ tracks: [track] });
  const parts = received.frames.map((f) => muxer.mux(f));
  const ts = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const part of parts) {
    ts.set(part, at);
    at += part.length;
  }
  const child = new Deno.Command("ffmpeg", {
    args: ["-v", "error", "-f", "mpegts", "-i", "-", "-ac", "1", "-ar", "8000", "-f", "s16le", "-"],
    stdin: "piped",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const writer = child.stdin.getWriter();
  await writer.write(ts);
  await writer.close();
  const out = await child.output();
  assert.equal(out.code, 0, new TextDecoder().decode(out.stderr));
  return new Int16Array(out.stdout.buffer, 0, out.stdout.length >> 1);
}

function rmsOf(pcm: Int16Array): number {
  return Math.sqrt(pcm.reduce((n, s) => n + s * s, 0) / Math.max(1, pcm.length));
}

Deno.test("call media, Opus: a sound injected at A arrives at B as 20 ms Opus packets with the tone", async () => {
  const dir = await Deno.makeTempDir();
  const p = await call({ preferOpus: true });
  try {
    assert.equal(p.mediaA.audio?.codec, "OPUS");
    assert.equal(p.mediaB.audio?.codec, "OPUS");
    assert.deepEqual(
      p.b.tracks.map((t) => [t.id, t.kind, t.codec, t.clockRate, t.channels]),
      [[0, "audio", "OPUS", 48000, 2]],
    );
    await p.a.injectSound(await toneFile(dir, 1));
    await sleep(100);
    const frames = p.atB.frames;
    assert.ok(frames.length >= 45 && frames.length <= 52, `${frames.length} frames`);
    assert.ok(frames.every((f) => f.codec === "OPUS" && opusPacketSamples(f.data) === 960));
    for (let i = 1; i < frames.length; i++) assert.equal(frames[i].pts - frames[i - 1].pts, 960);
    const pcm = await decodeOpus(p.atB, p.b.tracks[0]);
    const rms = rmsOf(pcm);
    assert.ok(rms > 1000, `rms ${rms}`);
    const tone = goertzelPower(pcm, 1000, 8000);
    assert.ok(tone > 100 * goertzelPower(pcm, 700, 8000), "1 kHz dominates");
    assert.equal(p.b.stats.packetsLost, 0);
    assert.ok(p.b.stats.jitterMs < 20, `jitter ${p.b.stats.jitterMs}`);
  } finally {
    await p.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("call media, Opus: RFC 2833 digits on the 48 kHz telephone-event, INBAND tones detected", async () => {
  const p = await call({ preferOpus: true });
  try {
    assert.equal(p.mediaA.audio?.telephoneEventPt, 110);
    assert.equal(p.mediaA.audio?.telephoneEventClockRate, 48000);
    await p.a.sendDtmf("123#", "RFC2833");
    await until("four digits", () => p.atB.digits.length === 4);
    assert.deepEqual(p.atB.digits, ["1", "2", "3", "#"]);
    assert.equal(p.atB.frames.length, 0, "events are not audio frames");
    await p.a.sendDtmf("159*", "INBAND");
    await sleep(100);
    const keys: string[] = [];
    new DtmfDetector((k) => keys.push(k)).push(await decodeOpus(p.atB, p.b.tracks[0]));
    assert.deepEqual(keys, ["1", "5", "9", "*"]);
  } finally {
    await p.close();
  }
});

Deno.test("call media, Opus: a stream's Opus passes as it is; idle slots carry Opus silence", async () => {
  const p = await call({ preferOpus: true });
  const track: Track = {
    id: 0,
    kind: "audio",
    codec: "OPUS",
    clockRate: 48000,
    sampleRate: 48000,
    channels: 2,
    config: { codec: "OPUS" },
  };
  const source = testStream("opus-src", [track]);
  try {
    p.a.send(source);
    // Distinct payloads that are not real Opus: they must arrive byte for byte, unconverted.
    const sent: Uint8Array[] = [];
    for (let i = 0; i < 10; i++) {
      const data = new Uint8Array([0xfc, i, 1, 2, 3]);
      sent.push(data);
      source.push({ trackId: 0, codec: "OPUS", pts: i * 960, dts: i * 960, keyframe: true, data });
    }
    await until("ten packets", () => p.atB.frames.length >= 10);
    assert.deepEqual(p.atB.frames.slice(0, 10).map((f) => [...f.data]), sent.map((d) => [...d]));
    p.a.send(undefined);
  } finally {
    source.end();
    await p.close();
  }
  // Idle silence: a valid Opus frame that decodes to silence, one per 20 ms.
  const q = await call({ preferOpus: true, idleSilence: true });
  try {
    await sleep(300);
    const frames = q.atB.frames;
    assert.ok(frames.length >= 10, `${frames.length} silence packets`);
    assert.ok(frames.every((f) => opusPacketSamples(f.data) === 960));
    const pcm = await decodeOpus(q.atB, q.b.tracks[0]);
    assert.ok(pcm.length > 0 && rmsOf(pcm) < 1, `rms ${rmsOf(pcm)}`);
  } finally {
    await q.close();
  }
});

/** Received G.722 frames decoded by ffmpeg to 8 kHz mono samples. */
async function decodeG722(received: Received): Promise<Int16Array> {
  const bytes = new Uint8Array(received.frames.reduce((n, f) => n + f.data.length, 0));
  let at = 0;
  for (const f of received.frames) {
    bytes.set(f.data, at);
    at += f.data.length;
  }
  const child = new Deno.Command("ffmpeg", {
    args: ["-v", "error", "-f", "g722", "-i", "-", "-ar", "8000", "-f", "s16le", "-"],
    stdin: "piped",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const writer = child.stdin.getWriter();
  await writer.write(bytes);
  await writer.close();
  const out = await child.output();
  assert.equal(out.code, 0, new TextDecoder().decode(out.stderr));
  return new Int16Array(out.stdout.buffer, 0, out.stdout.length >> 1);
}

Deno.test("call media, G.722: an injected tone, INBAND and RFC 2833 digits arrive; the track is 16 kHz at an 8 kHz clock", async () => {
  const dir = await Deno.makeTempDir();
  const p = await call({ audioFormats: "9 101" });
  try {
    assert.equal(p.mediaB.audio?.codec, "G722");
    assert.deepEqual(
      p.b.tracks.map((t) => [t.codec, t.clockRate, t.sampleRate, t.channels]),
      [["G722", 8000, 16000, 1]],
    );
    await p.a.injectSound(await toneFile(dir, 1));
    await sleep(100);
    const frames = p.atB.frames;
    assert.ok(frames.length >= 45 && frames.length <= 52, `${frames.length} frames`);
    assert.ok(frames.every((f) => f.codec === "G722" && f.data.length === 160));
    for (let i = 1; i < frames.length; i++) assert.equal(frames[i].pts - frames[i - 1].pts, 160);
    const pcm = await decodeG722(p.atB);
    assert.ok(rmsOf(pcm) > 1000, `rms ${rmsOf(pcm)}`);
    assert.ok(goertzelPower(pcm, 1000, 8000) > 100 * goertzelPower(pcm, 700, 8000));
    p.atB.frames = [];
    await p.a.sendDtmf("37", "RFC2833");
    await until("two digits", () => p.atB.digits.length === 2);
    assert.deepEqual(p.atB.digits, ["3", "7"]);
    await p.a.sendDtmf("159*", "INBAND");
    await sleep(100);
    const keys: string[] = [];
    new DtmfDetector((k) => keys.push(k)).push(await decodeG722(p.atB));
    assert.deepEqual(keys, ["1", "5", "9", "*"]);
  } finally {
    await p.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("call media, G.722: a PCMU stream is converted by the engine; idle silence decodes silent", async () => {
  const p = await call({ audioFormats: "9 101", idleSilence: true });
  const source = testStream("pcmu-src", [g711Track("PCMU")]);
  try {
    await sleep(300);
    const idle = await decodeG722(p.atB);
    assert.ok(p.atB.frames.length >= 10 && rmsOf(idle) < 10, `idle rms ${rmsOf(idle)}`);
    p.atB.frames = [];
    p.a.send(source);
    // 1 s of a 1 kHz tone in μ-law frames of 20 ms, pushed in real time.
    const tone = Int16Array.from({ length: 160 }, (_, i) => 8000 * Math.sin(2 * Math.PI * i / 8));
    for (let i = 0; i < 50; i++) {
      source.push(g711Frame("PCMU", i * 160, g711Encode("PCMU", tone)));
      await sleep(20);
    }
    await sleep(500);
    const pcm = await decodeG722(p.atB);
    assert.ok(goertzelPower(pcm, 1000, 8000) > 100 * goertzelPower(pcm, 700, 8000), "tone");
    assert.ok(rmsOf(pcm) > 1000, `rms ${rmsOf(pcm)}`);
    p.a.send(undefined);
  } finally {
    source.end();
    await p.close();
  }
});
