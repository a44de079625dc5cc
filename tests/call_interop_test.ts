/**
 * `/call` against real far ends, checked as a user would: baresip (auto-answer) logs the
 * RFC 2833 and SIP INFO digits we send and hears a sound we inject (its sndfile recording);
 * a call's received audio pushed to nginx-rtmp reads back as AAC in ffprobe; a call with
 * sipRegisterRequired registers with digest at a sipp registrar before it dials, and a
 * refused registration is a 502 with no call left.
 */
import assert from "node:assert/strict";
import { run } from "../media/formats/test_fixtures.ts";
import { type Baresip, startBaresip } from "./helpers/baresip.ts";
import { calls, callWithStatus, startupBody } from "./helpers/call_checks.ts";
import { makeClip, waitFor } from "./helpers/media_fixtures.ts";
import { startNginxRtmp } from "./helpers/nginx_rtmp.ts";
import { bindUdp, freeUdpRange } from "./helpers/process.ts";
import { ok, refused } from "./helpers/rest_checks.ts";
import { type Sipp, startSipp } from "./helpers/sipp.ts";
import { testConfig, type TestServer, withServer } from "./helpers/test_server.ts";

/** The sipp registrar that challenges with digest (user/pass from `-key`). */
const registrarScenario = new URL(
  "../media/protocols/sip/testdata/register_digest_uas.xml",
  import.meta.url,
).pathname;

/** sipp's exit code, or a failure when it has not exited within `ms`. */
async function exitedWithin(sipp: Sipp, ms: number): Promise<number> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`sipp still running: ${sipp.errors()}`)), ms);
  });
  try {
    return await Promise.race([sipp.exited, late]);
  } finally {
    clearTimeout(timer);
  }
}

/** A config whose media folder holds `tone.wav`, a 1 kHz tone of `seconds` at 8 kHz. */
async function configWithTone(seconds: number) {
  const config = testConfig();
  await Deno.mkdir(config.folders.media, { recursive: true });
  await run("ffmpeg", [
    ...["-v", "error", "-f", "lavfi", "-i", `sine=frequency=1000:duration=${seconds}`],
    ...["-ar", "8000", "-ac", "1", `${config.folders.media}/tone.wav`],
  ]);
  return config;
}

/**
 * Runs `fn` with an auto-answering baresip (G.711, or the `audioCodecs` given); its log is
 * printed when `fn` fails.
 */
async function withBaresip(
  fn: (baresip: Baresip) => Promise<void>,
  audioCodecs?: string,
): Promise<void> {
  const baresip = await startBaresip({ audioCodecs });
  try {
    await fn(baresip);
  } catch (err) {
    console.error(`baresip log:\n${baresip.log()}`);
    throw err;
  } finally {
    await baresip.stop();
  }
}

/** Injects `tone.wav` into call `callId`; resolves with baresip's heard RMS once over 1000. */
async function injectToneHeard(server: TestServer, baresip: Baresip, callId: string) {
  await ok(server, "/call/inject_sound", { callId, fileName: "tone.wav" });
  return await waitFor("baresip to hear the tone", async () => {
    const rms = await baresip.heardRms();
    return rms > 1000 ? rms : undefined;
  }, 6000);
}

/** The first four RFC 2833 digits baresip logs (ended events), once it has logged them. */
function loggedDigits(baresip: Baresip): Promise<string[]> {
  return waitFor("baresip to log the four digits", () => {
    const digits = [...baresip.log().matchAll(/received event: '(.)' \(end=1\)/g)]
      .map((m) => m[1]);
    return digits.length >= 4 ? digits : undefined;
  });
}

/** The streams ffprobe reads at `url` (nginx-rtmp), once there are `count` of them. */
function servedStreams(url: string, what: string, count: number, timeoutMs: number) {
  return waitFor(what, async () => {
    const probed = await run("ffprobe", [
      ...["-v", "error", "-rw_timeout", "5000000", "-show_entries"],
      ...["stream=codec_name,codec_type", "-of", "json", url],
    ]).catch(() => undefined); // nginx has no stream yet
    const found = probed && JSON.parse(probed.out).streams;
    return found?.length === count ? found : undefined;
  }, timeoutMs) as Promise<{ codec_name: string; codec_type: string }[]>;
}

/** Terminates call `callId` and waits for its FINISH. */
async function hangUp(server: TestServer, callId: string): Promise<void> {
  await ok(server, "/call/terminate", { callId });
  await callWithStatus(server, callId, "FINISH");
}

/** Places call `callId` to baresip by its full URI; resolves once it is ESTABLISHED. */
async function callBaresip(server: TestServer, baresip: Baresip, callId: string) {
  const callee = `sip:${baresip.user}@127.0.0.1:${baresip.sipPort}`;
  await ok(server, "/call/startup", startupBody(callId, baresip.sipPort, callee));
  const call = await callWithStatus(server, callId, "ESTABLISHED");
  assert.equal(call.sipStatus, 200);
}

Deno.test("baresip receives RFC 2833 digits '123#' and a SIP INFO digit", async () => {
  await withBaresip(async (baresip) => {
    await withServer(async (server) => {
      await callBaresip(server, baresip, "dtmf1");
      await ok(server, "/call/send_dtmf", { callId: "dtmf1", dtmf: "123#", type: "RFC2833" });
      const events = await loggedDigits(baresip);
      assert.deepEqual(events, ["1", "2", "3", "#"]);
      // SIP INFO application/dtmf-relay: baresip answers 200 and logs the digit.
      await ok(server, "/call/send_dtmf", { callId: "dtmf1", dtmf: "5", type: "INFO" });
      await waitFor("baresip to log the INFO digit", () => {
        return /call: received DTMF: '5'/.test(baresip.log()) || undefined;
      }, 5000);
      await hangUp(server, "dtmf1");
    });
  });
});

Deno.test("inject_sound is heard at baresip: its recording goes from silence to the tone", async () => {
  const config = await configWithTone(3);
  await withBaresip(async (baresip) => {
    await withServer(async (server) => {
      await callBaresip(server, baresip, "snd1");
      // Nothing is sent into the call before the injection.
      await new Promise((r) => setTimeout(r, 500));
      const before = await baresip.heardRms();
      // The 1 kHz tone at 1/8 scale has an RMS of ~2,900; what came before lowers the mean.
      const heard = await injectToneHeard(server, baresip, "snd1");
      assert.ok(before < 100, `baresip heard RMS ${before} before the injection`);
      assert.ok(heard > 1000, `baresip heard RMS ${heard}`);
      await hangUp(server, "snd1");
    }, config);
  });
});

Deno.test("baresip speaking only Opus: the call runs in Opus, hears inject_sound, logs RFC 2833 digits", async () => {
  const config = await configWithTone(3);
  await withBaresip(async (baresip) => {
    await withServer(async (server) => {
      await callBaresip(server, baresip, "opus1");
      const call = (await calls(server)).find((c) => c.callId === "opus1");
      assert.match(String(call?.sdp), /m=audio \d+ RTP\/AVP 111\b/, "baresip answered Opus");
      const heard = await injectToneHeard(server, baresip, "opus1");
      assert.ok(heard > 1000, `baresip heard RMS ${heard}`);
      await ok(server, "/call/send_dtmf", { callId: "opus1", dtmf: "123#", type: "RFC2833" });
      const events = await loggedDigits(baresip);
      assert.deepEqual(events, ["1", "2", "3", "#"]);
      await hangUp(server, "opus1");
    }, config);
  }, "opus/48000/2");
});

Deno.test("baresip speaking only G.722: the call runs in G.722 and hears inject_sound", async () => {
  const config = await configWithTone(3);
  await withBaresip(async (baresip) => {
    await withServer(async (server) => {
      await callBaresip(server, baresip, "g722");
      const call = (await calls(server)).find((c) => c.callId === "g722");
      assert.match(String(call?.sdp), /m=audio \d+ RTP\/AVP 9\b/, "baresip answered G.722");
      const heard = await injectToneHeard(server, baresip, "g722");
      assert.ok(heard > 1000, `baresip heard RMS ${heard}`);
      await hangUp(server, "g722");
    }, config);
  }, "G722/16000/1");
});

Deno.test("a call with rtmpUrl pushes its received audio to nginx-rtmp as AAC", async () => {
  const config = await configWithTone(8);
  const nginx = await startNginxRtmp();
  const sipp = await startSipp({ scenario: "uas_echo.xml", rtpEcho: true, args: ["-m", "1"] });
  try {
    await withServer(async (server) => {
      await ok(server, "/call/startup", {
        ...startupBody("rtmp1", sipp.port),
        rtmpUrl: nginx.liveUrl,
        rtmpStream: "callout",
      });
      await callWithStatus(server, "rtmp1", "ESTABLISHED");
      // sipp echoes what we inject, so the call receives sound.
      await ok(server, "/call/inject_sound", { callId: "rtmp1", fileName: "tone.wav" });
      const active = await waitFor("the push to be active", async () => {
        const call = (await calls(server)).find((c) => c.callId === "rtmp1");
        return call?.rtmpStreamStatus === "RTMP_STREAM_ACTIVE" ? call : undefined;
      });
      assert.equal(active.rtmpUrl, nginx.liveUrl);
      assert.equal(active.rtmpStream, "callout");
      const url = `${nginx.liveUrl}/callout`;
      const streams = await servedStreams(url, "nginx serving the call's audio", 1, 15_000);
      assert.deepEqual(streams.map((s) => [s.codec_type, s.codec_name]), [["audio", "aac"]]);
      await hangUp(server, "rtmp1");
      assert.equal(await exitedWithin(sipp, 5000), 0, sipp.errors());
    }, config);
  } finally {
    await sipp.stop();
    await nginx.stop();
  }
});

Deno.test("a video call: a VOD's H.264 and sound injected come back through sipp's echo and land at nginx-rtmp as h264 + aac", async () => {
  const config = testConfig();
  await Deno.mkdir(config.folders.media, { recursive: true });
  await makeClip(`${config.folders.media}/clip.mp4`, { seconds: 30, audio: "aac" });
  const nginx = await startNginxRtmp();
  const sipp = await startSipp({
    scenario: "uas_echo_video.xml",
    rtpEcho: true,
    args: ["-m", "1"],
  });
  try {
    await withServer(async (server) => {
      await ok(server, "/vod/startup", { uri: "vod-live://clip.mp4", localStreamName: "clip" });
      await ok(server, "/call/startup", {
        ...startupBody("video1", sipp.port),
        hasVideo: "true",
        rtmpUrl: nginx.liveUrl,
        rtmpStream: "videocall",
      });
      const call = await callWithStatus(server, "video1", "ESTABLISHED");
      assert.match(call.sdp ?? "", /m=video \d+ RTP\/AVP 96/);
      await ok(server, "/call/inject_stream/startup", { callId: "video1", streamName: "clip" });
      const stream = await waitFor("the echoed pictures", async () => {
        const [found] = await (await server.post("/stream/find", { name: "video1" })).json() as {
          width: number;
          height: number;
          fps: number;
        }[];
        return found && found.fps > 0 ? found : undefined;
      });
      assert.deepEqual([stream.width, stream.height], [320, 240]);
      const url = `${nginx.liveUrl}/videocall`;
      const streams = await servedStreams(url, "nginx serving the video call", 2, 20_000);
      assert.deepEqual(
        streams.map((s) => [s.codec_type, s.codec_name]).sort(),
        [["audio", "aac"], ["video", "h264"]],
      );
      await ok(server, "/call/inject_stream/terminate", { callId: "video1" });
      await refused(server, "/call/inject_stream/terminate", { callId: "video1" }, 404);
      await hangUp(server, "video1");
      assert.equal(await exitedWithin(sipp, 5000), 0, sipp.errors());
    }, config);
  } finally {
    await sipp.stop();
    await nginx.stop();
  }
});

Deno.test("sipRegisterRequired: REGISTER with digest first, then the INVITE; unregistered at the end", async () => {
  const registrar = await startSipp({
    scenario: registrarScenario,
    args: ["-m", "1", "-key", "user", "alice", "-key", "pass", "secret"],
  });
  const far = await startSipp({ scenario: "uas_echo.xml", rtpEcho: true, args: ["-m", "1"] });
  try {
    await withServer(async (server) => {
      await ok(server, "/call/startup", {
        ...startupBody("reg1", registrar.port, `sip:echo@127.0.0.1:${far.port}`),
        sipRegisterRequired: "true",
      });
      const call = await callWithStatus(server, "reg1", "ESTABLISHED");
      assert.equal(call.sipStatus, 200);
      await hangUp(server, "reg1");
      // The registrar's scenario ends 0 only after a good digest REGISTER and the
      // unregistration (Expires: 0) that the call's end sends.
      assert.equal(await exitedWithin(registrar, 5000), 0, registrar.errors());
      assert.equal(await exitedWithin(far, 5000), 0, far.errors());
    });
  } finally {
    await registrar.stop();
    await far.stop();
  }
});

Deno.test("sipRegisterRequired: a refused REGISTER is a 502 naming it, no INVITE goes, no call stays", async () => {
  const registrar = await startSipp({
    scenario: registrarScenario,
    args: ["-m", "1", "-key", "user", "alice", "-key", "pass", "other"],
  });
  const farPort = await freeUdpRange(1);
  const far = (await bindUdp(farPort))!;
  let datagrams = 0;
  far.on("message", () => datagrams++);
  try {
    await withServer(async (server) => {
      await refused(
        server,
        "/call/startup",
        {
          ...startupBody("reg2", registrar.port, `sip:echo@127.0.0.1:${farPort}`),
          sipRegisterRequired: true,
        },
        502,
        /regist.*403/i,
      );
      assert.deepEqual(await calls(server), []);
      await new Promise((r) => setTimeout(r, 300));
      assert.equal(datagrams, 0, "an INVITE went out after the refused registration");
      // The callId is free again.
      await refused(
        server,
        "/call/startup",
        {
          ...startupBody("reg2", registrar.port, `sip:echo@127.0.0.1:${farPort}`),
          sipRegisterRequired: true,
        },
        502,
      );
    }, testConfig({ sip: { t1Ms: 50 } }));
  } finally {
    await registrar.stop();
    await new Promise<void>((r) => far.close(() => r()));
  }
});
