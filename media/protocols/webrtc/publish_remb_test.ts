import assert from "node:assert/strict";
import { pickPublishCodec } from "./codecs.ts";
import { publishBitrate } from "./publish_remb.ts";
import { parseOfferMedia } from "./sdp.ts";

const server = { maxPublishBitrateKbps: 2500, minPublishBitrateKbps: 100 };

/** An offer whose video section carries `bandwidth` (b= lines) and H.264 `fmtp` additions. */
function offer(bandwidth: string[], fmtp = ""): string {
  return [
    "v=0",
    "o=- 1 2 IN IP4 127.0.0.1",
    "s=-",
    "t=0 0",
    "m=audio 9 UDP/TLS/RTP/SAVPF 111",
    "b=AS:64",
    "a=rtpmap:111 opus/48000/2",
    "m=video 9 UDP/TLS/RTP/SAVPF 102",
    "c=IN IP4 0.0.0.0",
    ...bandwidth,
    "a=rtpmap:102 H264/90000",
    `a=fmtp:102 packetization-mode=1;profile-level-id=42e01f${fmtp}`,
    "",
  ].join("\r\n");
}

function bounds(sdp: string, stream: Record<string, unknown> = {}) {
  const media = parseOfferMedia(sdp);
  return publishBitrate(server, media, media.map(pickPublishCodec), stream);
}

Deno.test("sdp: a section's b=AS (kbit/s) and b=TIAS (bit/s), the lower of the two", () => {
  const [audio, video] = parseOfferMedia(offer(["b=AS:900", "b=TIAS:700000"]));
  assert.equal(audio.bandwidthKbps, 64);
  assert.equal(video.bandwidthKbps, 700);
  assert.equal(parseOfferMedia(offer(["b=TIAS:1500000"]))[1].bandwidthKbps, 1500);
  assert.equal(parseOfferMedia(offer(["b=CT:100", "b=AS:x"]))[1].bandwidthKbps, undefined);
});

Deno.test("publish bitrate: the server's cap unless the publisher sets a lower one", () => {
  assert.deepEqual(bounds(offer([])), { maxKbps: 2500, minKbps: 100 });
  // The Web SDK's constraints.video.maxBitrate / minBitrate, as numbers or text.
  assert.deepEqual(bounds(offer([]), { maxBitrate: 800, minBitrate: 300 }), {
    maxKbps: 800,
    minKbps: 300,
  });
  assert.deepEqual(bounds(offer([]), { maxBitrate: "1200" }), { maxKbps: 1200, minKbps: 100 });
  assert.deepEqual(bounds(offer([]), { maxBitrate: 0, minBitrate: 0 }), {
    maxKbps: 2500,
    minKbps: 100,
  });
  assert.equal(bounds(offer([]), { maxBitrate: 9000 }).maxKbps, 2500, "never above the server's");
  assert.equal(bounds(offer(["b=AS:600"])).maxKbps, 600);
  assert.equal(bounds(offer(["b=TIAS:450000"]), { maxBitrate: 800 }).maxKbps, 450);
  // x-google-* in the offer's fmtp, as the SDK writes them into an SDP (kbit/s).
  assert.deepEqual(bounds(offer([], ";x-google-min-bitrate=400;x-google-max-bitrate=1000")), {
    maxKbps: 1000,
    minKbps: 400,
  });
  assert.deepEqual(bounds(offer([]), { maxBitrate: 500, minBitrate: 900 }), {
    maxKbps: 500,
    minKbps: 500,
  }, "the floor never above the cap");
  const audioOnly = parseOfferMedia(offer([])).slice(0, 1);
  assert.equal(
    publishBitrate(server, audioOnly, audioOnly.map(pickPublishCodec), {}).maxKbps,
    2500,
  );
});
