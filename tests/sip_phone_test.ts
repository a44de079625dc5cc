/**
 * The Web SDK phone over the real signaling protocol (the SDK's frames, sent by WcsClient) with
 * a werift peer standing for the browser and baresip as the far end: an outgoing call reaches
 * `talk` ESTABLISHED with sound both ways, hangup from either side ends both, an INVITE to the
 * session's login rings it (`setRemoteSDP` before `notifyIncomingCall`) and `answer` takes it,
 * the session's end hangs its calls up, and the refusals the SDK can meet.
 */
import assert from "node:assert/strict";
import { Buffer } from "node:buffer";
import dgram from "node:dgram";
import {
  MediaStreamTrack,
  RTCPeerConnection,
  RTCRtpCodecParameters,
  RtpHeader,
  RtpPacket,
} from "werift";
import type { MediaFrame } from "../media/frame.ts";
import { TsDemuxer } from "../media/formats/mpegts/demuxer.ts";
import { type Baresip, startBaresip } from "./helpers/baresip.ts";
import { startHookBackend } from "./helpers/hook_backend.ts";
import { waitFor } from "./helpers/media_fixtures.ts";
import { sdkConnectionObject, WcsClient } from "./helpers/wcs_client.ts";
import { startTestServer, testConfig, type TestServer } from "./helpers/test_server.ts";
import { loopbackIce } from "./webrtc_helpers.ts";

/** Longest wait for a call status, in ms. */
const statusWaitMs = 10_000;

/** 5 s of a 440 Hz tone as 20 ms Opus packets (ffmpeg's libopus through MPEG-TS). */
async function opusTone(): Promise<MediaFrame[]> {
  const out = await new Deno.Command("ffmpeg", {
    args: [
      ...["-v", "error", "-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000", "-t", "5"],
      ...["-c:a", "libopus", "-b:a", "64k", "-frame_duration", "20", "-f", "mpegts", "-"],
    ],
    stdout: "piped",
    stderr: "piped",
  }).output();
  assert.ok(out.success, new TextDecoder().decode(out.stderr));
  const frames = new TsDemuxer().push(out.stdout).filter((f) => f.codec === "OPUS");
  assert.ok(frames.length > 200, `${frames.length} Opus frames`);
  return frames;
}

/** A werift peer doing what the SDK's WebRTC provider does for a call: Opus sendrecv. */
class Browser {
  readonly pc = new RTCPeerConnection({
    ...loopbackIce(),
    codecs: {
      audio: [new RTCRtpCodecParameters({ mimeType: "audio/opus", clockRate: 48000, channels: 2 })],
    },
  });
  readonly mic = new MediaStreamTrack({ kind: "audio" });
  /** Payload sizes of the packets received. */
  readonly received: number[] = [];
  #timer?: ReturnType<typeof setInterval>;

  constructor() {
    this.pc.onTrack.subscribe((track) => {
      track.onReceiveRtp.subscribe((rtp) => this.received.push(rtp.payload.length));
    });
  }

  /** The offer of an outgoing call. */
  async offer(): Promise<string> {
    this.pc.addTransceiver(this.mic, { direction: "sendrecv" });
    await this.pc.setLocalDescription(await this.pc.createOffer());
    return this.pc.localDescription!.sdp;
  }

  /** The answer to the server's offer of an incoming call. */
  async answer(offer: string): Promise<string> {
    await this.pc.setRemoteDescription({ type: "offer", sdp: offer });
    const [transceiver] = this.pc.getTransceivers();
    transceiver.sender.replaceTrack(this.mic);
    transceiver.setDirection("sendrecv");
    await this.pc.setLocalDescription(await this.pc.createAnswer());
    return this.pc.localDescription!.sdp;
  }

  /** Sends the tone as the microphone, in real time, looping. */
  speak(frames: MediaFrame[]): void {
    let i = 0;
    let seq = 1;
    this.#timer = setInterval(() => {
      const frame = frames[i++ % frames.length];
      this.mic.writeRtp(
        new RtpPacket(
          new RtpHeader({ sequenceNumber: seq++ & 0xffff, timestamp: i * 960, payloadType: 111 }),
          Buffer.from(frame.data),
        ),
      );
    }, 20);
  }

  /** Mean payload size of the last `n` packets received (silence in Opus is ~3 bytes). */
  meanPayload(n = 50): number {
    const last = this.received.slice(-n);
    return last.reduce((a, b) => a + b, 0) / Math.max(last.length, 1);
  }

  async close(): Promise<void> {
    clearInterval(this.#timer);
    await this.pc.close();
  }
}

/** The connection object of a session created with sipOptions, as the SDK sends it. */
function phoneConnection(login: string, baresip: Baresip, extra: Record<string, unknown> = {}) {
  return sdkConnectionObject({
    sipLogin: login,
    sipAuthenticationName: login,
    sipPassword: "",
    sipDomain: "127.0.0.1",
    sipOutboundProxy: "",
    // The SDK's phone example sends its port field as text.
    sipPort: String(baresip.sipPort),
    sipRegisterRequired: false,
    ...extra,
  });
}

/** The SDK's `call` message of `call.call()`. */
function callMessage(callId: string, callee: string, sdp: string) {
  return {
    callId,
    incoming: false,
    hasVideo: false,
    hasAudio: true,
    status: "PENDING",
    mediaProvider: "WebRTC",
    sdp,
    caller: "alice",
    callee,
    visibleName: "Alice",
  };
}

/** The next call status message (`notifyTryingResponse`, `ring`, `talk`, `hold`, `finish`). */
async function nextStatus(client: WcsClient, message: string): Promise<Record<string, unknown>> {
  const [status] = await client.next(message, statusWaitMs);
  return status as Record<string, unknown>;
}

/** Waits until `check` is true, at most statusWaitMs. */
async function until(what: string, check: () => boolean | Promise<boolean>): Promise<void> {
  await waitFor(what, async () => (await check()) || undefined, statusWaitMs);
}

async function activeCalls(baresip: Baresip): Promise<string> {
  return (await baresip.command("listcalls")).data;
}

/** Waits until the far end's sound (baresip's tone, not Opus silence) reaches `browser`. */
function farEndSoundAt(browser: Browser): Promise<void> {
  return until("the far end's sound at the browser", () => {
    return browser.received.length > 100 && browser.meanPayload() > 20;
  });
}

/** Waits until baresip has no ESTABLISHED call, then asserts that it heard a tone. */
async function assertEndedHearingTone(baresip: Baresip): Promise<void> {
  await until("baresip's call to end", async () => {
    return !(await activeCalls(baresip)).includes("ESTABLISHED");
  });
  const rms = await baresip.heardRms();
  assert.ok(rms > 1000, `baresip heard RMS ${rms}`);
}

interface Setup {
  server: TestServer;
  baresip: Baresip;
  tone: MediaFrame[];
}

/** Runs `fn` with a server and a baresip (G.711, or the `audioCodecs` given). */
async function withPhone(
  fn: (s: Setup) => Promise<void>,
  manual = false,
  audioCodecs?: string,
): Promise<void> {
  const tone = await opusTone();
  const server = await startTestServer(testConfig());
  const baresip = await startBaresip({ answerMode: manual ? "manual" : "auto", audioCodecs });
  try {
    await fn({ server, baresip, tone });
  } catch (err) {
    console.error(`baresip log:\n${baresip.log()}`);
    throw err;
  } finally {
    await baresip.stop();
    await server.stop();
  }
}

/** Places a call from a new session to baresip; resolves once it is `talk` ESTABLISHED. */
async function placeCall(s: Setup, callId: string) {
  const { client } = await WcsClient.connect(s.server.wsUrl, phoneConnection("alice", s.baresip));
  const browser = new Browser();
  client.send("call", callMessage(callId, s.baresip.user, await browser.offer()));
  const [id, answer] = await client.next("setRemoteSDP", statusWaitMs) as [string, string];
  assert.equal(id, callId);
  await browser.pc.setRemoteDescription({ type: "answer", sdp: answer });
  const trying = await nextStatus(client, "notifyTryingResponse");
  assert.deepEqual([trying.callId, trying.status], [callId, "TRYING"]);
  const talk = await nextStatus(client, "talk");
  assert.deepEqual(
    [talk.callId, talk.status, talk.sipStatus, talk.incoming, talk.caller, talk.callee],
    [callId, "ESTABLISHED", 200, false, "alice", s.baresip.user],
  );
  return { client, browser };
}

Deno.test("SDK call to baresip: ESTABLISHED, sound both ways, hold, DTMF, the SDK's hangup ends both", async () => {
  await withPhone(async (s) => {
    const { client, browser } = await placeCall(s, "call-out-1");
    try {
      assert.ok(!client.messages().includes("registered"), "registered without registration");
      browser.speak(s.tone);
      assert.match(await activeCalls(s.baresip), /ESTABLISHED/);
      // baresip's 400 Hz tone, made Opus, reaches the browser.
      await farEndSoundAt(browser);
      // Through the send engine (the test server has the ICE mux and the engine when FFI
      // loads), as a Web SDK player's media goes.
      if (s.server.services.sendPaths.engine) {
        assert.equal(s.server.services.sendPaths.size, 1, "the call's audio on the send engine");
      }
      client.send("hold", { callId: "call-out-1" });
      const hold = await nextStatus(client, "hold");
      assert.deepEqual([hold.callId, hold.status], ["call-out-1", "HOLD"]);
      client.send("unhold", { callId: "call-out-1" });
      const unhold = await nextStatus(client, "talk");
      assert.deepEqual([unhold.callId, unhold.status], ["call-out-1", "ESTABLISHED"]);
      // call.sendDTMF("1#") of the SDK: RFC 2833 events baresip logs.
      client.send("sendDtmf", { callId: "call-out-1", type: "RFC2833", dtmf: "1#" });
      await until("baresip to log the digits", () => {
        const log = s.baresip.log();
        return log.includes("received event: '1'") && log.includes("received event: '#'");
      });
      await new Promise((r) => setTimeout(r, 1500));
      client.send("hangup", { callId: "call-out-1" });
      const finish = await nextStatus(client, "finish");
      assert.deepEqual([finish.callId, finish.status], ["call-out-1", "FINISH"]);
      // What baresip heard, decoded from G.711: the browser's tone, not silence.
      await assertEndedHearingTone(s.baresip);
    } finally {
      await browser.close();
      await client.close();
    }
  });
});

Deno.test("SDK call to an Opus baresip: Opus offered first, the SIP leg runs Opus, sound both ways", async () => {
  await withPhone(
    async (s) => {
      const { client, browser } = await placeCall(s, "call-opus-1");
      try {
        // baresip prefers Opus but takes PCMU: Opus first in our offer is what makes it Opus.
        const call = s.server.services.calls.get("call-opus-1");
        assert.equal(call.media.media.audio?.codec, "OPUS");
        browser.speak(s.tone);
        await farEndSoundAt(browser);
        await new Promise((r) => setTimeout(r, 1000));
        client.send("hangup", { callId: "call-opus-1" });
        await nextStatus(client, "finish");
        // What baresip heard, decoded from Opus: the browser's tone, not silence.
        await assertEndedHearingTone(s.baresip);
      } finally {
        await browser.close();
        await client.close();
      }
    },
    false,
    "opus/48000/2,PCMU",
  );
});

Deno.test("SDK call to baresip: baresip's hangup ends the SDK's call", async () => {
  await withPhone(async (s) => {
    const { client, browser } = await placeCall(s, "call-out-2");
    try {
      await s.baresip.command("hangup");
      const finish = await nextStatus(client, "finish");
      assert.deepEqual([finish.callId, finish.status], ["call-out-2", "FINISH"]);
      // The call is gone from the server: a hangup of it now does nothing and fails nothing.
      client.send("hold", { callId: "call-out-2" });
      const [fail] = await client.next("fail", statusWaitMs) as [Record<string, unknown>];
      assert.equal(fail.apiMethod, "hold");
      assert.match(String(fail.info), /not found/);
    } finally {
      await browser.close();
      await client.close();
    }
  });
});

Deno.test("INVITE to the session's login rings the SDK; answer connects; the session's end hangs up", async () => {
  await withPhone(async (s) => {
    const { client } = await WcsClient.connect(s.server.wsUrl, phoneConnection("bob", s.baresip));
    const browser = new Browser();
    try {
      await s.baresip.command("dial", `sip:bob@127.0.0.1:${s.server.sipPort}`);
      const [callId, offer] = await client.next("setRemoteSDP", statusWaitMs) as [string, string];
      const [incoming] = await client.next("notifyIncomingCall", statusWaitMs) as [
        Record<string, unknown>,
      ];
      // The SDK caches the SDP of an unknown call id; after notifyIncomingCall it would hand
      // it to a media connection answer() has not made yet.
      const order = client.messages();
      assert.ok(order.indexOf("setRemoteSDP") < order.indexOf("notifyIncomingCall"), `${order}`);
      assert.equal(incoming.callId, callId);
      assert.equal(incoming.incoming, true);
      assert.equal(incoming.callee, "bob");
      assert.equal(incoming.status, "RING");
      assert.match(offer, /a=rtpmap:111 opus\/48000\/2/);
      client.send("answer", {
        callId,
        incoming: true,
        hasVideo: false,
        hasAudio: true,
        status: "PENDING",
        mediaProvider: "WebRTC",
        sdp: await browser.answer(offer),
        callee: "bob",
      });
      const talk = await nextStatus(client, "talk");
      assert.deepEqual([talk.callId, talk.status], [callId, "ESTABLISHED"]);
      browser.speak(s.tone);
      await farEndSoundAt(browser);
      assert.match(await activeCalls(s.baresip), /ESTABLISHED/);
      // The session ends (the tab closes): its call is hung up at baresip.
      await client.close();
      await assertEndedHearingTone(s.baresip);
    } finally {
      await browser.close();
      await client.close();
    }
  });
});

Deno.test("SDK phone refusals: no sipOptions, an offer without Opus, a call without sdp", async () => {
  await withPhone(async (s) => {
    const plain = await WcsClient.connect(s.server.wsUrl);
    const { client } = await WcsClient.connect(s.server.wsUrl, phoneConnection("alice", s.baresip));
    try {
      plain.client.send("call", callMessage("c1", "baresip", "v=0\r\n"));
      const noAccount = await nextStatus(plain.client, "finish");
      assert.deepEqual([noAccount.callId, noAccount.status], ["c1", "FAILED"]);
      assert.match(String(noAccount.info), /no SIP account/);
      assert.ok(!plain.client.messages().includes("registered"));

      client.send("call", callMessage("c2", "baresip", "v=0\r\nm=audio 9 RTP/AVP 0\r\n"));
      const badOffer = await nextStatus(client, "finish");
      assert.deepEqual([badOffer.callId, badOffer.status], ["c2", "FAILED"]);

      client.send("call", { callId: "c3", callee: "baresip" });
      const [fail] = await client.next("fail", statusWaitMs) as [Record<string, unknown>];
      assert.deepEqual([fail.apiMethod, fail.info], [
        "call",
        "sdp: Invalid input: expected string, received undefined",
      ]);
    } finally {
      await plain.client.close();
      await client.close();
    }
  });
});

/**
 * A registrar on 127.0.0.1 that answers every REGISTER with `status` (the Expires asked is
 * granted); it records the Expires of each request. (The user agent's digest exchange with a
 * real registrar is proven against sipp in media/protocols/sip/user_agent_sipp_test.ts.)
 */
async function startRegistrar(status: 200 | 403) {
  const socket = dgram.createSocket("udp4");
  const expires: number[] = [];
  socket.on("message", (data, from) => {
    const text = data.toString();
    if (!text.startsWith("REGISTER ")) return;
    const header = (name: string) =>
      text.split("\r\n").filter((l) => l.toLowerCase().startsWith(`${name.toLowerCase()}:`));
    const asked = Number(/^expires:\s*(\d+)/im.exec(text)?.[1] ?? /expires=(\d+)/i.exec(text)?.[1]);
    expires.push(asked);
    const reason = status === 200 ? "OK" : "Forbidden";
    const lines = [
      `SIP/2.0 ${status} ${reason}`,
      ...header("Via"),
      ...header("From"),
      ...header("To").map((to) => `${to};tag=registrar`),
      ...header("Call-ID"),
      ...header("CSeq"),
      ...(status === 200 ? [...header("Contact"), `Expires: ${asked}`] : []),
      "Content-Length: 0",
      "",
      "",
    ];
    socket.send(lines.join("\r\n"), from.port, from.address);
  });
  await new Promise<void>((resolve) => socket.bind(0, "127.0.0.1", () => resolve()));
  return {
    port: socket.address().port,
    expires,
    close: () => new Promise<void>((resolve) => socket.close(() => resolve())),
  };
}

Deno.test("sipRegisterRequired: registered once REGISTER succeeds, unregistered at the session's end; a refusal is a WARN", async () => {
  const backend = await startHookBackend();
  const server = await startTestServer(testConfig({ hooks: { url: backend.url } }));
  const registrar = await startRegistrar(200);
  const refusing = await startRegistrar(403);
  try {
    const connection = (port: number) =>
      sdkConnectionObject({
        sipLogin: "carol",
        sipPassword: "secret",
        sipDomain: "127.0.0.1",
        sipPort: port,
        sipRegisterRequired: true,
      });
    const { client } = await WcsClient.connect(server.wsUrl, connection(registrar.port));
    const [registered] = await client.next("registered", statusWaitMs) as [
      Record<string, unknown>,
    ];
    assert.deepEqual(
      [registered.status, registered.sipStatus, registered.sipLogin],
      ["REGISTERED", 200, "carol"],
    );
    const hook = await backend.waitFor("RegistrationStatusEvent", statusWaitMs);
    assert.deepEqual(
      [hook.body.status, hook.body.sipStatus, hook.body.sipLogin, hook.body.appKey],
      ["REGISTERED", 200, "carol", "defaultApp"],
    );
    assert.equal(typeof hook.body.sessionId, "string");
    await client.close();
    // The session's end removes the binding (Expires: 0).
    await until("the unregistration", () => registrar.expires.includes(0));

    const refused = await WcsClient.connect(server.wsUrl, connection(refusing.port));
    try {
      const [fail] = await refused.client.next("fail", statusWaitMs) as [Record<string, unknown>];
      assert.deepEqual(
        [fail.apiMethod, fail.status, fail.sipStatus],
        ["RegistrationStatusEvent", "FAILED", 403],
      );
      assert.ok(!refused.client.messages().includes("registered"));
    } finally {
      await refused.client.close();
    }
  } finally {
    await server.stop();
    await registrar.close();
    await refusing.close();
    await backend.close();
  }
});

Deno.test("the call hook: a backend refusing it under restOnError FAIL fails the call before dialling", async () => {
  const backend = await startHookBackend((call) => {
    if (call.hook === "connect") {
      return {
        status: 200,
        body: { ...call.body, restClientConfig: { call: { restOnError: "FAIL" } } },
      };
    }
    return { status: call.hook === "call" ? 403 : 200 };
  });
  const server = await startTestServer(testConfig({ hooks: { url: backend.url } }));
  const { client } = await WcsClient.connect(
    server.wsUrl,
    sdkConnectionObject({ sipLogin: "dave", sipDomain: "127.0.0.1", sipPort: 5060 }),
  );
  const browser = new Browser();
  try {
    client.send("call", callMessage("denied-1", "nobody", await browser.offer()));
    const finish = await nextStatus(client, "finish");
    assert.deepEqual(
      [finish.callId, finish.status, finish.info],
      ["denied-1", "FAILED", "Restricted access"],
    );
    const hook = (await backend.waitFor("call", statusWaitMs)).body;
    assert.deepEqual([hook.callId, hook.callee, hook.appKey], ["denied-1", "nobody", "defaultApp"]);
    assert.ok(!client.messages().includes("setRemoteSDP"));
    assert.deepEqual(await (await server.post("/call/find_all")).json(), []);
  } finally {
    await browser.close();
    await client.close();
    await server.stop();
    await backend.close();
  }
});
