/**
 * The SFU bridge (config `sfu.bridge`, WCS's `sfu_bridge_enabled`): with it on, each
 * participant's tracks are also streams `{room}-{nickname}-VIDEO` / `-AUDIO`, listed by
 * /stream/find_all; a Web SDK player (werift) of a simulcast participant's video decodes its
 * top layer and a recording of it is an MP4 that decodes; a stream ends when its participant
 * leaves (the player is told) or stops the track. A rename moves the streams to the new
 * nickname's names (the old name's player is told it ended; the old name is free for the next
 * participant). A VP8 simulcast participant's video stream plays and records as VP8 that
 * decodes. Off, nothing is listed.
 */
import assert from "node:assert/strict";
import { openPeerCount } from "../media/protocols/webrtc/peer.ts";
import { H264Receiver } from "./helpers/h264_check.ts";
import { decode } from "../media/formats/test_fixtures.ts";
import { ivfOf } from "../media/formats/ivf.ts";
import { Vp8Depacketizer } from "../media/protocols/webrtc/vp8_depacketizer.ts";
import { run } from "../media/formats/test_fixtures.ts";
import { probe, waitFor } from "./helpers/media_fixtures.ts";
import { SfuClient, withSfuServer } from "./helpers/sfu_client.ts";
import {
  joinAsSimulcastPublisher,
  type LayerShape,
  makeLayerClips,
  makeVp8LayerClips,
  type SimulcastPublisher,
} from "./helpers/simulcast_publisher.ts";
import { startTestServer, testConfig, type TestServer } from "./helpers/test_server.ts";
import { sdkConnectionObject, WcsClient } from "./helpers/wcs_client.ts";
import { nextStatus, startPlaying, TestPlayer, weriftSanitizers } from "./webrtc_helpers.ts";

type StreamRecord = {
  name: string;
  mediaSessionId: string;
  mediaProvider: string;
  width: number;
  status: string;
};

async function post(server: TestServer, path: string, body: unknown): Promise<void> {
  const res = await server.post(path, body);
  assert.equal(res.status, 200, `${path}: ${await res.text()}`);
}

/** Names of the published streams. */
async function streamNames(server: TestServer): Promise<string[]> {
  const res = await server.post("/stream/find_all");
  if (res.status === 404) {
    await res.body?.cancel();
    return [];
  }
  assert.equal(res.status, 200);
  // Published streams only: find_all lists each player's session under the name too.
  return ((await res.json()) as StreamRecord[]).filter((s) => s.status === "PUBLISHING")
    .map((s) => s.name).sort();
}

/** Starts a recording of the stream `name`, waits `ms` and returns the MP4 once it closed. */
async function record(server: TestServer, records: string, name: string, ms: number) {
  const found = await (await server.post("/stream/find", { name })).json() as StreamRecord[];
  const { mediaSessionId } = found.find((r) => r.status === "PUBLISHING")!;
  await post(server, "/stream/startRecording", { mediaSessionId });
  await new Promise((r) => setTimeout(r, ms));
  await post(server, "/stream/stopRecording", { mediaSessionId });
  return await waitFor("the recording closed", async () => {
    const list = await (await server.post("/recorder/find_all")).json() as unknown[];
    if (list.length > 0) return undefined;
    const files = [];
    for await (const f of Deno.readDir(records)) files.push(f.name);
    return files.length === 1 ? `${records}/${files[0]}` : undefined;
  });
}

/** The VP8 frames a werift player receives, depacketized, for an IVF file ffmpeg decodes. */
class Vp8Receiver {
  readonly frames: Uint8Array[] = [];
  readonly #depacketizer = new Vp8Depacketizer(0);

  constructor(player: TestPlayer) {
    player.pc.onTrack.subscribe((track) => {
      if (track.kind !== "video") return;
      track.onReceiveRtp.subscribe((p) => {
        const { ssrc, sequenceNumber, timestamp, marker, payloadType } = p.header;
        this.#depacketizer.push(
          { ssrc, sequenceNumber, timestamp, marker, payloadType, payload: p.payload },
          (frame) => this.frames.push(frame.data.slice()),
        );
      });
    });
  }

  /** Decodes what was received: ffmpeg's errors ("" if none) and each frame's size. */
  async decode(file: string): Promise<{ errors: string; sizes: string[] }> {
    await Deno.writeFile(file, ivfOf(this.frames, 640, 360));
    const decoded = await run("ffmpeg", ["-v", "error", "-i", file, "-f", "null", "-"]);
    const sizes = (await run("ffprobe", [
      ...["-v", "error", "-select_streams", "v:0", "-show_entries"],
      ...["frame=width,height", "-of", "csv=p=0", file],
    ])).out.split("\n").flatMap((line) => /^\d+,\d+/.exec(line) ?? []);
    return { errors: decoded.err.trim(), sizes };
  }
}

const layers: Record<string, LayerShape> = {
  h: { width: 640, height: 360, videoKbps: 500 },
  m: { width: 320, height: 180, videoKbps: 250 },
  l: { width: 160, height: 90, videoKbps: 120 },
};

Deno.test({
  name: "SFU bridge on: participants' tracks are streams; a Web SDK player decodes the top layer",
  ...weriftSanitizers,
  fn: async () => {
    const clips = await makeLayerClips(layers, 2);
    const config = testConfig({ sfu: { bridge: true } });
    const server = await startTestServer(config);
    const clients: SfuClient[] = [];
    const player = new TestPlayer("H264");
    let webSdk: WcsClient | undefined;
    let publishing: SimulcastPublisher | undefined;
    const dir = await Deno.makeTempDir({ prefix: "sfu-bridge-" });
    try {
      // Pub sends three H.264 layers; bob a camera and a mic.
      const pub = await SfuClient.connect(server.wsUrl, "pub", "br", { simulcast: true });
      const bob = await SfuClient.connect(server.wsUrl, "bob", "br");
      clients.push(pub, bob);
      publishing = await joinAsSimulcastPublisher(pub, "br", clips);
      bob.addMedia();
      await bob.join("br", "1");
      await waitFor("the bridge streams listed", async () => {
        const names = await streamNames(server);
        return names.length === 3 ? names : undefined;
      });
      assert.deepEqual(await streamNames(server), ["br-bob-AUDIO", "br-bob-VIDEO", "br-pub-VIDEO"]);

      // A Web SDK player of pub's video gets the 640x360 layer as one decodable stream.
      const received = new H264Receiver(player.pc);
      webSdk = (await WcsClient.connect(server.wsUrl, sdkConnectionObject())).client;
      const playId = await startPlaying(player, webSdk, { name: "br-pub-VIDEO" });
      await waitFor(
        "50 frames played",
        () => received.annexB.length >= 50 ? true : undefined,
        15_000,
      );
      const { errors, sizes } = await received.decode(`${dir}/played.h264`);
      assert.equal(errors, "", "decoder errors");
      assert.ok(sizes.length >= 50, `${sizes.length} frames decoded`);
      assert.deepEqual([...new Set(sizes)], ["640,360"]);
      const records = await (await server.post("/stream/find", { name: "br-pub-VIDEO" }))
        .json() as StreamRecord[];
      const published = records.find((r) => r.status === "PUBLISHING")!;
      assert.equal(published.mediaProvider, "WebRTC");
      assert.equal(published.width, 640);

      // Recorded like any stream: an MP4 of the top layer that decodes.
      await post(server, "/stream/startRecording", { mediaSessionId: published.mediaSessionId });
      await new Promise((r) => setTimeout(r, 2000));
      await post(server, "/stream/stopRecording", { mediaSessionId: published.mediaSessionId });
      const recorded = await waitFor("the recording closed", async () => {
        const list = await (await server.post("/recorder/find_all")).json() as unknown[];
        if (list.length > 0) return undefined;
        const files = [];
        for await (const f of Deno.readDir(config.folders.records)) files.push(f.name);
        return files.length === 1 ? `${config.folders.records}/${files[0]}` : undefined;
      });
      const info = await probe(recorded);
      assert.deepEqual(
        info.streams.map((s) => [s.codec_name, s.width, s.height]),
        [["h264", 640, 360]],
      );
      assert.ok(Number(info.streams[0].nb_read_frames) >= 25, info.streams[0].nb_read_frames);
      assert.equal((await decode(recorded)).errors, "");

      // Pub leaves: its stream ends (the player is told), bob's stay.
      await pub.result(pub.request("leaveRoom", { id: "br", pin: "1" }), "LEFT");
      publishing.stop();
      const ended = await nextStatus(webSdk, playId);
      assert.notEqual(ended.status, "PLAYING");
      await waitFor("pub's stream gone", async () => {
        const names = await streamNames(server);
        return names.includes("br-pub-VIDEO") ? undefined : names;
      });
      assert.deepEqual(await streamNames(server), ["br-bob-AUDIO", "br-bob-VIDEO"]);
      // Bob stops sending his mic (updateRoomState with its m-line inactive): its stream ends.
      const mic = bob.pc.getTransceivers().find((t) => t.kind === "audio")!;
      mic.setDirection("inactive");
      await bob.result(await bob.updateState(), "ACK");
      await waitFor("bob's mic stream gone", async () => {
        const names = await streamNames(server);
        return names.includes("br-bob-AUDIO") ? undefined : names;
      });
      assert.deepEqual(await streamNames(server), ["br-bob-VIDEO"]);
      // The room ending ends the rest.
      await bob.result(bob.request("leaveRoom", { id: "br", pin: "1" }), "LEFT");
      assert.deepEqual(await streamNames(server), []);
    } finally {
      publishing?.stop();
      await player.close();
      await webSdk?.close();
      await Promise.allSettled(clients.map((c) => c.close()));
      await server.stop();
      await Deno.remove(dir, { recursive: true });
    }
    await waitFor("every server peer closed", () => openPeerCount() === 0 ? true : undefined);
  },
});

Deno.test({
  name: "SFU bridge: a rename republishes the streams under the new nickname",
  ...weriftSanitizers,
  fn: async () => {
    const clips = await makeLayerClips(layers, 2);
    const server = await startTestServer(testConfig({ sfu: { bridge: true } }));
    const clients: SfuClient[] = [];
    const oldPlayer = new TestPlayer("H264");
    const newPlayer = new TestPlayer("H264");
    let webSdk: WcsClient | undefined;
    let publishing: SimulcastPublisher | undefined;
    const dir = await Deno.makeTempDir({ prefix: "sfu-bridge-rename-" });
    try {
      const pub = await SfuClient.connect(server.wsUrl, "pub", "rn", { simulcast: true });
      clients.push(pub);
      publishing = await joinAsSimulcastPublisher(pub, "rn", clips);
      const pubId = (pub.events.find((e) => e.type === "JOINED")!).userId as string;
      await waitFor("pub's stream listed", async () => {
        const names = await streamNames(server);
        return names.length === 1 ? names : undefined;
      });
      webSdk = (await WcsClient.connect(server.wsUrl, sdkConnectionObject())).client;
      const oldPlay = await startPlaying(oldPlayer, webSdk, { name: "rn-pub-VIDEO" });

      // Pub becomes "star": the old name's player is told the stream ended, the stream is
      // listed under the new name only.
      await pub.result(
        pub.request("renameParticipant", { roomId: "rn", userId: pubId, newNickname: "star" }),
        "PARTICIPANT_RENAMED",
      );
      const ended = await nextStatus(webSdk, oldPlay);
      assert.notEqual(ended.status, "PLAYING");
      assert.deepEqual(await streamNames(server), ["rn-star-VIDEO"]);

      // The new name plays the top layer as one decodable stream.
      const received = new H264Receiver(newPlayer.pc);
      await startPlaying(newPlayer, webSdk, { name: "rn-star-VIDEO" });
      await waitFor("25 frames played", () => received.annexB.length >= 25 ? true : undefined);
      const { errors, sizes } = await received.decode(`${dir}/renamed.h264`);
      assert.equal(errors, "", "decoder errors");
      assert.deepEqual([...new Set(sizes)], ["640,360"]);

      // The old nickname is free: a participant joining under it is bridged under it.
      const next = await SfuClient.connect(server.wsUrl, "pub", "rn");
      clients.push(next);
      next.addMedia();
      await next.join("rn", "1");
      await waitFor("the newcomer's streams listed", async () => {
        const names = await streamNames(server);
        return names.length === 3 ? names : undefined;
      });
      assert.deepEqual(await streamNames(server), [
        "rn-pub-AUDIO",
        "rn-pub-VIDEO",
        "rn-star-VIDEO",
      ]);
    } finally {
      publishing?.stop();
      await oldPlayer.close();
      await newPlayer.close();
      await webSdk?.close();
      await Promise.allSettled(clients.map((c) => c.close()));
      await server.stop();
      await Deno.remove(dir, { recursive: true });
    }
    await waitFor("every server peer closed", () => openPeerCount() === 0 ? true : undefined);
  },
});

Deno.test({
  name: "SFU bridge: a VP8 simulcast participant's video plays and records as VP8 that decodes",
  ...weriftSanitizers,
  fn: async () => {
    const clips = await makeVp8LayerClips(layers, 2);
    const config = testConfig({ sfu: { bridge: true } });
    const server = await startTestServer(config);
    const clients: SfuClient[] = [];
    const player = new TestPlayer("VP8");
    let webSdk: WcsClient | undefined;
    let publishing: SimulcastPublisher | undefined;
    const dir = await Deno.makeTempDir({ prefix: "sfu-bridge-vp8-" });
    try {
      const pub = await SfuClient.connect(server.wsUrl, "pub", "v8", { simulcast: true });
      clients.push(pub);
      pub.offerVp8();
      publishing = await joinAsSimulcastPublisher(pub, "v8", clips);
      await waitFor("pub's stream listed", async () => {
        const names = await streamNames(server);
        return names.length === 1 ? names : undefined;
      });
      assert.deepEqual(await streamNames(server), ["v8-pub-VIDEO"]);

      const received = new Vp8Receiver(player);
      webSdk = (await WcsClient.connect(server.wsUrl, sdkConnectionObject())).client;
      await startPlaying(player, webSdk, { name: "v8-pub-VIDEO" });
      await waitFor("50 frames played", () => received.frames.length >= 50 ? true : undefined);
      const { errors, sizes } = await received.decode(`${dir}/played.ivf`);
      assert.equal(errors, "", "decoder errors");
      assert.ok(sizes.length >= 50, `${sizes.length} frames decoded`);
      assert.deepEqual([...new Set(sizes)], ["640,360"]);

      const recorded = await record(server, config.folders.records, "v8-pub-VIDEO", 2000);
      const info = await probe(recorded);
      assert.deepEqual(
        info.streams.map((s) => [s.codec_name, s.width, s.height]),
        [["vp8", 640, 360]],
      );
      assert.ok(Number(info.streams[0].nb_read_frames) >= 25, info.streams[0].nb_read_frames);
      assert.equal((await decode(recorded)).errors, "");
    } finally {
      publishing?.stop();
      await player.close();
      await webSdk?.close();
      await Promise.allSettled(clients.map((c) => c.close()));
      await server.stop();
      await Deno.remove(dir, { recursive: true });
    }
    await waitFor("every server peer closed", () => openPeerCount() === 0 ? true : undefined);
  },
});

Deno.test({
  name: "SFU bridge off (the default): a room's tracks are not streams",
  ...weriftSanitizers,
  fn: async () => {
    await withSfuServer(async (server, clients) => {
      for (const nickname of ["alice", "bob"]) {
        const client = await SfuClient.connect(server.wsUrl, nickname, "quiet");
        clients.push(client);
        client.addMedia();
        await client.join("quiet", "1");
      }
      const [alice, bob] = clients;
      await alice.until(() => [...alice.received.values()].some((n) => n > 10), "alice receives");
      await bob.until(() => [...bob.received.values()].some((n) => n > 10), "bob receives");
      assert.deepEqual(await streamNames(server), []);
    });
  },
});
