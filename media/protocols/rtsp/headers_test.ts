import assert from "node:assert/strict";
import { ParseError } from "../../../core/errors.ts";
import { formatTransport, parseRtpInfo, parseSession, parseTransport } from "./headers.ts";
import { parseRtspUrl, resolveControl } from "./url.ts";

Deno.test("Transport: written for TCP and UDP, parsed from answers", () => {
  assert.equal(
    formatTransport({ protocol: "tcp", interleaved: [2, 3] }),
    "RTP/AVP/TCP;unicast;interleaved=2-3",
  );
  assert.equal(
    formatTransport({ protocol: "udp", clientPorts: [31000, 31001] }),
    "RTP/AVP;unicast;client_port=31000-31001",
  );
  assert.deepEqual(
    parseTransport("RTP/AVP;unicast;client_port=31000-31001;server_port=5000-5001;ssrc=1A2B"),
    { protocol: "udp", clientPorts: [31000, 31001], serverPorts: [5000, 5001] },
  );
  assert.deepEqual(parseTransport('RTP/AVP/TCP;unicast;interleaved=4-5;mode="PLAY"'), {
    protocol: "tcp",
    interleaved: [4, 5],
  });
  assert.throws(() => parseTransport("RAW/RAW/UDP;unicast"), ParseError);
  assert.throws(() => parseTransport("RTP/AVP/TCP;interleaved=300-301"), ParseError);
});

Deno.test("Session and RTP-Info", () => {
  assert.deepEqual(parseSession("47112344;timeout=30"), { id: "47112344", timeoutSeconds: 30 });
  assert.deepEqual(parseSession("abc"), { id: "abc", timeoutSeconds: 60 });
  assert.deepEqual(
    parseRtpInfo("url=rtsp://h/s/stream=0;seq=7;rtptime=4294967295, url=stream=1;rtptime=12"),
    [
      { url: "rtsp://h/s/stream=0", seq: 7, rtptime: 4294967295 },
      { url: "stream=1", rtptime: 12 },
    ],
  );
});

Deno.test("URLs: credentials come out of the href; controls resolve against the base", () => {
  const url = parseRtspUrl("rtsp://ad%40min:p%3Ass@10.0.0.5/live/ch0");
  assert.equal(url.user, "ad@min");
  assert.equal(url.password, "p:ss");
  assert.equal(url.port, 554);
  assert.equal(url.href, "rtsp://10.0.0.5/live/ch0");
  assert.throws(() => parseRtspUrl("http://h/x"), ParseError);
  assert.throws(() => parseRtspUrl("rtsp://"), ParseError);
  assert.equal(resolveControl("rtsp://h/s/", "trackID=1"), "rtsp://h/s/trackID=1");
  assert.equal(resolveControl("rtsp://h/s", "trackID=1"), "rtsp://h/s/trackID=1");
  assert.equal(resolveControl("rtsp://h/s", "rtsp://o/t"), "rtsp://o/t");
  assert.equal(resolveControl("rtsp://h/s", "*"), "rtsp://h/s");
});
