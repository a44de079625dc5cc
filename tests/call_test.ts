/**
 * `/call` against SIPp as the far end, checked as a user would: the call's status and SIP
 * status in `/call/find_all`, the CallStatusEvent hook's bodies, the sound that comes back
 * through sipp's RTP echo decoded from the call's stream, DTMF echoed back, BYE either way,
 * and the refusals.
 */
import assert from "node:assert/strict";
import { g711Decode } from "../media/codecs/g711.ts";
import type { Stream } from "../media/stream.ts";
import { calls, callWithStatus, startupBody } from "./helpers/call_checks.ts";
import { startHookBackend } from "./helpers/hook_backend.ts";
import { run } from "../media/formats/test_fixtures.ts";
import { probe, waitFor } from "./helpers/media_fixtures.ts";
import { ok, refused } from "./helpers/rest_checks.ts";
import { bindUdp, freeUdpRange } from "./helpers/process.ts";
import { startSipp } from "./helpers/sipp.ts";
import { testConfig, withServer } from "./helpers/test_server.ts";

/**
 * The loudest RMS (in sample units) of 200 ms windows of `stream`'s decoded G.711, read for
 * up to `ms` and stopped early once one reaches `enough`.
 */
async function loudestRms(stream: Stream, ms: number, enough = Infinity): Promise<number> {
  const reader = stream.reader();
  const windowSamples = 1600;
  let loudest = 0;
  let sum = 0;
  let count = 0;
  const until = performance.now() + ms;
  try {
    while (performance.now() < until && loudest < enough) {
      const frame = await Promise.race([
        reader.next(),
        new Promise<undefined>((r) => setTimeout(() => r(undefined), 200)),
      ]);
      if (!frame || (frame.codec !== "PCMU" && frame.codec !== "PCMA")) continue;
      for (const sample of g711Decode(frame.codec, frame.data)) {
        sum += sample * sample;
        if (++count < windowSamples) continue;
        loudest = Math.max(loudest, Math.sqrt(sum / count));
        sum = 0;
        count = 0;
      }
    }
  } finally {
    reader.close();
  }
  return loudest;
}

Deno.test("a call to sipp: ESTABLISHED, an injected tone comes back through the echo, DTMF, hangup", async () => {
  const sipp = await startSipp({ scenario: "uas_echo.xml", rtpEcho: true, args: ["-m", "1"] });
  const hooks = await startHookBackend();
  const config = testConfig({ hooks: { url: hooks.url } });
  await Deno.mkdir(config.folders.media, { recursive: true });
  await run("ffmpeg", [
    ...["-v", "error", "-f", "lavfi", "-i", "sine=frequency=1000:duration=4"],
    ...["-ar", "8000", "-ac", "1", `${config.folders.media}/tone.wav`],
  ]);
  try {
    await withServer(async (server) => {
      await ok(server, "/call/startup", startupBody("c1", sipp.port));
      await refused(server, "/call/startup", startupBody("c1", sipp.port), 409, /exists/);
      const call = await callWithStatus(server, "c1", "ESTABLISHED");
      assert.equal(call.sipStatus, 200);
      assert.equal(call.caller, "alice");
      assert.equal(call.callee, "echo");
      assert.equal(call.incoming, false);
      assert.match(call.sdp ?? "", /m=audio \d+ RTP\/AVP 0/);
      assert.match(call.sipMessageRaw ?? "", /^SIP\/2\.0 200 OK/);

      const stream = server.services.streams.published("c1") as Stream;
      assert.ok(stream, "the call's stream is published by its callId");
      const silentRms = await loudestRms(stream, 600);
      await ok(server, "/call/inject_sound", { callId: "c1", fileName: "tone.wav" });
      await ok(server, "/stream/startRecording", { mediaSessionId: stream.mediaSessionId });
      const toneRms = await loudestRms(stream, 8000, 3000);
      // The tone is at 1/8 scale (RMS ~2,900 decoded... measured below); nothing was sent before.
      assert.ok(toneRms >= 1000 && silentRms < 100, `echo RMS ${toneRms}, ${silentRms} before`);

      // G.711 is recorded as AAC: MP4 players take no G.711.
      await new Promise((r) => setTimeout(r, 1000));
      await ok(server, "/stream/stopRecording", { mediaSessionId: stream.mediaSessionId });
      const file = await waitFor("the recording", () => {
        try {
          return [...Deno.readDirSync(config.folders.records)].find((e) => !e.name.includes("{"))
            ?.name;
        } catch {
          return undefined; // made with the file
        }
      }, 10_000);
      const info = await probe(`${config.folders.records}/${file}`);
      assert.deepEqual(info.streams.map((s) => s.codec_name), ["aac"]);
      assert.ok(info.duration >= 1, `recorded ${info.duration} s`);

      const digits: string[] = [];
      server.services.calls.get("c1").onDtmf((d) => digits.push(d));
      await ok(server, "/call/send_dtmf", { callId: "c1", dtmf: "123#", type: "RFC2833" });
      await waitFor("the echoed digits", () => digits.length >= 4 ? true : undefined, 5000);
      assert.deepEqual(digits, ["1", "2", "3", "#"]);

      await refused(server, "/call/inject_sound", { callId: "c1", fileName: "none.wav" }, 404);
      await refused(server, "/call/inject_sound", { callId: "c9", fileName: "tone.wav" }, 404);
      await refused(server, "/call/send_dtmf", { callId: "c9", dtmf: "1" }, 404);
      await refused(server, "/call/send_dtmf", { callId: "c1", dtmf: "x" }, 400, /dtmf/);
      await refused(server, "/call/inject_stream/startup", { callId: "c1", streamName: "no" }, 404);

      await ok(server, "/call/terminate", { callId: "c1" });
      const ended = await callWithStatus(server, "c1", "FINISH");
      assert.equal(ended.callId, "c1");
      assert.equal(server.services.streams.published("c1"), undefined);
      assert.equal(await sipp.exited, 0, sipp.errors());
      await refused(server, "/call/terminate", { callId: "c9" }, 404);
    }, config);
    const statuses = hooks.calls.filter((c) => c.hook === "CallStatusEvent")
      .map((c) => (c.body as { status: string }).status);
    assert.ok(statuses.includes("ESTABLISHED"), `hook statuses ${statuses}`);
    const received = hooks.calls.filter((c) => c.hook === "DtmfEvent")
      .map((c) => (c.body as { callId: string; dtmf: string }));
    assert.deepEqual(received.map((b) => b.dtmf), ["1", "2", "3", "#"]);
    assert.ok(received.every((b) => b.callId === "c1"));
    assert.equal(statuses.at(-1), "FINISH");
  } finally {
    await sipp.stop();
    await hooks.close();
  }
});

Deno.test("the far end hangs up: the call goes FINISH and its stream ends", async () => {
  const sipp = await startSipp({ scenario: "uas_hangs_up.xml", args: ["-m", "1"] });
  try {
    await withServer(async (server) => {
      await ok(server, "/call/startup", startupBody("c2", sipp.port, "bye"));
      await callWithStatus(server, "c2", "ESTABLISHED");
      const ended = await callWithStatus(server, "c2", "FINISH");
      assert.equal(ended.sipStatus, 200);
      assert.equal(server.services.streams.published("c2"), undefined);
      assert.equal(await sipp.exited, 0, sipp.errors());
    });
  } finally {
    await sipp.stop();
  }
});

Deno.test("a far end that never answers: FAILED with 408 listed; bad fields are 400 naming them", async () => {
  const port = await freeUdpRange(1);
  const silent = (await bindUdp(port))!;
  try {
    await withServer(async (server) => {
      await refused(server, "/call/startup", { ...startupBody("x", port), sipDomain: "" }, 400);
      await refused(
        server,
        "/call/startup",
        { ...startupBody("x", port), sipDomain: "bad host!" },
        400,
        /sipDomain/,
      );
      await refused(server, "/call/startup", { ...startupBody("x", port), sipPort: "70000" }, 400);
      await refused(
        server,
        "/call/startup",
        { ...startupBody("x", port), callee: "sip:" },
        400,
        /callee/,
      );
      assert.deepEqual(await calls(server), []);
      await ok(server, "/call/startup", startupBody("c3", port));
      const failed = await callWithStatus(server, "c3", "FAILED", 10_000);
      assert.equal(failed.sipStatus, 408);
    }, testConfig({ sip: { t1Ms: 50 } }));
  } finally {
    await new Promise<void>((r) => silent.close(() => r()));
  }
});
