import assert from "node:assert/strict";
import { reorderWindowPackets, RtpReorderBuffer } from "./reorder.ts";
import { rtp } from "./test_packet.ts";

function collect() {
  const out: [number, boolean][] = [];
  const buffer = new RtpReorderBuffer((p, gap) => out.push([p.sequenceNumber, gap]));
  return { out, push: (seq: number) => buffer.push(rtp({ seq, payload: [1] })), buffer };
}

Deno.test("swapped packets come out in order; duplicates and late ones are dropped", () => {
  const { out, push, buffer } = collect();
  for (const seq of [65534, 0, 65535, 1, 1, 65533]) push(seq);
  assert.deepEqual(out.map(([s]) => s), [65534, 65535, 0, 1]);
  assert.equal(buffer.discarded, 2);
  assert.equal(buffer.lost, 0);
});

Deno.test("a hole beyond the window is counted as lost and flagged on the next packet", () => {
  const { out, push, buffer } = collect();
  push(10);
  push(12); // 11 never comes
  for (let s = 13; s < 12 + reorderWindowPackets + 1; s++) push(s);
  assert.equal(buffer.lost, 1);
  assert.deepEqual(out.slice(0, 3), [[10, false], [12, true], [13, false]]);
  push(5000);
  assert.equal(buffer.lost, 1 + (5000 - (12 + reorderWindowPackets + 1)));
  assert.deepEqual(out.at(-1), [5000, true]);
});
