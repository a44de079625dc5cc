import assert from "node:assert/strict";
import { Buffer } from "node:buffer";
import { RtpHeader, RtpPacket } from "werift";
import { installRtpHeaderParse, parseRtpHeader } from "./rtp_header_parse.ts";

/** werift's own parser, taken before any install. */
const weriftParse = RtpHeader.deSerialize.bind(RtpHeader);

/** The fields of a header as plain values (extension payloads as hex). */
function fields(h: RtpHeader) {
  return {
    version: h.version,
    padding: h.padding,
    paddingSize: h.paddingSize,
    extension: h.extension,
    marker: h.marker,
    payloadOffset: h.payloadOffset,
    payloadType: h.payloadType,
    sequenceNumber: h.sequenceNumber,
    timestamp: h.timestamp,
    ssrc: h.ssrc,
    csrcLength: h.csrcLength,
    csrc: [...h.csrc],
    extensionProfile: h.extensionProfile,
    extensionLength: h.extensionLength,
    extensions: h.extensions.map((e) => ({ id: e.id, payload: e.payload.toString("hex") })),
  };
}

/** A packet: `b0`, `b1`, then sequence, timestamp and SSRC with their top bits set. */
function packet(b0: number, b1: number, rest: number[]): Buffer {
  return Buffer.from([b0, b1, 0xfe, 0xdc, 0xf1, 0x02, 0x03, 0x04, 0x85, 0x06, 0x07, 0x08, ...rest]);
}

const cases: [string, Buffer][] = [
  ["plain, marker", packet(0x80, 0xe0, [1, 2, 3])],
  ["two CSRCs", packet(0x82, 0x60, [0xaa, 0, 0, 1, 0xbb, 0, 0, 2, 9, 9])],
  [
    "one-byte extensions with padding between",
    packet(0x90, 0x6f, [0xbe, 0xde, 0, 3, 0x10, 0xaa, 0x00, 0x22, 1, 2, 3, 0x31, 4, 5, 0, 0, 7, 7]),
  ],
  ["two-byte extensions", packet(0x90, 0x60, [0x10, 0x00, 0, 2, 5, 2, 0xa, 0xb, 0, 7, 1, 0xc, 5])],
  ["another profile", packet(0x90, 0x60, [0x12, 0x34, 0, 1, 1, 2, 3, 4, 5, 6])],
  [
    "padding, CSRC and extension",
    packet(0xb1, 0x60, [0, 0, 0, 9, 0xbe, 0xde, 0, 1, 0x22, 1, 2, 3, 8, 0, 0, 3]),
  ],
];

for (const [name, raw] of cases) {
  Deno.test(`RTP header parse: ${name}: the same fields as werift's parser`, () => {
    assert.deepEqual(fields(parseRtpHeader(raw)), fields(weriftParse(raw)));
  });
}

Deno.test("RTP header parse: a cut header throws (werift drops the packet); installed, RtpPacket uses it", () => {
  assert.throws(() => parseRtpHeader(Buffer.from([0x80, 0x60, 0, 1])), RangeError);
  assert.throws(() => parseRtpHeader(packet(0x83, 0x60, [0, 0, 0, 1])), RangeError);
  assert.throws(() => parseRtpHeader(packet(0x90, 0x60, [0xbe, 0xde, 0, 4, 0x10, 1])), RangeError);
  installRtpHeaderParse();
  const raw = cases[2][1];
  const parsed = RtpPacket.deSerialize(raw);
  assert.deepEqual(fields(parsed.header), fields(weriftParse(raw)));
  assert.equal(parsed.payload.toString("hex"), "0707");
  assert.notEqual(RtpHeader.deSerialize, weriftParse);
});
