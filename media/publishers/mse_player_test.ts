import assert from "node:assert/strict";
import { buildAsc } from "../codecs/aac.ts";
import type { StreamStatus } from "../protocols/webrtc/client.ts";
import { Stream } from "../stream.ts";
import { maxUnsentBytes, MsePlayer, type MseTransport, slowClientInfo } from "./mse_player.ts";

/** A media socket that keeps what is sent and reports the unsent bytes it is told to. */
class FakeTransport implements MseTransport {
  state: "open" | "closing" | "closed" = "open";
  bufferedAmount = 0;
  sent: Uint8Array[] = [];
  closeCode?: number;
  #closed = Promise.withResolvers<void>();
  readonly closed = this.#closed.promise;

  constructor(readonly unsentBytes = 0) {}

  sendBinary(data: Uint8Array): void {
    this.sent.push(data);
    this.bufferedAmount = this.unsentBytes;
  }

  close(code: number): void {
    if (this.state !== "open") return;
    this.state = "closed";
    this.closeCode = code;
    this.#closed.resolve();
  }
}

function audioStream(): Stream {
  return new Stream({
    name: "tone",
    mediaSessionId: crypto.randomUUID(),
    tracks: [{
      id: 0,
      kind: "audio",
      codec: "AAC",
      clockRate: 48_000,
      sampleRate: 48_000,
      channels: 1,
      config: { codec: "AAC", asc: buildAsc(2, 48_000, 1) },
    }],
    mediaProvider: "test",
    stopProvider: () => Promise.resolve(),
  });
}

function player(source: Stream, statuses: [StreamStatus, string][]): MsePlayer {
  return new MsePlayer({
    source,
    frames: source,
    mediaSessionId: crypto.randomUUID(),
    sessionId: "s",
    appKey: "defaultApp",
    nodeId: "n",
    clientStream: {},
    sdp: "",
    client: { status: (status, info) => statuses.push([status, info]), event: () => {} },
  });
}

Deno.test("MsePlayer: a client that does not read is dropped FAILED; the other player of the stream goes on", async () => {
  const source = audioStream();
  const slowStatuses: [StreamStatus, string][] = [];
  const fastStatuses: [StreamStatus, string][] = [];
  const slow = player(source, slowStatuses);
  const fast = player(source, fastStatuses);
  assert.match(
    slow.answer(),
    /^m=video 0 .*\r\n[^]*^m=audio 9 RTP\/AVP 108\r\na=rtpmap:108 mpeg4-generic\/48000\/1/m,
  );
  fast.answer();
  const slowSocket = new FakeTransport(maxUnsentBytes + 1);
  const fastSocket = new FakeTransport();
  slow.attach(slowSocket);
  fast.attach(fastSocket);
  for (let i = 0; i < 100; i++) {
    source.push({
      trackId: 0,
      codec: "AAC",
      pts: i * 1024,
      dts: i * 1024,
      keyframe: true,
      data: new Uint8Array(200),
    });
    await Promise.resolve();
  }
  await new Promise((r) => setTimeout(r, 0));
  assert.deepEqual(slowStatuses, [["PLAYING", ""], ["FAILED", slowClientInfo]]);
  assert.equal(slowSocket.closeCode, 1008);
  assert.equal(slowSocket.sent.length, 1);
  assert.deepEqual(fastStatuses, [["PLAYING", ""]]);
  const records = fastSocket.sent.reduce((n, m) => n + countRecords(m), 0);
  // The AudioSpecificConfig, then every frame.
  assert.equal(records, 101);
  await fast.terminate("Stopped by user");
  assert.deepEqual(fastStatuses.at(-1), ["STOPPED", "Stopped by user"]);
  assert.equal(fastSocket.closeCode, 1000);
  source.end();
});

Deno.test("MsePlayer: a source that ends before the media transport comes ends the play STOPPED", async () => {
  const source = audioStream();
  const statuses: [StreamStatus, string][] = [];
  const p = player(source, statuses);
  p.answer();
  assert.ok(p.awaitingTransport);
  source.end();
  await new Promise((r) => setTimeout(r, 0));
  assert.deepEqual(statuses, [["STOPPED", "Stopped by publisher stop"]]);
  assert.ok(!p.awaitingTransport);
});

function countRecords(message: Uint8Array): number {
  const view = new DataView(message.buffer, message.byteOffset, message.byteLength);
  let n = 0;
  for (let pos = 0; pos < message.length; pos += 9 + view.getUint32(pos + 5)) n++;
  return n;
}
