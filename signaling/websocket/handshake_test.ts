/** The opening handshake: request head parsing, the upgrade checks and the responses. */
import assert from "node:assert/strict";
import {
  acceptValue,
  checkUpgrade,
  errorResponse,
  HandshakeError,
  headEnd,
  parseRequestHead,
} from "./handshake.ts";
import { upgradeRequest } from "../../tests/helpers/raw_ws_client.ts";
import { encodeClose } from "./frame_writer.ts";

const encoder = new TextEncoder();

function head(text: string) {
  const bytes = encoder.encode(text);
  return parseRequestHead(bytes.subarray(0, headEnd(bytes) - 4));
}

function refusal(text: string): HandshakeError {
  try {
    checkUpgrade(head(text));
  } catch (err) {
    assert.ok(err instanceof HandshakeError);
    return err;
  }
  assert.fail("accepted");
}

Deno.test("handshake: the accept value of RFC 6455 §1.3's example", () => {
  assert.equal(acceptValue("dGhlIHNhbXBsZSBub25jZQ=="), "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
});

Deno.test("handshake: a browser's upgrade passes; header names and tokens are case-insensitive", () => {
  assert.equal(checkUpgrade(head(upgradeRequest())), "dGhlIHNhbXBsZSBub25jZQ==");
  const mixed = upgradeRequest({ "Upgrade": "WebSocket", "Connection": "keep-alive, Upgrade" })
    .replace("Sec-WebSocket-Key", "sec-websocket-key");
  assert.equal(checkUpgrade(head(mixed)), "dGhlIHNhbXBsZSBub25jZQ==");
  assert.equal(
    head(upgradeRequest({ Origin: "http://a.test" })).headers.get("origin"),
    "http://a.test",
  );
});

Deno.test("handshake: refusals name the problem with the right status", () => {
  assert.equal(refusal("GET / HTTP/1.1\r\nHost: x\r\n\r\n").status, 426);
  assert.equal(
    refusal(upgradeRequest({ "Sec-WebSocket-Key": "" })).message,
    "missing Sec-WebSocket-Key",
  );
  assert.equal(refusal(upgradeRequest({ "Sec-WebSocket-Key": "c2hvcnQ=" })).status, 400);
  const version = refusal(upgradeRequest({ "Sec-WebSocket-Version": "12" }));
  assert.equal(version.status, 400);
  assert.deepEqual(version.headers, { "Sec-WebSocket-Version": "13" });
  assert.equal(refusal(upgradeRequest({ "Host": "" })).status, 400);
  assert.equal(refusal(upgradeRequest({ "Connection": "keep-alive" })).status, 400);
  assert.equal(refusal(upgradeRequest().replace("GET", "POST")).status, 400);
  assert.throws(() => head("GET /\r\n\r\n"), HandshakeError);
  assert.throws(() => head("GET / HTTP/1.0\r\n\r\n"), HandshakeError);
  assert.throws(() => head("GET / HTTP/1.1\r\nno colon\r\n\r\n"), HandshakeError);
});

Deno.test("handshake: an error response is complete HTTP with its length and extra headers", () => {
  const text = new TextDecoder().decode(
    errorResponse(400, "bad", { "Sec-WebSocket-Version": "13" }),
  );
  assert.equal(
    text,
    "HTTP/1.1 400 Bad Request\r\nSec-WebSocket-Version: 13\r\nContent-Type: text/plain; charset=utf-8\r\n" +
      "Content-Length: 4\r\nConnection: close\r\n\r\nbad\n",
  );
});

Deno.test("frame writer: a close reason is cut to 123 bytes on a character boundary", () => {
  const frame = encodeClose(1008, "é".repeat(100));
  assert.equal(frame[1], 2 + 122);
  assert.equal(new TextDecoder("utf-8", { fatal: true }).decode(frame.subarray(4)), "é".repeat(61));
});
