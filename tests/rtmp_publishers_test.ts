/**
 * RTMP publishers the way third-party encoders behave: ffmpeg and GStreamer's rtmp2sink end
 * their publish with the unpublish sequence and exit cleanly; a raw client that publishes
 * before connecting is refused; MP3 audio arrives as AAC; audio codecs that cannot be
 * converted are refused with a status naming them.
 */
import assert from "node:assert/strict";
import { createLogger } from "../core/log.ts";
import { decodeAmf0All } from "../media/protocols/rtmp/amf0.ts";
import { buildCommand } from "../media/protocols/rtmp/command.ts";
import { openRtmpClient } from "../media/protocols/rtmp/client.ts";
import { RtmpConn } from "../media/protocols/rtmp/conn.ts";
import { ChunkStreamId, MessageType } from "../media/protocols/rtmp/message.ts";
import { parseRtmpUrl } from "../media/protocols/rtmp/url.ts";
import { run } from "../media/formats/test_fixtures.ts";
import { makeClip, waitFor } from "./helpers/media_fixtures.ts";
import { startTestServer, testConfig, type TestServer } from "./helpers/test_server.ts";

/** Runs a command to its end; exit status and error output. */
async function runToEnd(cmd: string, args: string[]): Promise<{ code: number; stderr: string }> {
  const out = await new Deno.Command(cmd, { args, stdin: "null", stdout: "null", stderr: "piped" })
    .output();
  return { code: out.code, stderr: new TextDecoder().decode(out.stderr) };
}

/** The published streams of `name` per /stream/find. */
async function findStreams(server: TestServer, name: string): Promise<Record<string, unknown>[]> {
  const res = await server.post("/stream/find", { name });
  if (res.status === 404) {
    await res.body?.cancel();
    return [];
  }
  return await res.json();
}

/** A server whose log lines are kept. */
async function loggedServer(): Promise<{ server: TestServer; lines: string[] }> {
  const lines: string[] = [];
  const log = createLogger({ level: "debug", write: (line) => lines.push(line) });
  return { server: await startTestServer(testConfig(), log), lines };
}

Deno.test("ffmpeg publishing a short file exits 0 without 'Broken pipe'; the stream ends with it", async () => {
  const clip = await Deno.makeTempFile({ suffix: ".mp4" });
  const server = await startTestServer();
  try {
    await makeClip(clip, { seconds: 2, audio: "aac" });
    const url = `rtmp://127.0.0.1:${server.rtmpPort}/live/short`;
    const published = await runToEnd("ffmpeg", [
      ...["-hide_banner", "-nostdin", "-re", "-i", clip, "-c", "copy", "-f", "flv", url],
    ]);
    assert.equal(published.code, 0, published.stderr);
    assert.doesNotMatch(published.stderr, /Broken pipe|error/i);
    await waitFor(
      "the stream to end",
      async () => (await findStreams(server, "short")).length === 0 ? true : undefined,
    );
  } finally {
    await server.stop();
    await Deno.remove(clip);
  }
});

Deno.test("FCUnpublish is answered (onFCUnpublish, NetStream.Unpublish.Success) and the connection stays the client's to close", async () => {
  const server = await startTestServer();
  const url = parseRtmpUrl(`rtmp://127.0.0.1:${server.rtmpPort}/live/unpub`, "uri");
  const client = await openRtmpClient(url, "publish");
  try {
    await client.conn.send(ChunkStreamId.command, {
      type: MessageType.commandAmf0,
      streamId: 0,
      timestamp: 0,
      payload: buildCommand("FCUnpublish", 5, null, "unpub"),
    });
    const answers: string[] = [];
    for await (const message of client.messages) {
      if (message.type !== MessageType.commandAmf0) continue;
      const [name, , , info] = decodeAmf0All(message.payload);
      answers.push(`${name} ${(info as { code?: string } | null)?.code}`);
      if (name === "onFCUnpublish") break;
    }
    assert.deepEqual(answers, [
      "onStatus NetStream.Unpublish.Success",
      "onFCUnpublish NetStream.Unpublish.Success",
    ]);
    // The name is free again, while this connection stays open for its deleteStream.
    const second = await openRtmpClient(url, "publish");
    second.conn.close();
    await new Promise((r) => setTimeout(r, 300));
    assert.equal(client.conn.closed, false);
    await client.conn.send(ChunkStreamId.command, {
      type: MessageType.commandAmf0,
      streamId: client.streamId,
      timestamp: 0,
      payload: buildCommand("deleteStream", 6, null, client.streamId),
    });
  } finally {
    client.conn.close();
    await server.stop();
  }
});

Deno.test("GStreamer rtmp2sink publishes H.264+AAC and exits 0 at the end of its input", async () => {
  const server = await startTestServer();
  try {
    const url = `rtmp://127.0.0.1:${server.rtmpPort}/live/gst`;
    const published = await runToEnd("gst-launch-1.0", [
      ..."-e videotestsrc num-buffers=75 ! video/x-raw,width=320,height=240,framerate=25/1".split(
        " ",
      ),
      ..."! x264enc tune=zerolatency key-int-max=25 ! h264parse ! queue ! mux.".split(" "),
      ..."audiotestsrc num-buffers=100 ! audioconvert ! avenc_aac ! aacparse ! queue ! mux.".split(
        " ",
      ),
      ..."flvmux name=mux streamable=true ! rtmp2sink".split(" "),
      `location=${url}`,
    ]);
    assert.equal(published.code, 0, published.stderr);
    await waitFor(
      "the stream to end",
      async () => (await findStreams(server, "gst")).length === 0 ? true : undefined,
    );
  } finally {
    await server.stop();
  }
});

Deno.test("publish or play before connect is answered with an error status, then the connection closes", async () => {
  const server = await startTestServer();
  try {
    for (const [command, code] of [["publish", "Publish"], ["play", "Play"]]) {
      const conn = new RtmpConn(
        await Deno.connect({ hostname: "127.0.0.1", port: server.rtmpPort }),
      );
      await conn.connectHandshake();
      await conn.send(ChunkStreamId.command, {
        type: MessageType.commandAmf0,
        streamId: 1,
        timestamp: 0,
        payload: buildCommand(command, 0, null, "early", "live"),
      });
      const statuses: unknown[] = [];
      for await (const message of conn.messages()) {
        if (message.type === MessageType.commandAmf0) {
          const [name, , , info] = decodeAmf0All(message.payload);
          if (name === "onStatus") statuses.push(info);
        }
      }
      assert.ok(conn.closed);
      assert.deepEqual(statuses, [{
        level: "error",
        code: `NetStream.${code}.Failed`,
        description: `${command} before connect`,
      }]);
    }
    assert.deepEqual(await findStreams(server, "early"), []);
  } finally {
    await server.stop();
  }
});

Deno.test("MP3 from an RTMP publisher plays as H.264 + AAC, audio from the first second", async () => {
  const server = await startTestServer();
  const url = `rtmp://127.0.0.1:${server.rtmpPort}/live/mp3`;
  const publisher = new Deno.Command("ffmpeg", {
    args: [
      ...["-hide_banner", "-nostdin", "-loglevel", "error", "-re"],
      ...["-f", "lavfi", "-i", "testsrc2=size=320x240:rate=25"],
      ...["-f", "lavfi", "-i", "sine=frequency=440:sample_rate=44100"],
      ...["-t", "20", "-c:v", "libx264", "-preset", "ultrafast", "-g", "25", "-threads", "1"],
      ...["-c:a", "libmp3lame", "-b:a", "64k", "-ar", "44100", "-f", "flv", url],
    ],
    stdin: "null",
    stdout: "null",
    stderr: "null",
  }).spawn();
  const copy = await Deno.makeTempFile({ suffix: ".flv" });
  try {
    const record = await waitFor("the stream", async () => (await findStreams(server, "mp3"))[0]);
    assert.equal(record.videoCodec, "H264");
    assert.equal(record.audioCodec, "AAC");
    await run("ffmpeg", [
      ...["-v", "error", "-y", "-rw_timeout", "10000000", "-i", url],
      ...["-t", "3", "-c", "copy", copy],
    ]);
    const { out } = await run("ffprobe", [
      ...["-v", "error", "-show_entries", "stream=codec_name:packet=codec_type,pts_time"],
      ...["-of", "json", copy],
    ]);
    const probed = JSON.parse(out) as {
      streams: { codec_name: string }[];
      packets: { codec_type: string; pts_time: string }[];
    };
    assert.deepEqual(probed.streams.map((s) => s.codec_name).sort(), ["aac", "h264"]);
    const first = (type: string) =>
      Number(probed.packets.find((p) => p.codec_type === type)?.pts_time ?? Infinity);
    const audioPackets = probed.packets.filter((p) => p.codec_type === "audio").length;
    assert.ok(first("audio") - first("video") < 1, `first audio at ${first("audio")} s`);
    // 48 kHz AAC: ~47 frames a second; 3 s copied.
    assert.ok(audioPackets >= 100, `${audioPackets} audio packets in 3 s`);
  } finally {
    try {
      publisher.kill("SIGKILL");
    } catch {
      // Exited already.
    }
    await publisher.status;
    await server.stop();
    await Deno.remove(copy);
  }
});

Deno.test("Speex and Nellymoser publishers get NetStream.Publish.Failed naming the codec, and it is logged", async () => {
  const { server, lines } = await loggedServer();
  try {
    for (const [encoder, codec] of [["libspeex", "Speex"], ["nellymoser", "Nellymoser"]]) {
      const url = `rtmp://127.0.0.1:${server.rtmpPort}/live/${encoder}`;
      const published = await runToEnd("ffmpeg", [
        ...["-hide_banner", "-nostdin", "-re"],
        ...["-f", "lavfi", "-i", "testsrc2=size=320x240:rate=25"],
        ...["-f", "lavfi", "-i", "sine=frequency=440:sample_rate=16000"],
        ...["-t", "10", "-c:v", "libx264", "-preset", "ultrafast", "-threads", "1"],
        ...["-c:a", encoder, "-ar", encoder === "libspeex" ? "16000" : "22050", "-ac", "1"],
        ...["-f", "flv", url],
      ]);
      assert.notEqual(published.code, 0);
      assert.match(published.stderr, new RegExp(`audio codec ${codec} is not supported`));
      assert.ok(
        lines.some((l) =>
          l.includes("rtmp publish refused") && l.includes(`audio codec ${codec} is not supported`)
        ),
        `no log line names ${codec}`,
      );
      assert.deepEqual(await findStreams(server, encoder), []);
    }
  } finally {
    await server.stop();
  }
});
