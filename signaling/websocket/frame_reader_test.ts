/** The frame reader: decoding, fragments, and every limit and protocol error of RFC 6455. */
import assert from "node:assert/strict";
import { clientFrame } from "../../tests/helpers/raw_ws_client.ts";
import { concatBytes } from "./bytes.ts";
import { FrameReader, opcodes, WebSocketProtocolError } from "./frame_reader.ts";

/** A reader with `limit` that records what comes out. */
function reader(limit = 1024) {
  const messages: (string | Uint8Array)[] = [];
  const controls: { opcode: number; payload: Uint8Array }[] = [];
  const r = new FrameReader(limit, {
    message: (data) => messages.push(data),
    control: (opcode, payload) => controls.push({ opcode, payload }),
  });
  return { r, messages, controls };
}

/** The close code a push fails with. */
function failCode(push: () => void): number {
  try {
    push();
  } catch (err) {
    assert.ok(err instanceof WebSocketProtocolError, String(err));
    return err.code;
  }
  assert.fail("no protocol error");
}

Deno.test("frame reader: masked text and binary, split at every byte, in one chunk", () => {
  const bytes = concatBytes([
    clientFrame(opcodes.text, "héllo"),
    clientFrame(opcodes.binary, new Uint8Array([1, 2, 3])),
    clientFrame(opcodes.text, "x".repeat(300)),
    clientFrame(opcodes.text, ""),
  ]);
  for (const step of [1, 3, bytes.length]) {
    const { r, messages } = reader();
    for (let at = 0; at < bytes.length; at += step) r.push(bytes.subarray(at, at + step));
    assert.deepEqual(messages, ["héllo", new Uint8Array([1, 2, 3]), "x".repeat(300), ""]);
  }
});

Deno.test("frame reader: fragments are joined; control frames may come between them", () => {
  const { r, messages, controls } = reader();
  r.push(clientFrame(opcodes.text, "ab", { fin: false }));
  r.push(clientFrame(opcodes.ping, "p"));
  r.push(clientFrame(opcodes.continuation, "c", { fin: false }));
  r.push(clientFrame(opcodes.continuation, "d"));
  assert.deepEqual(messages, ["abcd"]);
  assert.deepEqual(controls, [{ opcode: opcodes.ping, payload: new TextEncoder().encode("p") }]);
});

Deno.test("frame reader: a header over the limit fails with 1009 before any payload", () => {
  const { r } = reader(1024);
  const header = clientFrame(opcodes.text, new Uint8Array(0), { announcedLength: 100 * 2 ** 20 });
  assert.equal(failCode(() => r.push(header)), 1009);
  const exact = reader(1024);
  exact.r.push(clientFrame(opcodes.text, "y".repeat(1024)));
  assert.equal(exact.messages.length, 1);
});

Deno.test("frame reader: fragments count toward the limit as they arrive", () => {
  const { r, messages } = reader(1024);
  r.push(clientFrame(opcodes.text, "a".repeat(600), { fin: false }));
  const next = clientFrame(opcodes.continuation, "a".repeat(500), { fin: false });
  assert.equal(failCode(() => r.push(next)), 1009);
  assert.equal(messages.length, 0);
});

Deno.test("frame reader: a raised limit applies to the next frame", () => {
  const { r, messages } = reader(1024);
  r.maxMessageBytes = 4096;
  r.push(clientFrame(opcodes.text, "z".repeat(3000)));
  assert.equal(messages.length, 1);
});

Deno.test("frame reader: protocol errors close with 1002", () => {
  const cases: [string, Uint8Array][] = [
    ["unmasked", clientFrame(opcodes.text, "hi", { masked: false })],
    ["reserved bits", clientFrame(opcodes.text, "hi", { rsv: 4 })],
    ["opcode 3", clientFrame(3, "hi")],
    ["opcode 11", clientFrame(11, "")],
    ["control over 125 bytes", clientFrame(opcodes.ping, "p".repeat(126))],
    ["fragmented control", clientFrame(opcodes.ping, "p", { fin: false })],
    ["continuation first", clientFrame(opcodes.continuation, "c")],
    [
      "64-bit length with the top bit",
      Uint8Array.from([0x81, 0xff, 0x80, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0]),
    ],
  ];
  for (const [name, bytes] of cases) {
    const { r } = reader();
    assert.equal(failCode(() => r.push(bytes)), 1002, name);
  }
  const { r } = reader();
  r.push(clientFrame(opcodes.text, "a", { fin: false }));
  assert.equal(failCode(() => r.push(clientFrame(opcodes.text, "b"))), 1002, "interleaved");
});

Deno.test("frame reader: invalid UTF-8 in text fails with 1007, also split across fragments", () => {
  const { r } = reader();
  assert.equal(
    failCode(() => r.push(clientFrame(opcodes.text, new Uint8Array([0xc3, 0x28])))),
    1007,
  );
  const split = reader();
  // "é" split between two fragments is valid once joined.
  split.r.push(clientFrame(opcodes.text, new Uint8Array([0xc3]), { fin: false }));
  split.r.push(clientFrame(opcodes.continuation, new Uint8Array([0xa9])));
  assert.deepEqual(split.messages, ["é"]);
});
