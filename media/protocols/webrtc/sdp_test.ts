import assert from "node:assert/strict";
import { ParseError } from "../../../core/errors.ts";
import { matchPlayCodec, pickPublishCodec } from "./codecs.ts";
import { parseOfferMedia } from "./sdp.ts";

/** An SDK-like offer (Chrome order: VP8 first, then H.264 profiles). */
const offer = [
  "v=0",
  "o=- 1 2 IN IP4 127.0.0.1",
  "s=-",
  "t=0 0",
  "m=audio 9 UDP/TLS/RTP/SAVPF 111",
  "a=sendonly",
  "a=rtpmap:111 opus/48000/2",
  "a=fmtp:111 minptime=10;useinbandfec=1",
  "a=fmtp:111 stereo=1",
  "m=video 9 UDP/TLS/RTP/SAVPF 96 102 108",
  "a=sendonly",
  "a=rtpmap:96 VP8/90000",
  "a=rtpmap:102 H264/90000",
  "a=fmtp:102 level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42001f",
  "a=rtpmap:108 H264/90000",
  "a=fmtp:108 level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f",
  "",
].join("\r\n");

Deno.test("sdp: m-lines, directions, codecs and merged fmtp lines of an offer", () => {
  const [audio, video] = parseOfferMedia(offer);
  assert.deepEqual([audio.kind, audio.direction, video.kind], ["audio", "sendonly", "video"]);
  assert.equal(audio.codecs[0].fmtp, "minptime=10;useinbandfec=1;stereo=1");
  assert.deepEqual(video.codecs.map((c) => c.payloadType), [96, 102, 108]);
});

Deno.test("codecs: publish prefers H.264 constrained baseline, then VP8; play matches", () => {
  const [audio, video] = parseOfferMedia(offer);
  assert.equal(pickPublishCodec(audio)?.codec, "OPUS");
  const h264 = pickPublishCodec(video)!;
  assert.deepEqual([h264.codec, h264.params.payloadType], ["H264", 108]);
  const vp8Only = { ...video, codecs: video.codecs.filter((c) => c.name === "VP8") };
  assert.equal(pickPublishCodec(vp8Only)?.codec, "VP8");
  assert.equal(pickPublishCodec({ ...video, codecs: [] }), undefined);
  assert.equal(matchPlayCodec(video, h264)?.params.payloadType, 108);
  assert.equal(matchPlayCodec(vp8Only, h264), undefined);
});

Deno.test("sdp: what is not an SDP offer is a ParseError; fuzzed text never crashes", () => {
  for (const bad of [undefined, 42, "", "hello", "v=0\r\ns=-\r\n", "v=0\r\nm=video\r\n"]) {
    assert.throws(() => parseOfferMedia(bad), ParseError, String(bad));
  }
  for (let i = 0; i < 2000; i++) {
    const cut = offer.slice(0, Math.floor(Math.random() * offer.length));
    const noisy = cut.replace(/./g, (c) => (Math.random() < 0.02 ? " " : c));
    try {
      parseOfferMedia(noisy);
    } catch (err) {
      assert.ok(err instanceof ParseError, String(err));
    }
  }
});
