/**
 * A simulcast track's layer groups on the main thread, with the engine replaced by a model of
 * what its Workers do (per-member SSRC, offsets and start sequence, as send_engine_test.ts
 * checks on real SRTP): packets are published once per layer whatever the subscribers; a
 * switch at the new layer's keyframe, padding, a NACK, a late packet, a pause and a resume
 * leave each subscriber one continuous stream.
 */
import assert from "node:assert/strict";
import { Buffer } from "node:buffer";
import { type RTCRtpSender, type RTCRtpTransceiver, RtpHeader, RtpPacket } from "werift";
import type { NegotiatedCodec } from "../protocols/webrtc/codecs.ts";
import {
  EngineGroup,
  EngineSendPath,
  type EngineSendPaths,
} from "../protocols/webrtc/engine_send_path.ts";
import { RetransmitBudget } from "../protocols/webrtc/retransmit_budget.ts";
import type { GroupSpec, SendEngine } from "../send_engine/send_engine.ts";
import { readVp8, rtpPayloadStart, shiftVp8, vp8Fields } from "../rtp/vp8_descriptor.ts";
import { PublishedTrack } from "./published_track.ts";

/** One packet as a subscriber got it. */
interface Got {
  ssrc: number;
  sequence: number;
  timestamp: number;
  /** First payload bytes: NAL header and the test's frame mark. */
  nal: number;
  mark: number;
  /** The payload as it arrived (VP8 descriptors are checked). */
  payload: Uint8Array;
}

/** The engine as its Workers behave, on the main thread. */
class ModelEngine {
  closed = false;
  /** Publishes per group name. */
  readonly publishes = new Map<string, number>();
  readonly got = new Map<string, Got[]>();
  readonly #members = new Map<string, Map<string, GroupSpec>>();

  add(id: string, own: GroupSpec): void {
    this.#members.set(id, new Map([[own.group, { ...own }]]));
    this.got.set(id, []);
  }

  join(id: string, spec: GroupSpec): boolean {
    this.#members.get(id)?.set(spec.group, { ...spec });
    return true;
  }

  leave(id: string, group: string): boolean {
    return this.#members.get(id)?.delete(group) ?? false;
  }

  groupsOf(id: string): string[] {
    return [...this.#members.get(id)?.keys() ?? []];
  }

  publish(group: string, bytes: Uint8Array, ids?: readonly string[]): void {
    this.publishes.set(group, (this.publishes.get(group) ?? 0) + 1);
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.length);
    const payloadAt = bytes[0] & 0x10 ? 12 + 8 : 12;
    for (const [id, groups] of this.#members) {
      const spec = groups.get(group);
      if (!spec || (ids && !ids.includes(id))) continue;
      const sequence = view.getUint16(2);
      if (spec.startSequence !== undefined) {
        const since = (sequence - spec.startSequence) & 0xffff;
        if (since >= 0x8000) continue;
      }
      const copy = bytes.slice();
      if (spec.vp8PictureIdOffset || spec.vp8Tl0PicIdxOffset) {
        const at = rtpPayloadStart(copy, 0, copy.length);
        const f = readVp8(copy, at, copy.length, vp8Fields());
        shiftVp8(copy, f, spec.vp8PictureIdOffset ?? 0, spec.vp8Tl0PicIdxOffset ?? 0);
      }
      this.got.get(id)!.push({
        ssrc: spec.ssrc ?? view.getUint32(8),
        sequence: (sequence + (spec.sequenceOffset ?? 0)) & 0xffff,
        timestamp: (view.getUint32(4) + (spec.timestampOffset ?? 0)) >>> 0,
        nal: bytes[payloadAt],
        mark: bytes[payloadAt + 1],
        payload: copy.subarray(payloadAt),
      });
    }
  }
}

/** A publisher's transceiver with one rid track per layer, fed by `send`. */
function fakeTransceiver(rids: string[]) {
  const listeners = new Map<string, (packet: RtpPacket) => void>();
  const plis: number[] = [];
  const tracks = rids.map((rid) => ({
    rid,
    onReceiveRtp: { subscribe: (f: (p: RtpPacket) => void) => listeners.set(rid, f) },
  }));
  const transceiver = {
    mid: "0",
    receiver: {
      tracks,
      onRtcp: { subscribe: () => {} },
      sendRtcpPLI: (ssrc: number) => {
        plis.push(ssrc);
        return Promise.resolve();
      },
    },
    onTrack: { subscribe: () => {} },
  } as unknown as RTCRtpTransceiver;
  return { transceiver, plis, send: (rid: string, p: RtpPacket) => listeners.get(rid)!(p) };
}

const codec = {
  kind: "video",
  codec: "H264",
  params: { mimeType: "video/H264", clockRate: 90000, payloadType: 102 },
} as unknown as NegotiatedCodec;

Deno.test("SFU layer groups: one publish per layer packet; switches, padding, NACK, late packets and pause keep each subscriber's numbering continuous", () => {
  const engine = new ModelEngine();
  const { transceiver, plis, send } = fakeTransceiver(["h", "l"]);
  const track = new PublishedTrack(
    {
      id: "v",
      type: "VIDEO",
      contentType: "",
      quality: ["h", "l"],
      mute: false,
      creationTime: 0,
    },
    codec,
    transceiver,
  );
  assert.deepEqual(track.layers, ["l", "h"]);
  const owner = { remove: () => {} } as unknown as EngineSendPaths;
  const pathOf = (id: string, ssrc: number) => {
    engine.add(id, { group: `own-${id}`, ssrc, payloadType: 96 });
    return new EngineSendPath(
      owner,
      engine as unknown as SendEngine,
      id,
      { ssrc } as RTCRtpSender,
      new EngineGroup(`own-${id}`, 3, true),
      96,
    );
  };
  const a = track.subscribe(pathOf("a", 0xa));
  const b = track.subscribe(pathOf("b", 0xb));
  assert.ok(a.shared && b.shared);

  // Layer l (index 0) from sequence 1000, h from 60000 (it wraps); 3000 ticks a frame.
  const next = { l: 1000, h: 60000 };
  let frame = 0;
  const packet = (rid: "l" | "h", key: boolean, payload?: Buffer) => {
    const header = new RtpHeader({
      ssrc: rid === "l" ? 0x100 : 0x200,
      payloadType: 102,
      sequenceNumber: next[rid],
      timestamp: (rid === "l" ? 7 : 900_000) + frame * 3000,
      marker: true,
    });
    next[rid] = (next[rid] + 1) & 0xffff;
    return new RtpPacket(header, payload ?? Buffer.from([key ? 0x65 : 0x41, frame & 0xff, 0, 0]));
  };
  const frames = (count: number, key: { l?: boolean; h?: boolean } = {}) => {
    for (let i = 0; i < count; i++, frame++) {
      send("l", packet("l", i === 0 && key.l === true));
      send("h", packet("h", i === 0 && key.h === true));
    }
  };
  const now = performance.now();
  frames(1, { l: true, h: true });
  // Both choose h (the highest alive) and wait for its keyframe.
  a.choose(now, [true, true], [0, 0]);
  b.choose(now, [true, true], [0, 0]);
  assert.ok(plis.includes(0x200), "a keyframe of h asked for");
  frames(3);
  assert.deepEqual(engine.got.get("a"), [], "nothing before h's keyframe");
  frames(5, { h: true });
  const hGroup = engine.groupsOf("a").find((g) => g.startsWith("sfu/"))!;
  assert.deepEqual(engine.groupsOf("b").filter((g) => g.startsWith("sfu/")), [hGroup]);
  assert.equal(engine.publishes.get(hGroup), 5, "each h packet published once for both");
  assert.equal(engine.got.get("a")!.length, 5);
  assert.equal(engine.got.get("b")!.length, 5);

  // a goes down to l: h goes on until l's keyframe, then l's packets, numbered on.
  assert.equal(a.setQuality("l"), true);
  frames(2);
  assert.equal(engine.got.get("a")!.at(-1)!.nal & 0x1f, 1);
  assert.equal(a.layer, "h", "still h before l's keyframe");
  frames(4, { l: true });
  assert.equal(a.layer, "l");
  // Padding on l (a bandwidth probe), then more frames: no gap for a.
  send("l", packet("l", false, Buffer.alloc(0)));
  frames(3);
  // A late h packet from before a keyframe b joined: b got its number already, a never.
  const gotA = engine.got.get("a")!;
  const gotB = engine.got.get("b")!;
  assert.ok(gotA.every((g) => g.ssrc === 0xa) && gotB.every((g) => g.ssrc === 0xb));

  // a's NACK of the packet after the padding: resent as it was sent, to a only.
  const afterPadding = gotA.at(-3)!;
  const bBefore = gotB.length;
  a.retransmit([afterPadding.sequence], new RetransmitBudget());
  assert.deepEqual(gotA.at(-1), afterPadding, "the retransmission is the packet as sent");
  assert.equal(gotB.length, bBefore, "b gets no retransmission of a's");
  gotA.pop();

  // Back up to h (warm), at h's next keyframe.
  a.setQuality("h");
  a.choose(performance.now() + 60_000, [true, true], [0, 0]);
  frames(2);
  assert.equal(a.layer, "l");
  frames(3, { h: true });
  assert.equal(a.layer, "h");
  assert.deepEqual(
    engine.groupsOf("a").filter((g) => g.startsWith("sfu/")),
    [hGroup],
    "a shares h's group with b again",
  );
  // A late h packet from before that keyframe reaches b (late for it too, but its own
  // number), not a, whose number it would repeat.
  const lateH = new RtpPacket(
    new RtpHeader({
      ssrc: 0x200,
      payloadType: 102,
      sequenceNumber: (next.h - 4) & 0xffff,
      timestamp: 0,
      marker: true,
    }),
    Buffer.from([0x41, 0xee, 0, 0]),
  );
  const aCount = gotA.length;
  send("h", lateH);
  assert.equal(gotA.length, aCount, "no late packet for a");
  assert.equal(gotB.at(-1)!.mark, 0xee);
  gotB.pop();

  // Paused and resumed: a waits for h's keyframe and goes on from its last number.
  a.setMuted(true);
  frames(2);
  assert.equal(gotA.length, aCount);
  a.setMuted(false);
  frames(2);
  assert.equal(gotA.length, aCount, "resumes at a keyframe only");
  frames(2, { h: true });
  assert.equal(gotA.length, aCount + 2);

  for (const [name, got] of [["a", gotA], ["b", gotB]] as const) {
    const sequences = got.map((g) => g.sequence);
    sequences.forEach((s, i) => {
      if (i > 0) assert.equal(s, (sequences[i - 1] + 1) & 0xffff, `${name} ${i}: ${sequences}`);
    });
    got.forEach((g, i) => {
      if (i === 0) return;
      const step = (g.timestamp - got[i - 1].timestamp) >>> 0;
      assert.ok(step > 0 && step < 90_000, `${name} timestamps move on: ${i} ${step}`);
    });
  }
  // a's stream: h from its keyframe, l from its keyframe, h, then h again after the pause.
  const keyframes = gotA.filter((g) => (g.nal & 0x1f) === 5).length;
  assert.equal(keyframes, 4);

  track.unsubscribe(a);
  assert.deepEqual(engine.groupsOf("a"), ["own-a"], "a left every shared group");
  track.close();
  assert.deepEqual(engine.groupsOf("b"), ["own-b"]);
});

const vp8Codec = {
  kind: "video",
  codec: "VP8",
  params: { mimeType: "video/VP8", clockRate: 90000, payloadType: 96 },
} as unknown as NegotiatedCodec;

/** Temporal layer of frame `n` in a 3-layer pattern: 0, 2, 1, 2, ... */
const tidOf = (n: number) => [0, 2, 1, 2][n % 4];

/**
 * A one-packet VP8 frame: descriptor with a 15-bit picture ID, TL0PICIDX and TID (sync on
 * TID 1 frames), then the payload header's P bit (0: keyframe).
 */
function vp8Frame(picId: number, tl0: number, tid: number, key: boolean): Buffer {
  return Buffer.from([
    0x90,
    0xe0,
    0x80 | (picId >> 8),
    picId & 0xff,
    tl0,
    (tid << 6) | (tid === 1 ? 0x20 : 0),
    key ? 0x10 : 0x11,
    0,
    0,
  ]);
}

/** Picture IDs, TL0PICIDX and TIDs a subscriber got, frame by frame. */
function pictures(got: Got[]): { picId: number; tl0: number; tid: number }[] {
  return got.map((g) => {
    const f = readVp8(g.payload, 0, g.payload.length, vp8Fields());
    return { picId: f.picId, tl0: f.tl0, tid: f.tid };
  });
}

Deno.test("SFU layer groups, VP8: a temporal cap is a group of its own; moves between caps and layers keep picture IDs, TL0PICIDX and sequence numbers continuous", () => {
  const engine = new ModelEngine();
  const { transceiver, send } = fakeTransceiver(["h", "l"]);
  const track = new PublishedTrack(
    { id: "v", type: "VIDEO", contentType: "", quality: ["h", "l"], mute: false, creationTime: 0 },
    vp8Codec,
    transceiver,
  );
  const owner = { remove: () => {} } as unknown as EngineSendPaths;
  const pathOf = (id: string, ssrc: number) => {
    engine.add(id, { group: `own-${id}`, ssrc, payloadType: 96 });
    return new EngineSendPath(
      owner,
      engine as unknown as SendEngine,
      id,
      { ssrc } as RTCRtpSender,
      new EngineGroup(`own-${id}`, 3, true),
      96,
    );
  };
  const a = track.subscribe(pathOf("a", 0xa));
  const b = track.subscribe(pathOf("b", 0xb));
  // The layers number pictures and TL0PICIDX apart: l from 30000 (wrapping at 2^15), h from 9.
  const seq = { l: 100, h: 40000 };
  const pic = { l: 32760, h: 9 };
  const tl0 = { l: 250, h: 3 };
  let frame = 0;
  const frames = (count: number, key: { l?: boolean; h?: boolean } = {}) => {
    for (let i = 0; i < count; i++, frame++) {
      const tid = tidOf(frame);
      for (const rid of ["l", "h"] as const) {
        const isKey = i === 0 && key[rid] === true;
        if (tid === 0) tl0[rid] = (tl0[rid] + 1) & 0xff;
        pic[rid] = (pic[rid] + 1) & 0x7fff;
        const header = new RtpHeader({
          ssrc: rid === "l" ? 0x100 : 0x200,
          payloadType: 96,
          sequenceNumber: seq[rid],
          timestamp: frame * 3000,
          marker: true,
        });
        seq[rid] = (seq[rid] + 1) & 0xffff;
        send(rid, new RtpPacket(header, vp8Frame(pic[rid], tl0[rid], isKey ? 0 : tid, isKey)));
      }
    }
  };
  const now = performance.now();
  frames(1, { l: true, h: true });
  a.choose(now, [true, true], [0, 0]);
  b.choose(now, [true, true], [0, 0]);
  frames(4, { h: true });
  const gotA = engine.got.get("a")!;
  const gotB = engine.got.get("b")!;
  assert.equal(gotA.length, 4);
  const shared = () => engine.groupsOf("a").find((g) => g.startsWith("sfu/"));
  const hAll = shared();
  assert.equal(engine.groupsOf("b").find((g) => g.startsWith("sfu/")), hAll);

  // a caps at TID 0: from the next frame on, only base frames, in a group of its own.
  assert.equal(a.setTemporal(0), true);
  frames(8);
  assert.notEqual(shared(), hAll);
  assert.deepEqual(pictures(gotA.slice(4)).map((p) => p.tid), [0, 0]);
  // A NACK of a packet sent in the capped group: resent as it was sent.
  const capped = gotA.at(-1)!;
  a.retransmit([capped.sequence], new RetransmitBudget());
  assert.deepEqual(gotA.at(-1)!.payload, capped.payload);
  assert.equal(gotA.at(-1)!.sequence, capped.sequence);
  gotA.pop();
  // Up again: at the next layer-sync frame above TID 0 (a TID 1 frame), back with b.
  a.setTemporal(3);
  frames(1);
  assert.notEqual(shared(), hAll, "frame 13 (TID 2, no sync) does not allow it");
  frames(6);
  assert.equal(shared(), hAll, "a shares b's group again");
  // Down to layer l at its keyframe.
  a.setQuality("l");
  frames(2);
  frames(4, { l: true });
  assert.equal(a.layer, "l");
  frames(3);

  for (const [name, got] of [["a", gotA], ["b", gotB]] as const) {
    const seen = pictures(got);
    got.forEach((g, i) => {
      if (i === 0) return;
      assert.equal(g.sequence, (got[i - 1].sequence + 1) & 0xffff, `${name} sequence ${i}`);
      const [before, now] = [seen[i - 1], seen[i]];
      assert.equal(now.picId, (before.picId + 1) & 0x7fff, `${name} picture ID ${i}`);
      const tl0Step = (now.tl0 - before.tl0) & 0xff;
      assert.equal(
        tl0Step,
        now.tid === 0 ? 1 : 0,
        `${name} TL0PICIDX ${i}: ${before.tl0}→${now.tl0}`,
      );
    });
  }
  assert.ok(gotB.length > gotA.length, "a missed the frames above its cap");
  track.close();
  assert.deepEqual(engine.groupsOf("a"), ["own-a"]);
});
