import assert from "node:assert/strict";
import { BadRequestError } from "../../../core/errors.ts";
import { attribute, fmtp, parseSdp, rtpmap } from "../../formats/sdp/sdp.ts";
import { answerCallOffer, buildCallOffer, negotiateAnswer } from "./call_sdp.ts";

/** What sipp's built-in `uas` scenario answers (`-mi 127.0.0.1 -mp 6000`). */
const sippUasAnswer = [
  "v=0",
  "o=user1 53655765 2353687637 IN IP4 127.0.0.1",
  "s=-",
  "c=IN IP4 127.0.0.1",
  "t=0 0",
  "m=audio 6000 RTP/AVP 0",
  "a=rtpmap:0 PCMU/8000",
  "",
].join("\r\n");

/** A baresip 3.x answer to our offer: PCMU and telephone-event, RTCP muxed apart. */
const baresipAnswer = [
  "v=0",
  "o=- 2873397492 1542812837 IN IP4 127.0.0.1",
  "s=-",
  "c=IN IP4 127.0.0.1",
  "t=0 0",
  "a=tool:baresip 3.10.1",
  "m=audio 5110 RTP/AVP 0 101",
  "b=AS:80",
  "a=rtpmap:0 PCMU/8000",
  "a=rtpmap:101 telephone-event/8000",
  "a=fmtp:101 0-15",
  "a=rtcp:5111",
  "a=sendrecv",
  "a=label:1",
  "a=rtcp-rsize",
  "a=ssrc:1432769153 cname:fa8e0c3e-3c2e-4b0b-9f3c-1b4a0c1b2a6e",
  "a=ptime:20",
  "m=video 0 RTP/AVP 96",
  "",
].join("\r\n");

/** A baresip offer (incoming call): PCMA first, then PCMU, with telephone-event 101. */
const baresipOffer = [
  "v=0",
  "o=- 1869488419 1447296543 IN IP4 127.0.0.1",
  "s=-",
  "c=IN IP4 127.0.0.1",
  "t=0 0",
  "a=tool:baresip 3.10.1",
  "m=audio 5100 RTP/AVP 9 8 0 101",
  "b=AS:64",
  "a=rtpmap:9 G722/8000",
  "a=rtpmap:8 PCMA/8000",
  "a=rtpmap:0 PCMU/8000",
  "a=rtpmap:101 telephone-event/8000",
  "a=fmtp:101 0-15",
  "a=sendrecv",
  "a=ptime:20",
  "m=video 5102 RTP/AVP 97 96",
  "a=rtpmap:97 H264/90000",
  "a=fmtp:97 packetization-mode=0;profile-level-id=42e01f",
  "a=rtpmap:96 H264/90000",
  "a=fmtp:96 packetization-mode=1;profile-level-id=42e01f",
  "a=sendrecv",
  "m=application 5104 UDP/BFCP *",
  "",
].join("\r\n");

Deno.test("call offer: G.711, G.722, Opus + telephone-event at 20 ms, H.264 when video, parses back", () => {
  const text = buildCallOffer({
    address: "127.0.0.1",
    audioPort: 20000,
    videoPort: 20002,
    sessionId: "42",
    sessionVersion: 3,
  });
  const sdp = parseSdp(text);
  assert.equal(sdp.origin, "- 42 3 IN IP4 127.0.0.1");
  assert.equal(sdp.connection, "IN IP4 127.0.0.1");
  const [audio, video] = sdp.media;
  assert.deepEqual([audio.type, audio.port, audio.protocol, audio.formats], [
    "audio",
    20000,
    "RTP/AVP",
    ["0", "8", "9", "111", "101", "110"],
  ]);
  assert.equal(rtpmap(audio, 0)?.encoding, "PCMU");
  assert.equal(rtpmap(audio, 8)?.encoding, "PCMA");
  assert.deepEqual([rtpmap(audio, 9)?.encoding, rtpmap(audio, 9)?.clockRate], ["G722", 8000]);
  assert.deepEqual(rtpmap(audio, 111), {
    payloadType: 111,
    encoding: "opus",
    clockRate: 48000,
    channels: 2,
  });
  assert.equal(fmtp(audio, 111).get("useinbandfec"), "1");
  assert.equal(rtpmap(audio, 101)?.encoding, "telephone-event");
  assert.equal(rtpmap(audio, 101)?.clockRate, 8000);
  assert.equal(rtpmap(audio, 110)?.clockRate, 48000);
  assert.deepEqual(
    audio.attributes.filter((a) => a.name === "fmtp").map((a) => a.value),
    ["111 minptime=10;useinbandfec=1", "101 0-16", "110 0-16"],
  );
  assert.equal(attribute(audio, "ptime"), "20");
  assert.ok(audio.attributes.some((a) => a.name === "sendrecv"));
  assert.deepEqual([video.type, video.port, video.formats], ["video", 20002, ["96"]]);
  assert.deepEqual(rtpmap(video, 96), {
    payloadType: 96,
    encoding: "H264",
    clockRate: 90000,
    channels: undefined,
  });
  assert.equal(fmtp(video, 96).get("packetization-mode"), "1");
  assert.equal(fmtp(video, 96).get("profile-level-id"), "42e01f");
  // A hold re-offer: sendonly, a higher version, no video.
  const hold = parseSdp(
    buildCallOffer({
      address: "::1",
      audioPort: 20000,
      direction: "sendonly",
      sessionId: "42",
      sessionVersion: 4,
    }),
  );
  assert.equal(hold.origin, "- 42 4 IN IP6 ::1");
  assert.equal(hold.media.length, 1);
  assert.ok(hold.media[0].attributes.some((a) => a.name === "sendonly"));
  // Our own offer, read as if it were the answer, gives our first codec.
  assert.deepEqual(negotiateAnswer(text), {
    audio: {
      codec: "PCMU",
      payloadType: 0,
      telephoneEventPt: 101,
      telephoneEventClockRate: 8000,
      remote: { host: "127.0.0.1", port: 20000 },
      direction: "sendrecv",
    },
    video: {
      codec: "H264",
      payloadType: 96,
      remote: { host: "127.0.0.1", port: 20002 },
      direction: "sendrecv",
    },
  });
});

Deno.test("call answer from sipp uas and from baresip", () => {
  assert.deepEqual(negotiateAnswer(sippUasAnswer), {
    audio: {
      codec: "PCMU",
      payloadType: 0,
      remote: { host: "127.0.0.1", port: 6000 },
      direction: "sendrecv",
    },
  });
  assert.deepEqual(negotiateAnswer(baresipAnswer), {
    audio: {
      codec: "PCMU",
      payloadType: 0,
      telephoneEventPt: 101,
      telephoneEventClockRate: 8000,
      remote: { host: "127.0.0.1", port: 5110, rtcpPort: 5111 },
      direction: "sendrecv",
    },
  });
});

Deno.test("call answer: hold by direction or by c=0.0.0.0, rejected audio, no codec of ours", () => {
  const held = sippUasAnswer.replace("a=rtpmap:0 PCMU/8000", "a=rtpmap:0 PCMU/8000\r\na=recvonly");
  assert.equal(negotiateAnswer(held).audio?.direction, "recvonly");
  const sessionLevel = sippUasAnswer.replace("t=0 0", "t=0 0\r\na=inactive");
  assert.equal(negotiateAnswer(sessionLevel).audio?.direction, "inactive");
  const oldHold = sippUasAnswer.replace("c=IN IP4 127.0.0.1", "c=IN IP4 0.0.0.0");
  assert.deepEqual(negotiateAnswer(oldHold).audio?.remote, { host: "0.0.0.0", port: 6000 });
  assert.equal(negotiateAnswer(oldHold).audio?.direction, "sendonly");
  for (
    const bad of [
      sippUasAnswer.replace("m=audio 6000", "m=audio 0"),
      sippUasAnswer.replace("RTP/AVP 0", "RTP/AVP 3").replace("0 PCMU", "3 GSM"),
      sippUasAnswer.replace("RTP/AVP", "RTP/SAVP"),
      sippUasAnswer.replace("m=audio 6000", "m=audio 70000"),
      "v=0\r\nthis is not SDP",
    ]
  ) {
    assert.throws(
      () => negotiateAnswer(bad),
      (e) => e instanceof BadRequestError && e.field === "sdp",
      bad,
    );
  }
});

Deno.test("answer to an offer: their first codec of ours (G.722), their telephone-event pt, H.264 mode 1, others rejected", () => {
  const { sdp, media } = answerCallOffer(baresipOffer, {
    address: "127.0.0.1",
    audioPort: 30000,
    videoPort: 30002,
    sessionId: "7",
  });
  assert.deepEqual(media, {
    audio: {
      codec: "G722",
      payloadType: 9,
      telephoneEventPt: 101,
      telephoneEventClockRate: 8000,
      remote: { host: "127.0.0.1", port: 5100 },
      direction: "sendrecv",
    },
    video: {
      codec: "H264",
      payloadType: 96,
      remote: { host: "127.0.0.1", port: 5102 },
      direction: "sendrecv",
    },
  });
  const answer = parseSdp(sdp);
  assert.deepEqual(answer.media.map((m) => [m.type, m.port, m.protocol, m.formats]), [
    ["audio", 30000, "RTP/AVP", ["9", "101"]],
    ["video", 30002, "RTP/AVP", ["96"]],
    ["application", 0, "UDP/BFCP", ["*"]],
  ]);
  assert.deepEqual(rtpmap(answer.media[0], 9), {
    payloadType: 9,
    encoding: "G722",
    clockRate: 8000,
    channels: undefined,
  });
  assert.equal(rtpmap(answer.media[0], 101)?.encoding, "telephone-event");
  assert.ok(answer.media[0].attributes.some((a) => a.name === "sendrecv"));
  // The answer reads back as the far end's view of it.
  assert.equal(negotiateAnswer(sdp).audio?.codec, "G722");
  // Without G.722 in the offer, their next choice: PCMA.
  const g711Offer = baresipOffer.replace("RTP/AVP 9 8 0 101", "RTP/AVP 8 0 101");
  assert.equal(
    answerCallOffer(g711Offer, { address: "127.0.0.1", audioPort: 30000 }).media.audio?.codec,
    "PCMA",
  );
  // Without a video port of ours, video is rejected.
  const audioOnly = parseSdp(
    answerCallOffer(baresipOffer, { address: "127.0.0.1", audioPort: 30000 }).sdp,
  );
  assert.deepEqual(audioOnly.media.map((m) => m.port), [30000, 0, 0]);
});

Deno.test("answer to an offer: hold directions, and 488 when nothing is in common", () => {
  const o = { address: "127.0.0.1", audioPort: 30000 };
  const direction = (offer: string, ours?: "sendonly") =>
    parseSdp(answerCallOffer(offer, { ...o, direction: ours }).sdp).media[0].attributes
      .find((a) => ["sendrecv", "sendonly", "recvonly", "inactive"].includes(a.name))?.name;
  const audio = baresipOffer.split("m=video")[0];
  assert.equal(direction(audio.replace("a=sendrecv", "a=sendonly")), "recvonly");
  assert.equal(direction(audio.replace("a=sendrecv", "a=recvonly")), "sendonly");
  assert.equal(direction(audio.replace("a=sendrecv", "a=inactive")), "inactive");
  assert.equal(direction(audio.replace("c=IN IP4 127.0.0.1", "c=IN IP4 0.0.0.0")), "recvonly");
  assert.equal(direction(audio, "sendonly"), "sendonly");
  assert.equal(
    answerCallOffer(audio.replace("a=sendrecv", "a=sendonly"), o).media.audio?.direction,
    "sendonly",
  );
  const gsmOnly = audio.replace("RTP/AVP 9 8 0 101", "RTP/AVP 3 101");
  assert.throws(
    () => answerCallOffer(gsmOnly, o),
    (e) => e instanceof BadRequestError && /in common/.test(e.message),
  );
  assert.throws(() => answerCallOffer("garbage", o), BadRequestError);
});

Deno.test("call SDP on cut and mutated input: an answer or a BadRequestError, nothing else", () => {
  let seed = 7;
  const random = (n: number) => {
    seed = (seed * 1103515245 + 12345) & 0x7fffffff;
    return seed % n;
  };
  const o = { address: "127.0.0.1", audioPort: 30000, videoPort: 30002 };
  const inputs: string[] = [];
  for (const sdp of [sippUasAnswer, baresipAnswer, baresipOffer]) {
    for (let cut = 0; cut < sdp.length; cut += 3) inputs.push(sdp.slice(0, cut));
    for (let i = 0; i < 300; i++) {
      const chars = [...sdp];
      for (let k = 0; k < 1 + random(4); k++) {
        chars[random(chars.length)] = " =:/\r\n0a9m-".charAt(random(12)) || "x";
      }
      inputs.push(chars.join(""));
    }
  }
  for (const input of inputs) {
    for (const run of [() => negotiateAnswer(input), () => answerCallOffer(input, o)]) {
      try {
        run();
      } catch (err) {
        assert.ok(err instanceof BadRequestError, `${err} on ${JSON.stringify(input)}`);
      }
    }
  }
});

/** A far end that answers our offer with Opus and the 48 kHz telephone-event. */
const opusAnswer = [
  "v=0",
  "o=- 1 1 IN IP4 127.0.0.1",
  "s=-",
  "c=IN IP4 127.0.0.1",
  "t=0 0",
  "m=audio 5200 RTP/AVP 111 110",
  "a=rtpmap:111 opus/48000/2",
  "a=fmtp:111 stereo=1;sprop-stereo=1",
  "a=rtpmap:110 telephone-event/48000",
  "a=fmtp:110 0-15",
  "a=sendrecv",
  "",
].join("\r\n");

Deno.test("Opus: preferOpus puts it first; an Opus answer negotiates Opus with its 48 kHz events", () => {
  const offer = parseSdp(
    buildCallOffer({ address: "127.0.0.1", audioPort: 20000, preferOpus: true }),
  );
  assert.deepEqual(offer.media[0].formats, ["111", "0", "8", "9", "101", "110"]);
  assert.deepEqual(negotiateAnswer(opusAnswer).audio, {
    codec: "OPUS",
    payloadType: 111,
    telephoneEventPt: 110,
    telephoneEventClockRate: 48000,
    remote: { host: "127.0.0.1", port: 5200 },
    direction: "sendrecv",
  });
  // G.711-only far ends still get G.711: sipp's answer above reads as before.
  assert.equal(negotiateAnswer(sippUasAnswer).audio?.codec, "PCMU");
});

Deno.test("Opus: an offer of Opus only is answered with Opus; the 8 kHz event is taken when alone", () => {
  const opusOnlyOffer = opusAnswer.replace(
    "m=audio 5200 RTP/AVP 111 110",
    "m=audio 5200 RTP/AVP 96 101",
  )
    .replace("a=rtpmap:111 opus/48000/2", "a=rtpmap:96 OPUS/48000/2")
    .replace("a=fmtp:111", "a=fmtp:96")
    .replace("a=rtpmap:110 telephone-event/48000", "a=rtpmap:101 telephone-event/8000")
    .replace("a=fmtp:110", "a=fmtp:101");
  const { sdp, media } = answerCallOffer(opusOnlyOffer, { address: "127.0.0.1", audioPort: 30000 });
  assert.equal(media.audio?.codec, "OPUS");
  assert.equal(media.audio?.payloadType, 96);
  assert.deepEqual([media.audio?.telephoneEventPt, media.audio?.telephoneEventClockRate], [
    101,
    8000,
  ]);
  const answer = parseSdp(sdp).media[0];
  assert.deepEqual(answer.formats, ["96", "101"]);
  assert.equal(rtpmap(answer, 96)?.clockRate, 48000);
  assert.equal(rtpmap(answer, 96)?.channels, 2);
  assert.equal(rtpmap(answer, 101)?.clockRate, 8000);
  // Opus at another clock is not Opus as RFC 7587 has it: nothing in common.
  assert.throws(
    () =>
      answerCallOffer(opusOnlyOffer.replace("OPUS/48000/2", "OPUS/16000"), {
        address: "127.0.0.1",
        audioPort: 30000,
      }),
    BadRequestError,
  );
});
