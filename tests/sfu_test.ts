/**
 * The SFU SDK's protocol (appKey sfuApp) with werift participants speaking the SDK's messages:
 * join (JOINED, then the answer with the join's tid), each participant receiving the others'
 * tracks (ADD_TRACKS with mids in its own peer, server offers, RTP arriving on those mids),
 * tracks added after joining (updateRoomState), chat on the control channel, refusals
 * (wrong pin, duplicate nickname, malformed SDP) that leave the room as it was, a dropped
 * connection (REMOVE_TRACKS and LEFT to the others), leave, evict, destroy and /sfu/stats.
 */
import assert from "node:assert/strict";
import { RtcpReceiverInfo, RtcpRrPacket } from "werift";
import { openPeerCount } from "../media/protocols/webrtc/peer.ts";
import { SfuClient, type SfuEvent, withSfuServer } from "./helpers/sfu_client.ts";
import { startTestServer, testConfig, type TestServer } from "./helpers/test_server.ts";
import { sdkConnectionObject, WcsClient } from "./helpers/wcs_client.ts";
import {
  startPlaying,
  startPublishing,
  TestPlayer,
  TestPublisher,
  weriftSanitizers,
} from "./webrtc_helpers.ts";
import { waitFor } from "./helpers/media_fixtures.ts";
import { H264Receiver } from "./helpers/h264_check.ts";
import {
  joinAsSimulcastPublisher,
  makeLayerClips,
  type SimulcastPublisher,
  threeLayerShapes,
} from "./helpers/simulcast_publisher.ts";

type Stats = {
  roomName: string;
  participants: {
    nickName: string;
    outgoingTracks: Record<string, unknown>[];
    incomingTracks: Record<string, string | null>;
  }[];
};

async function stats(server: TestServer, roomName: string): Promise<Stats> {
  const res = await server.post("/sfu/stats", { roomName });
  assert.equal(res.status, 200, await res.clone().text());
  return await res.json();
}

type TrackInfo = { id: string; type: string; contentType: string; mid: string; mute: boolean };

/** The tracks of `publisher` announced to `client` by ADD_TRACKS. */
async function announced(client: SfuClient, publisher: string, count = 2): Promise<TrackInfo[]> {
  let tracks: TrackInfo[] = [];
  await client.until(() => {
    tracks = client.events.filter((e) =>
      e.type === "ADD_TRACKS" && (e.info as { nickName: string }).nickName === publisher
    ).flatMap((e) => (e.info as { info: TrackInfo[] }).info);
    return tracks.length >= count;
  }, `${client.nickname} told of ${publisher}'s tracks`);
  return tracks;
}

/** Waits until RTP arrived on every mid of `tracks` at `client`. */
async function receives(client: SfuClient, tracks: TrackInfo[]): Promise<void> {
  await client.until(
    () => tracks.every((t) => (client.received.get(t.mid) ?? 0) >= 10),
    `${client.nickname} receiving RTP on ${tracks.map((t) => t.mid).join(",")}`,
  );
}

function failure(event: SfuEvent): { operation: unknown; error: unknown } {
  assert.equal(event.type, "OPERATION_FAILED");
  return { operation: event.operation, error: event.error };
}

Deno.test({
  name: "connection objects with null optional fields are accepted, Web SDK and SFU SDK alike",
  fn: async () => {
    const server = await startTestServer();
    try {
      const { client, userData } = await WcsClient.connect(server.wsUrl, {
        appKey: "defaultApp",
        mediaProviders: null,
        keepAlive: null,
        authToken: null,
        clientVersion: null,
        custom: null,
        sipLogin: null,
        width: null,
      });
      assert.equal(userData.appKey, "defaultApp");
      assert.equal(typeof userData.authToken, "string");
      await client.close();
      const sfu = await SfuClient.connect(server.wsUrl, "alice", "room-null");
      await sfu.close();
    } finally {
      await server.stop();
    }
  },
});

Deno.test({
  name: "SFU room: join, tracks delivered both ways with RTP, refusals, chat, drop, leave, stats",
  ...weriftSanitizers,
  fn: async () => {
    await withSfuServer(async (server, clients) => {
      const connect = async (nickname: string) => {
        const client = await SfuClient.connect(server.wsUrl, nickname, "room1");
        clients.push(client);
        return client;
      };
      // Alice creates the room with its pin.
      const alice = await connect("alice");
      alice.addMedia();
      const joinId = await alice.sendJoin("room1", "1234");
      const joined = await alice.result(joinId, "JOINED");
      assert.equal(joined.roomId, "room1");
      assert.equal(joined.name, "alice");
      assert.equal(joined.owner, true);
      assert.equal(typeof joined.userId, "string");
      const answer = await alice.waitFor((e) => e.type === "REMOTE_SDP");
      assert.equal((answer.info as { type: string }).type, "answer");
      const role = await alice.waitFor((e) => e.type === "ROLE_ASSIGNED");
      assert.equal(role.role, "OWNER");
      await alice.until(() => alice.pc.connectionState === "connected", "alice connected");

      // Bob joins: each gets the other's camera and mic, announced then offered.
      const bob = await connect("bob");
      bob.addMedia();
      const bobJoined = await bob.join("room1", "1234");
      assert.equal(bobJoined.owner, false);
      const fromAlice = await announced(bob, "alice");
      assert.deepEqual(fromAlice.map((t) => [t.type, t.contentType]).sort(), [
        ["AUDIO", "mic"],
        ["VIDEO", "camera"],
      ]);
      const fromBob = await announced(alice, "bob");
      const otherJoined = await alice.waitFor((e) => e.type === "JOINED" && e.name === "bob");
      assert.equal(otherJoined.userId, bobJoined.userId);
      await receives(bob, fromAlice);
      await receives(alice, fromBob);
      // The delivered tracks go out through the send engine (this server runs it on the ICE
      // mux): each of the four has a path there, and the Workers sent its packets.
      assert.equal(server.services.sendPaths.size, 4, "2 participants x 2 delivered tracks");
      await waitFor("the engine's Workers sending every delivered track", async () => {
        const sent = [...(await server.services.sendPaths.engine!.stats()).values()];
        return sent.length === 4 && sent.every((s) => s.sent > 0) ? true : undefined;
      });
      const offer = await alice.waitFor((e) =>
        e.type === "REMOTE_SDP" && (e.info as { type: string }).type === "offer"
      );
      assert.ok((offer.info as { tid: string }).tid);

      // Stats: measured from the RTP (640x480 at 25 fps from the parameter sets sent).
      const measured = await waitFor("measured stats", async () => {
        const s = await stats(server, "room1");
        const video = s.participants.find((p) => p.nickName === "alice")?.outgoingTracks
          .find((t) => t.type === "VIDEO");
        // The first window may be partial; the sender runs at 25 fps.
        return video && (video.fps as number) >= 20 ? s : undefined;
      });
      assert.equal(measured.roomName, "room1");
      assert.deepEqual(measured.participants.map((p) => p.nickName), ["alice", "bob"]);
      const aliceStats = measured.participants[0];
      const video = aliceStats.outgoingTracks.find((t) => t.type === "VIDEO")!;
      const audio = aliceStats.outgoingTracks.find((t) => t.type === "AUDIO")!;
      assert.equal(video.codec, "H264");
      assert.equal(video.width, 640);
      assert.equal(video.height, 480);
      assert.ok((video.fps as number) <= 30, `fps ${video.fps}`);
      assert.ok((video.bitrate as number) > 0);
      assert.equal(video.alive, true);
      assert.equal(audio.codec, "OPUS");
      assert.equal(audio.sampleRate, 48000);
      assert.ok((audio.bitrate as number) > 0);
      assert.deepEqual(
        Object.keys(aliceStats.incomingTracks).sort(),
        fromBob.map((t) => t.id).sort(),
      );
      assert.ok(Object.values(aliceStats.incomingTracks).every((layer) => layer === null));
      assert.equal((await server.post("/sfu/stats", { roomName: "nope" })).status, 404);

      // Refusals: OPERATION_FAILED with WCS's strings, the room unchanged.
      const intruder = await connect("carol");
      const wrongPin = await intruder.sendJoin("room1", "0000");
      assert.deepEqual(failure(await intruder.waitFor((e) => e.internalMessageId === wrongPin)), {
        operation: "ROOM_JOIN",
        error: "Wrong pin",
      });
      const twin = await connect("bob");
      const duplicate = await twin.sendJoin("room1", "1234");
      assert.deepEqual(failure(await twin.waitFor((e) => e.internalMessageId === duplicate)), {
        operation: "ROOM_JOIN",
        error: "Nickname unavailable",
      });
      const garbled = await intruder.sendJoin("room1", "1234", "v=0\r\nthis is no SDP");
      const bad = failure(await intruder.waitFor((e) => e.internalMessageId === garbled));
      assert.equal(bad.operation, "ROOM_JOIN");
      assert.match(String(bad.error), /m-line/);
      assert.deepEqual(
        (await stats(server, "room1")).participants.map((p) => p.nickName),
        ["alice", "bob"],
      );

      // Chat over the control channel: relayed to the others, ACKed to the sender.
      await alice.until(() => alice.control.readyState === "open", "alice's control channel");
      const messageId = crypto.randomUUID();
      alice.control.send(JSON.stringify({ id: messageId, payload: "hello room" }));
      await bob.until(() => bob.chat.some((m) => m.type === "MESSAGE"), "bob gets the chat");
      const chat = bob.chat.find((m) => m.type === "MESSAGE") as {
        message: { nickName: string; message: string };
      };
      assert.equal(chat.message.nickName, "alice");
      assert.equal(JSON.parse(chat.message.message).payload, "hello room");
      await alice.until(
        () => alice.chat.some((m) => m.type === "ACK" && m.internalMessageId === messageId),
        "alice's chat ACKed",
      );

      // Dave joins without media and adds it later (updateRoomState).
      // (A werift client, unlike Chrome, would take a server offer's m-lines onto the
      // transceivers of a crossing offer of its own; the Chromium e2e covers that glare.)
      const dave = await connect("dave");
      await dave.join("room1", "1234");
      await receives(dave, await announced(dave, "bob"));
      dave.addMedia();
      await dave.result(await dave.updateState(), "ACK");
      const fromDave = await announced(alice, "dave");
      await receives(alice, fromDave);

      // Dave's connection drops: the others get REMOVE_TRACKS for his tracks and LEFT.
      await dave.close();
      const removed = await bob.waitFor((e) =>
        e.type === "REMOVE_TRACKS" && (e.info as { nickName: string }).nickName === "dave"
      );
      assert.equal((removed.info as { info: unknown[] }).info.length, 2);
      await alice.waitFor((e) => e.type === "LEFT" && e.name === "dave");
      assert.deepEqual(
        (await stats(server, "room1")).participants.map((p) => p.nickName),
        ["alice", "bob"],
      );

      // Bob leaves: LEFT answers him, alice gets his tracks removed.
      const leaveId = bob.request("leaveRoom", { id: "room1", pin: "1234" });
      await bob.result(leaveId, "LEFT");
      const bobRemoved = await alice.waitFor((e) =>
        e.type === "REMOVE_TRACKS" && (e.info as { nickName: string }).nickName === "bob"
      );
      assert.deepEqual(
        (bobRemoved.info as { info: TrackInfo[] }).info.map((t) => t.mid).sort(),
        fromBob.map((t) => t.mid).sort(),
      );

      // Carol joins properly and is evicted by the owner; then the owner destroys the room.
      await intruder.join("room1", "1234");
      const evictId = alice.request("evictParticipant", {
        id: "room1",
        userId: (await intruder.waitFor((e) => e.type === "JOINED")).userId,
      });
      await alice.result(evictId, "ACK");
      await intruder.waitFor((e) => e.type === "EVICTED");
      const destroyId = alice.request("destroyRoom", { id: "room1", pin: "1234" });
      await alice.result(destroyId, "ACK");
      await alice.waitFor((e) => e.type === "ENDED");
      assert.equal((await server.post("/sfu/stats", { roomName: "room1" })).status, 404);
      assert.equal(server.services.sendPaths.size, 0, "every delivered track off the engine");
      assert.equal(server.services.sendPaths.engine!.groupCount, 0);
    });
  },
});

Deno.test({
  name: "Web SDK (defaultApp) and SFU SDK on one server: a stream and a room side by side",
  ...weriftSanitizers,
  fn: async () => {
    const server = await startTestServer();
    const clients: SfuClient[] = [];
    const publisher = new TestPublisher("H264");
    const player = new TestPlayer("H264");
    const webSdk: WcsClient[] = [];
    try {
      // A Web SDK publish and play of "cam".
      const { client: pubClient } = await WcsClient.connect(server.wsUrl, sdkConnectionObject());
      webSdk.push(pubClient);
      await startPublishing(publisher, pubClient, { name: "cam" });
      // The SFU room next to it.
      for (const nickname of ["alice", "bob"]) {
        const client = await SfuClient.connect(server.wsUrl, nickname, "side");
        clients.push(client);
        client.addMedia();
        await client.join("side", "1");
      }
      const [alice, bob] = clients;
      await receives(bob, await announced(bob, "alice"));
      await receives(alice, await announced(alice, "bob"));
      const { client: playClient } = await WcsClient.connect(server.wsUrl, sdkConnectionObject());
      webSdk.push(playClient);
      await startPlaying(player, playClient, { name: "cam" });
      await waitFor(
        "the Web SDK player's media",
        () => player.received.video > 20 && player.received.audio > 20 ? true : undefined,
      );
      // SFU requests of a Web SDK session are refused; its streams are not the room's.
      const refusedId = crypto.randomUUID();
      playClient.send("joinRoom", {
        id: "side",
        pin: "1",
        sdp: "v=0",
        nickname: "eve",
        internalMessageId: refusedId,
      });
      const [refused] = await playClient.next("sfuCallback") as [SfuEvent];
      assert.deepEqual(failure(refused), {
        operation: "ROOM_JOIN",
        error: "not an sfuApp session",
      });
      assert.deepEqual(
        (await stats(server, "side")).participants.map((p) => p.nickName),
        ["alice", "bob"],
      );
      const streams = await (await server.post("/stream/find_all")).json() as { name: string }[];
      assert.deepEqual(streams.map((s) => s.name).filter((n) => n === "cam"), ["cam", "cam"]);
      // The room ending leaves the Web SDK stream playing.
      await alice.result(alice.request("destroyRoom", { id: "side", pin: "1" }), "ACK");
      const before = player.received.video;
      await waitFor(
        "video after the room ended",
        () => player.received.video > before + 20 ? true : undefined,
      );
    } finally {
      await Promise.allSettled(clients.map((c) => c.close()));
      await publisher.close();
      await player.close();
      await Promise.allSettled(webSdk.map((c) => c.close()));
      await server.stop();
    }
    await waitFor("every server peer closed", () => openPeerCount() === 0 ? true : undefined);
  },
});

Deno.test({
  name: "SFU glare: a client offer crossing the server's offer is resolved as the SDK expects",
  ...weriftSanitizers,
  fn: async () => {
    await withSfuServer(async (server, clients) => {
      const alice = await SfuClient.connect(server.wsUrl, "alice", "glare");
      const bob = await SfuClient.connect(server.wsUrl, "bob", "glare");
      clients.push(alice, bob);
      alice.addMedia();
      await alice.join("glare", "1");
      bob.addMedia();
      bob.holdOffers = true;
      await bob.join("glare", "1");
      await bob.until(() => bob.pc.signalingState === "stable", "bob's join answered");
      // The server's offer of alice's tracks has come (held); bob offers too: glare.
      await bob.waitFor((e) =>
        e.type === "REMOTE_SDP" && (e.info as { type: string }).type === "offer"
      );
      const updateId = await bob.updateState();
      await bob.result(updateId, "ACK");
      bob.releaseOffers();
      await receives(bob, await announced(bob, "alice"));
      await receives(alice, await announced(alice, "bob"));
      assert.equal(bob.glares, 1);
      await bob.until(() => bob.pc.signalingState === "stable", "bob's re-offer answered");

      // muteTrack: MUTE_TRACKS to the others, and the track is not forwarded while muted.
      const aliceVideo = (await announced(bob, "alice")).find((t) => t.type === "VIDEO")!;
      const muteId = alice.request("muteTrack", { roomId: "glare", id: aliceVideo.id, mute: true });
      await alice.result(muteId, "ACK");
      const muted = await bob.waitFor((e) => e.type === "MUTE_TRACKS");
      const mutedInfo = (muted.info as { info: TrackInfo[] }).info[0];
      assert.deepEqual([mutedInfo.id, mutedInfo.mid, mutedInfo.mute], [
        aliceVideo.id,
        aliceVideo.mid,
        true,
      ]);
      await new Promise((r) => setTimeout(r, 300));
      const frozen = bob.received.get(aliceVideo.mid)!;
      await new Promise((r) => setTimeout(r, 500));
      assert.equal(bob.received.get(aliceVideo.mid), frozen, "a muted track is not forwarded");
      await alice.result(
        alice.request("muteTrack", { roomId: "glare", id: aliceVideo.id, mute: false }),
        "ACK",
      );
      await bob.until(
        () => bob.received.get(aliceVideo.mid)! > frozen + 10,
        "alice's video after unmute",
      );
      const unknown = alice.request("muteTrack", { roomId: "glare", id: "nope", mute: true });
      assert.deepEqual(failure(await alice.waitFor((e) => e.internalMessageId === unknown)), {
        operation: "MUTE_TRACKS",
        error: "Track not found",
      });
    });
  },
});

Deno.test({
  name: "SFU: a participant whose network goes silent leaves within the ping timeout",
  ...weriftSanitizers,
  fn: async () => {
    const keepAlive = { intervalMs: 200, probes: 3 };
    await withSfuServer(async (server, clients) => {
      const alice = await SfuClient.connect(server.wsUrl, "alice", "silent");
      const mallory = await SfuClient.connect(server.wsUrl, "mallory", "silent", {
        autoPong: false,
      });
      clients.push(alice, mallory);
      alice.addMedia();
      mallory.addMedia();
      await alice.join("silent", "1");
      await mallory.join("silent", "1");
      // Told of Mallory's tracks (waiting for their RTP too raced the timeout on a loaded machine).
      await announced(alice, "mallory");
      const startMs = Date.now();
      // Mallory answers no ping from the start: the server ends its session within
      // probes × intervalMs of its connection, and the room removes it.
      const removed = await alice.waitFor((e) =>
        e.type === "REMOVE_TRACKS" && (e.info as { nickName: string }).nickName === "mallory"
      );
      assert.equal((removed.info as { info: unknown[] }).info.length, 2);
      await alice.waitFor((e) => e.type === "LEFT" && e.name === "mallory");
      const timeoutMs = keepAlive.intervalMs * (keepAlive.probes + 1);
      assert.ok(Date.now() - startMs <= timeoutMs + 1000, `left after ${Date.now() - startMs} ms`);
      assert.deepEqual(
        (await stats(server, "silent")).participants.map((p) => p.nickName),
        ["alice"],
      );
    }, testConfig({ keepAlive }));
  },
});

Deno.test({
  name: "SFU simulcast: changeQuality switches the layer a subscriber decodes; stats show it",
  ...weriftSanitizers,
  fn: async () => {
    const rids = Object.keys(threeLayerShapes);
    const clips = await makeLayerClips(threeLayerShapes, 3);
    const server = await startTestServer();
    const clients: SfuClient[] = [];
    let publishing: SimulcastPublisher | undefined;
    const dir = await Deno.makeTempDir({ prefix: "sfu-simulcast-" });
    try {
      const pub = await SfuClient.connect(server.wsUrl, "pub", "sim", { simulcast: true });
      const sub = await SfuClient.connect(server.wsUrl, "sub", "sim");
      clients.push(pub, sub);
      publishing = await joinAsSimulcastPublisher(pub, "sim", clips);

      // What the subscriber decodes: the picture size of each keyframe, and the stream.
      const received = new H264Receiver(sub.pc);
      const { meter, ssrcs } = received;
      // The subscriber publishes too: the server's offers to the publisher must keep its layers.
      sub.addMedia();
      await sub.join("sim", "1");
      const [video] = await announced(sub, "pub", 1);
      const reOffer = await pub.waitFor((e) =>
        e.type === "REMOTE_SDP" && (e.info as { type: string }).type === "offer"
      );
      assert.match((reOffer.info as { sdp: string }).sdp, /a=simulcast:recv h;m;l/);
      assert.deepEqual((video as TrackInfo & { quality: string[] }).quality, rids);
      const qualityState = await sub.waitFor((e) => e.type === "TRACK_QUALITY_STATE");
      const told = (qualityState.info as { tracks: { mid: string; quality: unknown[] }[] }).tracks;
      assert.equal(told[0].mid, video.mid);
      assert.equal(told[0].quality.length, 3);

      const layerOf = async () =>
        (await stats(server, "sim")).participants
          .find((p) => p.nickName === "sub")?.incomingTracks[video.id];
      // The subscriber starts at the top layer.
      await sub.until(() => meter.width === 640, "the subscriber decoding 640x360");
      assert.equal(await layerOf(), "h send");
      const s = await stats(server, "sim");
      const composite = s.participants.find((p) => p.nickName === "pub")!.outgoingTracks[0] as {
        composite: boolean;
        tracks: Record<string, { width: number; alive: boolean }>;
      };
      assert.equal(composite.composite, true);
      assert.deepEqual(
        Object.entries(composite.tracks).map(([name, t]) => [name, t.width, t.alive]),
        [["l send", 160, true], ["m send", 320, true], ["h send", 640, true]],
      );

      const change = async (quality: string, width: number) => {
        const startMs = performance.now();
        const id = sub.request("changeQuality", { roomId: "sim", id: video.id, quality });
        await sub.result(id, "ACK");
        await sub.until(() => meter.width === width, `decoding width ${width}`, 5000);
        const switchMs = Math.round(performance.now() - startMs);
        assert.equal(await layerOf(), `${quality} send`);
        return switchMs;
      };
      const downMs = await change("l", 160);
      // Up again, once the top layer counts as warm for this subscriber.
      await new Promise((r) => setTimeout(r, 2000));
      const upMs = await change("h", 640);
      console.log(`changeQuality l: ${downMs} ms, back to h: ${upMs} ms (GOP 1 s)`);
      assert.ok(downMs <= 2000 && upMs <= 2000, `${downMs} ms, ${upMs} ms`);
      // changeSid names the layer by index (1: "m") and the track by its mid here.
      const sid = sub.request("changeSid", { roomId: "sim", id: video.mid, sid: 1 });
      await sub.result(sid, "ACK");
      await sub.until(() => meter.width === 320, "decoding width 320", 5000);
      assert.equal(await layerOf(), "m send");
      // muteRemoteTrack stops this subscriber's video; unmuting resumes it.
      const muted = sub.request("muteRemoteTrack", { roomId: "sim", id: video.mid, mute: true });
      await sub.result(muted, "ACK");
      await new Promise((r) => setTimeout(r, 200));
      const packetsMuted = meter.packets;
      await new Promise((r) => setTimeout(r, 500));
      assert.equal(meter.packets, packetsMuted, "nothing forwarded while muted");
      const unmuted = sub.request("muteRemoteTrack", { roomId: "sim", id: video.mid, mute: false });
      await sub.result(unmuted, "ACK");
      await sub.until(() => meter.packets > packetsMuted + 20, "forwarding again", 5000);
      // A receiver report with heavy loss lowers the layer one step, under the cap.
      const report = new RtcpRrPacket({
        ssrc: 1,
        reports: [
          new RtcpReceiverInfo({
            ssrc: [...ssrcs][0],
            fractionLost: 64,
            packetsLost: 0,
            highestSequence: 0,
            jitter: 0,
            lsr: 0,
            dlsr: 0,
          }),
        ],
      });
      await sub.pc.dtlsTransports[0].sendRtcp([report]);
      await sub.until(() => meter.width === 160, "lowered to 160 by loss", 5000);
      assert.equal(await layerOf(), "l send");
      // A quality the track does not have is refused, the layer kept.
      const bad = sub.request("changeQuality", { roomId: "sim", id: video.id, quality: "x" });
      assert.deepEqual(failure(await sub.waitFor((e) => e.internalMessageId === bad)), {
        operation: "CHANGE_QUALITY",
        error: "Quality not found",
      });
      await new Promise((r) => setTimeout(r, 500));
      publishing.stop();

      // One SSRC, and the whole stream decodes without an error at 640, 160, then 640 again.
      assert.equal(ssrcs.size, 1);
      const { errors, sizes } = await received.decode(`${dir}/received.h264`);
      assert.equal(errors, "", "decoder errors");
      const runs = sizes.filter((size, i) => size !== sizes[i - 1]);
      assert.deepEqual(runs, ["640,360", "160,90", "640,360", "320,180", "160,90"]);
    } finally {
      publishing?.stop();
      await Promise.allSettled(clients.map((c) => c.close()));
      await server.stop();
      await Deno.remove(dir, { recursive: true });
    }
    await waitFor("every server peer closed", () => openPeerCount() === 0 ? true : undefined);
  },
});

Deno.test({
  name: "SFU leaseTrack: a recvonly transceiver of the client receives the track it leases",
  ...weriftSanitizers,
  fn: async () => {
    await withSfuServer(async (server, clients) => {
      const alice = await SfuClient.connect(server.wsUrl, "alice", "lease");
      const bob = await SfuClient.connect(server.wsUrl, "bob", "lease");
      clients.push(alice, bob);
      alice.addMedia();
      await alice.join("lease", "1");
      // The SDK's join with predefinedTracksCount: vacant recvonly video transceivers.
      const slot = bob.pc.addTransceiver("video", { direction: "recvonly" });
      await bob.join("lease", "1");
      const [video] = (await announced(bob, "alice")).filter((t) => t.type === "VIDEO");
      await bob.until(() => bob.pc.connectionState === "connected", "bob connected");
      const mid = slot.mid!;
      assert.equal(bob.received.get(mid) ?? 0, 0, "a vacant slot receives nothing");

      const lease = (remoteTrackId: string | null, localMid = mid) =>
        bob.request("leaseTrack", { roomId: "lease", remoteTrackId, localMid });
      await bob.result(lease(video.id), "ACK");
      await bob.until(() => (bob.received.get(mid) ?? 0) >= 10, "RTP in the leased slot");
      const incoming = (await stats(server, "lease")).participants[1].incomingTracks;
      assert.equal(incoming[video.id], null);

      // Released: the slot falls silent.
      await bob.result(lease(null), "ACK");
      await new Promise((r) => setTimeout(r, 200));
      const released = bob.received.get(mid)!;
      await new Promise((r) => setTimeout(r, 400));
      assert.equal(bob.received.get(mid), released, "nothing after the release");

      // An unknown track, a slot that is not one, and audio into a video slot are refused.
      const refusals = [lease("no-such-track"), lease(video.id, "99")];
      const audio = (await announced(bob, "alice")).find((t) => t.type === "AUDIO")!;
      refusals.push(lease(audio.id));
      const errors = [];
      for (const id of refusals) {
        errors.push(failure(await bob.waitFor((e) => e.internalMessageId === id)));
      }
      assert.deepEqual(errors, [
        { operation: "LEASE_TRACK", error: "Track not found" },
        { operation: "LEASE_TRACK", error: "No free transceiver for the track" },
        { operation: "LEASE_TRACK", error: "No free transceiver for the track" },
      ]);
    });
  },
});
