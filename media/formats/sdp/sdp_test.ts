import assert from "node:assert/strict";
import { ParseError } from "../../../core/errors.ts";
import { attribute, fmtp, parseSdp, rtpmap, writeSdp } from "./sdp.ts";

const camera = [
  "v=0",
  "o=- 1188340656180883 1 IN IP4 127.0.0.1",
  "s=Session streamed with GStreamer",
  "i=rtsp-server",
  "t=0 0",
  "a=tool:GStreamer",
  "a=type:broadcast",
  "a=control:*",
  "a=range:npt=now-",
  "m=video 0 RTP/AVP 96",
  "c=IN IP4 0.0.0.0",
  "b=AS:800",
  "a=rtpmap:96 H264/90000",
  "a=framerate:25",
  "a=fmtp:96 packetization-mode=1;sprop-parameter-sets=Z0LAHtoCgL/lwFqDAwNSgAAAAwCAAAAZR4sXUA==,aM48gA==;profile-level-id=42c01e",
  "a=control:stream=0",
  "m=audio 0 RTP/AVP 97 0",
  "c=IN IP4 0.0.0.0",
  "a=rtpmap:97 MPEG4-GENERIC/44100/2",
  "a=fmtp:97 streamtype=5;profile-level-id=2;mode=AAC-hbr;config=1210;sizelength=13;indexlength=3;indexdeltalength=3",
  "a=control:stream=1",
  "a=recvonly",
  "",
].join("\r\n");

Deno.test("a camera's SDP: sections, rtpmap, fmtp, control and flags", () => {
  const sdp = parseSdp(camera);
  assert.equal(sdp.sessionName, "Session streamed with GStreamer");
  assert.equal(attribute(sdp, "control"), "*");
  assert.equal(sdp.media.length, 2);
  const [video, audio] = sdp.media;
  assert.deepEqual([video.type, video.protocol, video.formats], ["video", "RTP/AVP", ["96"]]);
  assert.deepEqual(video.bandwidths, ["AS:800"]);
  assert.deepEqual(rtpmap(video, 96), {
    payloadType: 96,
    encoding: "H264",
    clockRate: 90000,
    channels: undefined,
  });
  assert.equal(fmtp(video, 96).get("packetization-mode"), "1");
  assert.equal(fmtp(video, 96).get("sprop-parameter-sets")?.split(",").length, 2);
  assert.equal(attribute(video, "control"), "stream=0");
  assert.deepEqual(rtpmap(audio, 97)?.channels, 2);
  assert.equal(rtpmap(audio, 0), undefined);
  assert.equal(fmtp(audio, 97).get("config"), "1210");
  assert.ok(audio.attributes.some((a) => a.name === "recvonly" && a.value === undefined));
});

Deno.test("written SDP parses back to the same description", () => {
  const sdp = parseSdp(camera);
  assert.deepEqual(parseSdp(writeSdp(sdp)), sdp);
  assert.ok(writeSdp(sdp).endsWith("\r\n"));
});

Deno.test("LF line ends are accepted; broken lines and a missing v= are ParseErrors", () => {
  assert.equal(parseSdp("v=0\no=-\ns=-\nm=audio 0 RTP/AVP 0\n").media.length, 1);
  assert.throws(() => parseSdp("v=0\nhello\n"), ParseError);
  assert.throws(() => parseSdp("s=x\n"), ParseError);
  assert.throws(() => parseSdp("v=0\nm=video\n"), ParseError);
  assert.throws(() => parseSdp("v=0\nm=video x RTP/AVP 96\n"), ParseError);
});
