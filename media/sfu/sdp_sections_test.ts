import assert from "node:assert/strict";
import { ParseError } from "../../core/errors.ts";
import { parseSections } from "./sdp_sections.ts";

/** An offer as the SFU SDK sends it from Chrome: msid then a=content, simulcast on video. */
const offer = [
  "v=0",
  "o=- 1 2 IN IP4 127.0.0.1",
  "s=-",
  "t=0 0",
  "a=group:BUNDLE 0 1 2",
  "m=video 9 UDP/TLS/RTP/SAVPF 96",
  "a=mid:0",
  "a=sendonly",
  "a=msid:stream-1 track-video",
  "a=content:camera",
  "a=rid:h send",
  "a=rid:m send",
  "a=simulcast:send h;~m,x",
  "m=audio 9 UDP/TLS/RTP/SAVPF 111",
  "a=mid:1",
  "a=recvonly",
  "m=application 9 UDP/DTLS/SCTP webrtc-datachannel",
  "a=mid:2",
  "",
].join("\r\n");

Deno.test("sdp sections: mid, direction, msid track id, a=content, simulcast rids", () => {
  assert.deepEqual(parseSections(offer), [
    {
      kind: "video",
      mid: "0",
      direction: "sendonly",
      trackId: "track-video",
      content: "camera",
      rids: ["h", "m"],
    },
    { kind: "audio", mid: "1", direction: "recvonly", trackId: "", content: "", rids: [] },
    {
      kind: "application",
      mid: "2",
      direction: "sendrecv",
      trackId: "",
      content: "",
      rids: [],
    },
  ]);
  const ridsOnly = offer.replace(/a=simulcast:[^\r]*\r\n/, "");
  assert.deepEqual(parseSections(ridsOnly)[0].rids, ["h", "m"]);
});

Deno.test("sdp sections: not an SDP, no m-line, a section without mid are ParseErrors", () => {
  for (const bad of [undefined, 42, "", "hello", "v=0\r\ns=-", "v=0\r\nm=audio 9 RTP/AVP 0"]) {
    assert.throws(() => parseSections(bad), ParseError, String(bad));
  }
});

Deno.test("sdp sections: a rejected m-line (port 0) without a mid is left out", () => {
  const sdp = "v=0\r\nm=video 0 UDP/TLS/RTP/SAVPF 96\r\na=inactive\r\n" +
    "m=audio 9 UDP/TLS/RTP/SAVPF 111\r\na=mid:1\r\na=sendonly\r\n";
  assert.deepEqual(parseSections(sdp).map((s) => [s.kind, s.mid, s.direction]), [
    ["audio", "1", "sendonly"],
  ]);
});

Deno.test("sdp sections: random and truncated offers throw ParseError or parse, never else", () => {
  let seed = 7;
  const random = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;
  for (let i = 0; i < 2000; i++) {
    const cut = offer.slice(0, Math.floor(random() * offer.length));
    const bytes = [...cut].map((c) => random() < 0.02 ? String.fromCharCode(random() * 128) : c);
    try {
      parseSections(bytes.join(""));
    } catch (err) {
      assert.ok(err instanceof ParseError, String(err));
    }
  }
});
