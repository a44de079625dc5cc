import assert from "node:assert/strict";
import { ParseError } from "../../../core/errors.ts";
import { parsePacket } from "./packet.ts";
import {
  conclusionRequest,
  conclusionResponse,
  decodeStreamId,
  encodePeerIp,
  encodeStreamId,
  HandshakeType,
  HsExtType,
  inductionRequest,
  inductionResponse,
  parseHandshake,
  readConclusion,
  rejection,
  RejectReason,
  rejectReasonOf,
  serializeHandshake,
  srtMagic,
} from "./handshake.ts";

const hex = (s: string) => Uint8Array.from(s.match(/../g)!, (b) => parseInt(b, 16));
const body = (s: string) => {
  const p = parsePacket(hex(s));
  if (p.kind !== "control") throw new Error("not control");
  return p.body;
};

// Captured from libsrt 1.5.1: ffmpeg caller (streamid=abcdefg) -> srt-live-transmit listener.
const callerInduction =
  "80000000000000000000013e0000000000000004000000026c9edc7e000005dc000020000000000117d343db000000000100007f000000000000000000000000";
const listenerInduction =
  "80000000000000000018f3e417d343db0000000500004a176c9edc7e000005dc000020000000000117d343dbaf718bc10100007f000000000000000000000000";
const callerConclusion =
  "800000000000000000000b200000000000000005000000056c9edc7e000005dc00002000ffffffff17d343dbaf718bc10100007f0000000000000000000000000001000300010501000000bf00780078000500026463626100676665";
const listenerConclusion =
  "8000000000000000000038fe17d343db00000005000000016c9edc7e000005dc00002000ffffffff27700e87af718bc10100007f0000000000000000000000000002000300010501000000bf00780078";
// With passphrase: the caller's KMREQ (AES-128).
const callerConclusionKm =
  "800000000000000000000d1d0000000000000005000200035e25750b000005dc00002000ffffffff19b664959c1f11020100007f0000000000000000000000000001000300010501000000bf007800780003000e12202901000000000200020000000404448249eae472c927c059055a3f129ff51c524f4a4a78a336c9092bd3370bb6b11d83a663ac9e3278";

Deno.test("libsrt induction: the listener answer we build equals libsrt's", () => {
  const req = parseHandshake(body(callerInduction));
  assert.equal(req.version, 4);
  assert.equal(req.type, HandshakeType.induction);
  assert.equal(req.socketId, 0x17d343db);
  assert.deepEqual(req.peerIp, encodePeerIp("127.0.0.1"));
  const answer = inductionResponse(req, 0xaf718bc1);
  assert.equal(answer.extensionField, srtMagic);
  assert.deepEqual(serializeHandshake(answer), body(listenerInduction));
});

Deno.test("libsrt conclusion: HSREQ latency and flags, stream id, our HSRSP equals libsrt's", () => {
  const req = parseHandshake(body(callerConclusion));
  assert.equal(req.type, HandshakeType.conclusion);
  const c = readConclusion(req);
  assert.equal(c.streamId, "abcdefg");
  assert.equal(c.srt?.receiverLatencyMs, 120);
  assert.equal(c.srt?.senderLatencyMs, 120);
  assert.equal(c.srt?.flags, 0xbf);
  const answer = conclusionResponse(req, {
    socketId: 0x27700e87,
    receiverLatencyMs: 120,
    senderLatencyMs: 120,
    flowWindow: 8192,
  });
  const ours = parseHandshake(serializeHandshake(answer));
  const theirs = parseHandshake(body(listenerConclusion));
  // libsrt announces the packet filter capability (0x80), which this stack does not have.
  assert.deepEqual({ ...ours, extensions: [] }, { ...theirs, extensions: [] });
  const srt = readConclusion(ours).srt!;
  assert.equal(srt.flags | 0x80, readConclusion(theirs).srt!.flags);
  assert.equal(srt.receiverLatencyMs, 120);
});

Deno.test("KMREQ contents are the KM message, handed over untouched", () => {
  const req = parseHandshake(body(callerConclusionKm));
  assert.equal(req.encryption, 2);
  const c = readConclusion(req);
  assert.equal(c.keyMaterial?.length, 56);
  assert.deepEqual([...c.keyMaterial!.subarray(0, 4)], [0x12, 0x20, 0x29, 0x01]);
});

Deno.test("stream id: libsrt's word-swapped encoding round-trips, padding dropped", () => {
  assert.deepEqual(encodeStreamId("abcdefg"), hex("6463626100676665"));
  for (const id of ["", "a", "#!::r=live/cam1,m=publish", "ünïcødé-stream"]) {
    assert.equal(decodeStreamId(encodeStreamId(id)), id);
  }
  assert.throws(() => encodeStreamId("x".repeat(513)), ParseError);
});

Deno.test("caller requests and rejection codes", () => {
  const o = { socketId: 9, initialSeq: 77, listenerAddress: "127.0.0.1", flowWindow: 8192 };
  const ours = inductionRequest(o);
  const theirs = parseHandshake(body(callerInduction));
  for (const field of ["version", "encryption", "extensionField", "mtu", "type"] as const) {
    assert.equal(ours[field], theirs[field], field);
  }
  const conc = conclusionRequest({ ...o, cookie: 5, latencyMs: 200, streamId: "s1" });
  const parsed = parseHandshake(serializeHandshake(conc));
  assert.deepEqual(parsed.extensions.map((e) => e.type), [HsExtType.hsReq, HsExtType.streamId]);
  assert.equal(readConclusion(parsed).streamId, "s1");
  const rej = rejection(parsed, RejectReason.badSecret);
  assert.equal(rej.type, 1010);
  assert.equal(rejectReasonOf(rej.type), RejectReason.badSecret);
  assert.equal(rejectReasonOf(HandshakeType.conclusion), undefined);
});
