/**
 * The relay between nodes on 127.0.0.1: an origin (Deno.serve upgrading to WebSocket and
 * calling serveRelay on a Stream fed with real H.264 + AAC frames) and an edge (RelayPull
 * into a second StreamRegistry).
 */
import { concatBytes } from "../signaling/websocket/bytes.ts";
import assert from "node:assert/strict";
import { BadGatewayError, ConflictError, ForbiddenError, NotFoundError } from "../core/errors.ts";
import { silentLogger } from "../core/log.ts";
import { StreamRegistry } from "../core/stream_registry.ts";
import { lengthPrefixedToAnnexB } from "../media/codecs/nalu.ts";
import type { MediaFrame, Track } from "../media/frame.ts";
import { Mp4Demuxer } from "../media/formats/mp4/demuxer.ts";
import { decode, fixture, tempPath } from "../media/formats/test_fixtures.ts";
import {
  decodeRelayMessage,
  encodeDropped,
  encodeEnd,
  encodeFrame,
  encodeHello,
  type RelayMessage,
} from "../media/protocols/relay/relay_message.ts";
import type { RelayCounters } from "../media/protocols/relay/relay_transport.ts";
import { openFileByteSource } from "../media/providers/file_source.ts";
import { RelayPull } from "../media/providers/relay_pull.ts";
import { serveRelay } from "../media/publishers/relay_sender.ts";
import { Stream } from "../media/stream.ts";
import { cutServerConnections } from "./helpers/connection_cut.ts";
import { RawWsClient } from "./helpers/raw_ws_client.ts";

/** The tracks and frames (decode order) of the 2 s 320x240 H.264 + AAC fixture. */
async function clip(): Promise<{ tracks: Track[]; frames: MediaFrame[] }> {
  const source = await openFileByteSource(await fixture("h264_aac", "mp4"));
  try {
    const demuxer = await Mp4Demuxer.open(source);
    const frames: MediaFrame[] = [];
    for await (const frame of demuxer.frames()) frames.push(frame);
    return { tracks: [...demuxer.tracks], frames };
  } finally {
    source.close();
  }
}

/** A published stream the test pushes into; it counts the keyframe requests it gets. */
class TestSource extends Stream {
  keyframeRequests = 0;

  constructor(tracks: Track[], name = "cam") {
    super({
      name,
      mediaSessionId: crypto.randomUUID(),
      tracks,
      mediaProvider: "test",
      stopProvider: () => Promise.resolve(),
    });
  }

  override requestKeyframe(): void {
    this.keyframeRequests++;
  }
}

/** An origin: every upgrade on 127.0.0.1 serves `source` until it ends. */
function origin(source: Stream, options: { maxBufferedBytes?: number; signal?: AbortSignal } = {}) {
  const counters: RelayCounters = { frames: 0, bytes: 0, drops: 0 };
  const served = Promise.withResolvers<string>();
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, (req) => {
    const { socket, response } = Deno.upgradeWebSocket(req);
    serveRelay(socket, source, { log: silentLogger, counters, ...options }).then(served.resolve);
    return response;
  });
  return {
    server,
    url: `ws://127.0.0.1:${server.addr.port}/cdn/pull`,
    served: served.promise,
    counters,
  };
}

/**
 * The clip's tracks and frames, a source stream of them served by an origin (see `origin`),
 * and an empty registry for the edge's streams.
 */
async function servedClip(options: Parameters<typeof origin>[1] = {}) {
  const { tracks, frames } = await clip();
  const source = new TestSource(tracks);
  return { tracks, frames, source, edgeStreams: new StreamRegistry(), ...origin(source, options) };
}

/** Opens a relay pull of `url` into `streams` as `localName`. */
function openEdge(url: string, streams: StreamRegistry, localName = "e"): Promise<RelayPull> {
  return RelayPull.open({ url, localName, streams, log: silentLogger });
}

/** The frames a reader gets until its stream ends. */
async function readAll(stream: Stream): Promise<MediaFrame[]> {
  const frames: MediaFrame[] = [];
  for await (const frame of stream.reader(100_000)) frames.push(frame);
  return frames;
}

/** Frames from the first video keyframe on: where any reader starts. */
function fromFirstKeyframe(tracks: Track[], frames: MediaFrame[]): MediaFrame[] {
  return frames.slice(frames.findIndex((f) => f.keyframe && tracks[f.trackId].kind === "video"));
}

Deno.test("relay: the edge's stream has the origin's tracks and frames; the origin's end ends it", async () => {
  const { tracks, frames, source, server, url, served, counters, edgeStreams } = await servedClip();
  try {
    const pull = await openEdge(url, edgeStreams, "cam-edge");
    assert.equal(edgeStreams.published("cam-edge"), pull.stream);
    assert.equal(pull.stream.mediaProvider, "CDN");
    assert.deepEqual(pull.stream.tracks, tracks);
    assert.deepEqual(tracks.map((t) => [t.codec, t.width, t.config?.codec]), [
      ["H264", 320, "H264"],
      ["AAC", undefined, "AAC"],
    ]);
    const received = readAll(pull.stream);
    for (const frame of frames) source.push(frame);
    source.end();

    const expected = fromFirstKeyframe(tracks, frames);
    assert.ok(expected.length > 100);
    assert.deepEqual(await received, expected);
    assert.deepEqual(await pull.closed, { reason: "source ended" });
    assert.equal(await served, "source ended");
    assert.ok(pull.stream.ended);
    assert.equal(edgeStreams.published("cam-edge"), undefined, "the edge stream is unregistered");
    const bytes = expected.reduce((n, f) => n + f.data.length, 0);
    assert.deepEqual(pull.counters, { frames: expected.length, bytes, drops: 0 });
    assert.deepEqual(counters, { frames: expected.length, bytes, drops: 0 });
  } finally {
    await server.shutdown();
  }
});

Deno.test("relay: a relay stopped on the origin ends the edge stream with the origin's reason", async () => {
  const stop = new AbortController();
  const { frames, source, server, url, served, edgeStreams } = await servedClip({
    signal: stop.signal,
  });
  try {
    const pull = await openEdge(url, edgeStreams);
    const received = readAll(pull.stream);
    for (const frame of frames.slice(0, 40)) source.push(frame);
    // A reader without the GOP asks the edge for a keyframe, and the edge asks the origin.
    const before = source.keyframeRequests;
    pull.stream.requestKeyframe();
    await waitUntil(() => source.keyframeRequests > before);
    stop.abort("restricted access");
    assert.deepEqual(await pull.closed, { reason: "restricted access" });
    assert.equal(await served, "restricted access");
    assert.ok((await received).length > 0);
    assert.equal(edgeStreams.size, 0);
    assert.ok(!source.ended, "only the relay stopped, not the source");
  } finally {
    source.end();
    await server.shutdown();
  }
});

Deno.test("relay: a dropped connection ends the edge stream, and the origin's relay", async () => {
  const { frames, source, server, url, served, edgeStreams } = await servedClip();
  try {
    const pull = await openEdge(url, edgeStreams);
    for (const frame of frames.slice(0, 40)) source.push(frame);
    await waitUntil(() => pull.counters.frames > 0);
    await cutServerConnections(server.addr.port);
    const { reason } = await pull.closed;
    assert.match(reason, /^origin: connection lost \(Connection reset by peer/);
    assert.ok(pull.stream.ended);
    assert.equal(edgeStreams.size, 0);
    assert.match(await served, /^edge: connection lost/);
    assert.ok(!source.ended);
  } finally {
    source.end();
    await server.shutdown();
  }
});

Deno.test("relay: a terminated edge stream closes the relay; the origin's relay ends", async () => {
  const { source, server, url, served, edgeStreams } = await servedClip();
  try {
    const pull = await openEdge(url, edgeStreams);
    await pull.stream.terminate("stopped by the operator");
    assert.deepEqual(await pull.closed, { reason: "stopped by the operator" });
    assert.match(await served, /^edge: connection closed by the peer \(1000: stopped by/);
    assert.equal(edgeStreams.size, 0);
  } finally {
    source.end();
    await server.shutdown();
  }
});

/** Resolves once `check` holds, polling every 10 ms; throws after 5 s. */
async function waitUntil(check: () => boolean): Promise<void> {
  for (let waited = 0; !check(); waited += 10) {
    if (waited > 5000) throw new Error("condition not met in 5 s");
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** Video frames as an Annex B H.264 stream, with SPS/PPS before each keyframe. */
function annexB(track: Track, frames: MediaFrame[]): Uint8Array {
  if (track.config?.codec !== "H264") throw new Error("not H.264");
  const startCode = Uint8Array.of(0, 0, 0, 1);
  const header = [...track.config.sps, ...track.config.pps].flatMap((nal) => [startCode, nal]);
  const parts = frames.flatMap((
    f,
  ) => [...(f.keyframe ? header : []), lengthPrefixedToAnnexB(f.data)]);
  return concatBytes(parts);
}

Deno.test("relay: an edge that stops reading makes the origin drop to the next keyframe; what it gets decodes", async () => {
  const { tracks, frames } = await clip();
  const video = tracks.findIndex((t) => t.kind === "video");
  const source = new TestSource(tracks);
  const { server, served, counters } = origin(source, { maxBufferedBytes: 64 * 1024 });
  // One loop of the clip after another, as a long stream: timestamps go on.
  let loop = 0;
  const pushLoop = async () => {
    for (let i = 0; i < frames.length; i++) {
      const f = frames[i];
      const shift = loop * 2 * tracks[f.trackId].clockRate;
      source.push({ ...f, pts: f.pts + shift, dts: f.dts + shift });
      // Room for the sender to run, so that only the socket is slow, not the reader.
      if (i % 20 === 19) await new Promise((r) => setTimeout(r, 0));
    }
    loop++;
  };
  const raw = await RawWsClient.open(server.addr.port);
  try {
    // Nobody reads: the kernel's buffers fill, then the socket's, then frames are dropped.
    while (counters.drops === 0 && loop < 300) await pushLoop();
    assert.ok(counters.drops > 0, `no drop after ${loop} loops`);
    const requestsBefore = source.keyframeRequests;

    const messages: RelayMessage[] = [];
    const reading = (async () => {
      let known: readonly Track[] | undefined;
      for (let f = await raw.readFrame(); f && f.opcode !== 8; f = await raw.readFrame()) {
        const message = decodeRelayMessage(f.payload, known);
        if (message.type === "hello") known = message.tracks;
        messages.push(message);
      }
    })();
    // The edge reads again: the sender resumes at a keyframe (and asks the source for one).
    for (let i = 0; i < 4; i++) {
      await pushLoop();
      await new Promise((r) => setTimeout(r, 100));
    }
    source.end();
    await reading;
    assert.equal(await served, "source ended");
    assert.ok(source.keyframeRequests > requestsBefore, "a keyframe was asked for on resuming");

    assert.equal(messages[0].type, "hello");
    assert.deepEqual(messages.at(-1), { type: "end", reason: "source ended" });
    const gaps = messages.flatMap((m) => m.type === "dropped" ? [m.frames] : []);
    assert.ok(gaps.length > 0);
    assert.equal(gaps.reduce((a, b) => a + b, 0), counters.drops);
    // After every gap, video starts again at a keyframe.
    const videoFrames: MediaFrame[] = [];
    let afterGap = true;
    for (const m of messages) {
      if (m.type === "dropped") afterGap = true;
      if (m.type !== "frame" || m.frame.trackId !== video) continue;
      if (afterGap) assert.ok(m.frame.keyframe, `video frame ${videoFrames.length} after a gap`);
      afterGap = false;
      videoFrames.push(m.frame);
    }
    const resumed = messages.findIndex((m) => m.type === "dropped");
    assert.ok(
      messages.slice(resumed).some((m) => m.type === "frame" && m.frame.trackId === video),
      "video went on after the drop",
    );
    const path = await tempPath("relay-edge.h264");
    await Deno.writeFile(path, annexB(tracks[video], videoFrames));
    const decoded = await decode(path);
    assert.equal(decoded.errors, "");
    assert.equal(decoded.video, videoFrames.length, "every received video frame decodes");
  } finally {
    raw.close();
    source.end();
    await server.shutdown();
  }
});

/** A hand-written origin: on upgrade it sends `script`'s messages, then keeps the socket. */
function scriptedOrigin(script: Uint8Array[], status?: number) {
  const got = { keyframeRequests: 0 };
  const sockets: WebSocket[] = [];
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, (req) => {
    if (status !== undefined) return new Response("no", { status });
    const { socket, response } = Deno.upgradeWebSocket(req);
    sockets.push(socket);
    socket.binaryType = "arraybuffer";
    socket.onopen = () => script.forEach((m) => socket.send(m));
    socket.onmessage = (e) => {
      if (decodeRelayMessage(new Uint8Array(e.data)).type === "keyframe") got.keyframeRequests++;
    };
    return response;
  });
  const stop = async () => {
    sockets.forEach((s) => s.readyState === WebSocket.OPEN && s.close());
    await server.shutdown();
  };
  return { url: `ws://127.0.0.1:${server.addr.port}/x?token=secret1`, got, stop };
}

Deno.test("relay pull: drops the origin reports are counted, unknown types skipped, keyframe requests rate-limited", async () => {
  const tracks: Track[] = [{ id: 0, kind: "video", codec: "VP8", clockRate: 90000 }];
  const frame = (n: number, keyframe: boolean): MediaFrame => ({
    trackId: 0,
    codec: "VP8",
    pts: n * 3000,
    dts: n * 3000,
    keyframe,
    data: Uint8Array.of(n),
  });
  const { url, got, stop } = scriptedOrigin([
    encodeHello("cam", tracks),
    encodeFrame(frame(0, true)),
    Uint8Array.of(0x7e, 1, 2, 3),
    encodeDropped(7),
    encodeFrame(frame(8, true)),
  ]);
  const streams = new StreamRegistry();
  try {
    const pull = await RelayPull.open({
      url,
      localName: "e",
      streams,
      log: silentLogger,
      mediaProvider: "X",
    });
    assert.equal(pull.stream.mediaProvider, "X");
    await waitUntil(() => pull.counters.frames === 2);
    assert.deepEqual(pull.counters, { frames: 2, bytes: 2, drops: 7 });
    for (let i = 0; i < 5; i++) pull.stream.requestKeyframe();
    await waitUntil(() => got.keyframeRequests === 1);
    await new Promise((r) => setTimeout(r, 50));
    assert.equal(got.keyframeRequests, 1, "one request per 250 ms");
    pull.close("done");
    assert.deepEqual(await pull.closed, { reason: "done" });
  } finally {
    await stop();
  }
});

Deno.test("relay pull: refusals are typed errors and leave nothing open or registered", async (t) => {
  const tracks: Track[] = [{ id: 0, kind: "audio", codec: "PCMU", clockRate: 8000 }];
  const streams = new StreamRegistry();
  const open = (url: string, helloTimeoutMs = 2000) =>
    RelayPull.open({ url, localName: "e", streams, log: silentLogger, helloTimeoutMs });
  const cases: [string, () => ReturnType<typeof scriptedOrigin>, (err: unknown) => boolean][] = [
    ["403 on upgrade", () => scriptedOrigin([], 403), (e) => e instanceof ForbiddenError],
    ["404 on upgrade", () => scriptedOrigin([], 404), (e) => e instanceof NotFoundError],
    ["500 on upgrade", () => scriptedOrigin([], 500), (e) => e instanceof BadGatewayError],
    [
      "end before hello",
      () => scriptedOrigin([encodeEnd("no such stream")]),
      (e) => e instanceof BadGatewayError && /ended: no such stream/.test(e.message),
    ],
    [
      "garbage hello",
      () => scriptedOrigin([Uint8Array.of(1, 1, 0x7b)]),
      (e) => e instanceof BadGatewayError && /bad hello/.test(e.message),
    ],
    [
      "no hello in time",
      () => scriptedOrigin([]),
      (e) => e instanceof BadGatewayError && /no relay hello .* in 300 ms/.test(e.message),
    ],
  ];
  for (const [what, make, check] of cases) {
    await t.step(what, async () => {
      const o = make();
      try {
        const err = await open(o.url, 300).then(() => undefined, (e) => e);
        assert.ok(check(err), `${what}: ${err}`);
        assert.doesNotMatch((err as Error).message, /secret1/, "the token is redacted");
      } finally {
        await o.stop();
      }
      assert.equal(streams.size, 0);
    });
  }
  await t.step("unreachable", async () => {
    const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
    const port = (listener.addr as Deno.NetAddr).port;
    listener.close();
    await assert.rejects(open(`ws://127.0.0.1:${port}/`), BadGatewayError);
  });
  await t.step("name taken", async () => {
    const o = scriptedOrigin([encodeHello("cam", tracks)]);
    const taken = new TestSource(tracks, "e");
    streams.add(taken);
    try {
      await assert.rejects(open(o.url), ConflictError);
      assert.equal(streams.published("e"), taken);
    } finally {
      streams.remove(taken);
      taken.end();
      await o.stop();
    }
  });
  await t.step("aborted while waiting for the hello", async () => {
    const o = scriptedOrigin([]);
    const abort = new AbortController();
    try {
      const opening = RelayPull.open({
        url: o.url,
        localName: "e",
        streams,
        log: silentLogger,
        signal: abort.signal,
      });
      setTimeout(() => abort.abort("shutting down"), 50);
      await assert.rejects(opening, (e) => e === "shutting down");
    } finally {
      await o.stop();
    }
  });
});
