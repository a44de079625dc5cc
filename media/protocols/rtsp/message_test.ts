import assert from "node:assert/strict";
import { ParseError } from "../../../core/errors.ts";
import { maxHeaderBytes, RtspStreamParser, writeRequest } from "./message.ts";

const enc = new TextEncoder();

Deno.test("a response split over reads, then interleaved frames, come out whole and in order", () => {
  const sdp = "v=0\r\ns=x\r\n";
  const bytes = new Uint8Array([
    ...enc.encode(
      `RTSP/1.0 200 OK\r\nCSeq: 2\r\nContent-Type: application/sdp\r\nContent-Length: ${sdp.length}\r\n\r\n${sdp}`,
    ),
    0x24,
    1,
    0,
    3,
    9,
    8,
    7,
    0x24,
    0,
    0,
    0,
  ]);
  const parser = new RtspStreamParser();
  const out = [];
  for (let i = 0; i < bytes.length; i += 5) {
    parser.push(bytes.subarray(i, i + 5));
    for (let m = parser.next(); m; m = parser.next()) out.push(m);
  }
  assert.equal(out.length, 3);
  const res = out[0];
  assert.ok(res.kind === "response");
  assert.equal(res.status, 200);
  assert.equal(res.reason, "OK");
  assert.equal(res.headers.get("cseq"), "2");
  assert.equal(new TextDecoder().decode(res.body), sdp);
  assert.deepEqual(out[1], { kind: "interleaved", channel: 1, data: new Uint8Array([9, 8, 7]) });
  assert.deepEqual(out[2], { kind: "interleaved", channel: 0, data: new Uint8Array(0) });
  assert.equal(parser.buffered, 0);
});

Deno.test("stray line ends are skipped; repeated headers keep every value; server requests are recognised", () => {
  const parser = new RtspStreamParser();
  parser.push(enc.encode(
    '\r\nRTSP/1.0 401 Unauthorized\r\nCSeq: 1\r\nWWW-Authenticate: Basic realm="a"\r\n' +
      'WWW-Authenticate: Digest realm="a", nonce="b"\r\n\r\n' +
      "GET_PARAMETER rtsp://h/s RTSP/1.0\r\nCSeq: 7\r\n\r\n",
  ));
  const res = parser.next();
  assert.ok(res?.kind === "response");
  assert.equal(res.headers.getAll("www-authenticate").length, 2);
  const req = parser.next();
  assert.ok(req?.kind === "request");
  assert.equal(req.method, "GET_PARAMETER");
});

Deno.test("garbage, an endless header block and a huge Content-Length are ParseErrors", () => {
  const garbage = new RtspStreamParser();
  garbage.push(enc.encode("hello"));
  assert.throws(() => garbage.next(), ParseError);

  const endless = new RtspStreamParser();
  endless.push(enc.encode("RTSP/1.0 200 OK\r\nX: " + "a".repeat(maxHeaderBytes)));
  assert.throws(() => endless.next(), ParseError);

  const huge = new RtspStreamParser();
  huge.push(enc.encode("RTSP/1.0 200 OK\r\nContent-Length: 999999999\r\n\r\n"));
  assert.throws(() => huge.next(), ParseError);
});

Deno.test("requests are written with CRLFs and a Content-Length for a body; line breaks are refused", () => {
  const bytes = writeRequest({
    method: "SETUP",
    url: "rtsp://h/s/trackID=1",
    headers: [["CSeq", "3"], ["Transport", "RTP/AVP/TCP;unicast;interleaved=0-1"]],
  });
  assert.equal(
    new TextDecoder().decode(bytes),
    "SETUP rtsp://h/s/trackID=1 RTSP/1.0\r\nCSeq: 3\r\nTransport: RTP/AVP/TCP;unicast;interleaved=0-1\r\n\r\n",
  );
  assert.throws(
    () => writeRequest({ method: "OPTIONS", url: "rtsp://h", headers: [["X", "a\r\nY: b"]] }),
    ParseError,
  );
});

Deno.test("the parser starts small and grows for a big message, within its capacity", () => {
  const parser = new RtspStreamParser();
  const body = "x".repeat(200 * 1024);
  const message =
    `ANNOUNCE rtsp://h/a RTSP/1.0\r\nCSeq: 1\r\nContent-Length: ${body.length}\r\n\r\n${body}`;
  const bytes = new TextEncoder().encode(message);
  for (let at = 0; at < bytes.length; at += 16 * 1024) {
    parser.push(bytes.subarray(at, at + 16 * 1024));
  }
  const request = parser.next();
  assert.equal(request?.kind, "request");
  assert.equal(request.kind === "request" && request.body.length, body.length);
  // Past the capacity (one largest message plus one read) it refuses.
  const full = new RtspStreamParser();
  full.push(new TextEncoder().encode("DESCRIBE rtsp://h/a RTSP/1.0\r\n"));
  assert.throws(() => {
    for (let i = 0; i < 40; i++) full.push(new Uint8Array(16 * 1024).fill(0x41));
  }, ParseError);
});
