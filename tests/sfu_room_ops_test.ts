/**
 * SFU room operations beyond joining, with werift participants speaking the SFU SDK's messages:
 * renameParticipant (PARTICIPANT_RENAMED to everyone, uniqueness), setRoomLock (ROOM_LOCKED,
 * joins refused with "Room is locked"), the caps `sfu.maxRooms` and
 * `sfu.maxParticipantsPerRoom`, an answer whose tid is not the client's, the m-lines of tracks
 * withdrawn from a subscriber rejected and taken over by later tracks, and /sfu/stats feedback
 * counts moving with the NACKs and PLIs a subscriber sends. Refusals leave the room as it was.
 */
import assert from "node:assert/strict";
import {
  GenericNack,
  RtcpReceiverInfo,
  RtcpRrPacket,
  RtcpTransportLayerFeedback,
  type RTCRtpTransceiver,
} from "werift";
import { SfuClient, withSfuServer } from "./helpers/sfu_client.ts";
import { testConfig, type TestServer } from "./helpers/test_server.ts";
import { weriftSanitizers } from "./webrtc_helpers.ts";
import { waitFor } from "./helpers/media_fixtures.ts";

type Feedback = Record<string, number>;
type Stats = {
  roomName: string;
  participants: {
    nickName: string;
    outgoingTracks: (Record<string, unknown> & { id: string; feedbackStats?: Feedback })[];
    incomingTracks: Record<string, string | null>;
    incomingFeedbackStats: Record<string, Feedback>;
  }[];
};

async function stats(server: TestServer, roomName: string): Promise<Stats> {
  const res = await server.post("/sfu/stats", { roomName });
  assert.equal(res.status, 200, await res.clone().text());
  return await res.json();
}

async function nicknames(server: TestServer, roomName: string): Promise<string[]> {
  return (await stats(server, roomName)).participants.map((p) => p.nickName);
}

/** The OPERATION_FAILED answering `internalMessageId`. */
async function refusal(client: SfuClient, internalMessageId: string) {
  const event = await client.waitFor((e) => e.internalMessageId === internalMessageId);
  assert.equal(event.type, "OPERATION_FAILED", JSON.stringify(event));
  return { operation: event.operation, error: event.error };
}

/** m-lines of an SDP: `[kind, port]`. */
function mLines(sdp: string): [string, number][] {
  return sdp.split("\r\n").filter((l) => l.startsWith("m=")).map((l) => {
    const [kind, port] = l.slice(2).split(" ");
    return [kind, Number(port)];
  });
}

/** Server offers `client` received so far. */
function serverOffers(client: SfuClient): string[] {
  return client.events.filter((e) =>
    e.type === "REMOTE_SDP" && (e.info as { type: string }).type === "offer"
  ).map((e) => (e.info as { sdp: string }).sdp);
}

Deno.test({
  name: "SFU rename, lock, caps and tid: what the others see, refusals leave the room as it was",
  ...weriftSanitizers,
  fn: async () => {
    await withSfuServer(async (server, clients) => {
      const connect = async (nickname: string) => {
        const client = await SfuClient.connect(server.wsUrl, nickname, "ops");
        clients.push(client);
        return client;
      };
      const alice = await connect("alice");
      const aliceId = (await alice.join("ops", "1")).userId as string;
      const bob = await connect("bob");
      const bobId = (await bob.join("ops", "1")).userId as string;

      // Caps: a third participant, and a second room, are refused; nothing changes.
      const carol = await connect("carol");
      assert.deepEqual(await refusal(carol, await carol.sendJoin("ops", "1")), {
        operation: "ROOM_JOIN",
        error: "Room is full",
      });
      const dave = await connect("dave");
      assert.deepEqual(await refusal(dave, await dave.sendJoin("other", "1")), {
        operation: "ROOM_JOIN",
        error: "Too many rooms",
      });
      assert.equal((await server.post("/sfu/stats", { roomName: "other" })).status, 404);
      assert.deepEqual(await nicknames(server, "ops"), ["alice", "bob"]);

      // Rename: a nickname in use, or another's nickname by a non-owner, is refused.
      const taken = bob.request("renameParticipant", {
        roomId: "ops",
        userId: bobId,
        newNickname: "alice",
      });
      assert.deepEqual(await refusal(bob, taken), {
        operation: "RENAME_PARTICIPANT",
        error: "Nickname unavailable",
      });
      const notOwner = bob.request("renameParticipant", {
        roomId: "ops",
        userId: aliceId,
        newNickname: "eve",
      });
      assert.deepEqual(await refusal(bob, notOwner), {
        operation: "RENAME_PARTICIPANT",
        error: "Not an owner of the room",
      });
      assert.deepEqual(await nicknames(server, "ops"), ["alice", "bob"]);
      // Bob renames himself: PARTICIPANT_RENAMED answers him and tells Alice.
      const renamed = await bob.result(
        bob.request("renameParticipant", { roomId: "ops", userId: bobId, newNickname: "robert" }),
        "PARTICIPANT_RENAMED",
      );
      assert.deepEqual(
        [renamed.userId, renamed.previousName, renamed.updatedName],
        [bobId, "bob", "robert"],
      );
      const told = await alice.waitFor((e) => e.type === "PARTICIPANT_RENAMED");
      assert.deepEqual([told.userId, told.previousName, told.updatedName], [
        bobId,
        "bob",
        "robert",
      ]);
      await alice.waitFor((e) =>
        e.type === "PARTICIPANT_LIST" &&
        JSON.stringify(e.participants) === JSON.stringify(["alice", "robert"])
      );
      assert.deepEqual(await nicknames(server, "ops"), ["alice", "robert"]);
      // The owner renames anyone; "bob" is free again.
      await alice.result(
        alice.request("renameParticipant", { roomId: "ops", userId: bobId, newNickname: "bob" }),
        "PARTICIPANT_RENAMED",
      );
      assert.deepEqual(await nicknames(server, "ops"), ["alice", "bob"]);

      // Lock: the owner only; ROOM_LOCKED to everyone; joins refused while locked.
      const bobLocks = bob.request("setRoomLock", { id: "ops", value: true });
      assert.deepEqual(await refusal(bob, bobLocks), {
        operation: "ROOM_SET_LOCK",
        error: "Not an owner of the room",
      });
      const locked = await alice.result(
        alice.request("setRoomLock", { id: "ops", value: true }),
        "ROOM_LOCKED",
      );
      assert.equal(locked.value, true);
      assert.equal((await bob.waitFor((e) => e.type === "ROOM_LOCKED")).value, true);
      await bob.result(bob.request("leaveRoom", { id: "ops", pin: "1" }), "LEFT");
      const lockedOut = await connect("carol2");
      assert.deepEqual(await refusal(lockedOut, await lockedOut.sendJoin("ops", "1")), {
        operation: "ROOM_JOIN",
        error: "Room is locked",
      });
      assert.deepEqual(await nicknames(server, "ops"), ["alice"]);
      await alice.result(alice.request("setRoomLock", { id: "ops", value: false }), "ROOM_LOCKED");
      const frank = await connect("frank");
      await frank.join("ops", "1");
      assert.deepEqual(await nicknames(server, "ops"), ["alice", "frank"]);

      // An answer whose tid is not the client's latest offer's is refused, nothing applied.
      const wrongTid = frank.request("updateRoomState", {
        id: "ops",
        pin: "1",
        sdp: frank.pc.localDescription!.sdp,
        sdpType: "answer",
        tid: "not-the-tid",
      });
      assert.deepEqual(await refusal(frank, wrongTid), {
        operation: "ROOM_UPDATE",
        error: "Tid mismatch",
      });
      assert.deepEqual(await nicknames(server, "ops"), ["alice", "frank"]);
    }, testConfig({ sfu: { maxRooms: 1, maxParticipantsPerRoom: 2 } }));
  },
});

Deno.test({
  name: "SFU: m-lines of withdrawn tracks are rejected and reused, 5 joins and leaves stay bounded",
  ...weriftSanitizers,
  fn: async () => {
    await withSfuServer(async (server, clients) => {
      const alice = await SfuClient.connect(server.wsUrl, "alice", "churn");
      clients.push(alice);
      alice.addMedia();
      await alice.join("churn", "1");
      const counts: number[] = [];
      for (let round = 0; round < 5; round++) {
        const bob = await SfuClient.connect(server.wsUrl, `bob${round}`, "churn");
        clients.push(bob);
        bob.addMedia();
        await bob.join("churn", "1");
        // Alice gets Bob's two tracks, RTP arriving on the mids announced.
        const added = await alice.waitFor((e) =>
          e.type === "ADD_TRACKS" && (e.info as { nickName: string }).nickName === bob.nickname
        );
        const mids = (added.info as { info: { mid: string }[] }).info.map((t) => t.mid);
        const before = new Map(mids.map((m) => [m, alice.received.get(m) ?? 0]));
        await alice.until(
          () => mids.every((m) => (alice.received.get(m) ?? 0) >= before.get(m)! + 10),
          `alice receiving ${bob.nickname} on ${mids}`,
        );
        const offersBefore = serverOffers(alice).length;
        await bob.result(bob.request("leaveRoom", { id: "churn", pin: "1" }), "LEFT");
        await bob.close();
        await alice.waitFor((e) =>
          e.type === "REMOVE_TRACKS" && (e.info as { nickName: string }).nickName === bob.nickname
        );
        // The next server offer rejects Bob's m-lines (port 0), and Alice applies it.
        await alice.until(
          () =>
            serverOffers(alice).length > offersBefore &&
            alice.pc.signalingState === "stable" &&
            mids.every((mid) =>
              alice.pc.getTransceivers().some((t: RTCRtpTransceiver) =>
                t.mid === mid && (t.stopped || t.currentDirection === "stopped")
              ) || !alice.pc.getTransceivers().some((t: RTCRtpTransceiver) => t.mid === mid)
            ),
          `${bob.nickname}'s m-lines rejected at alice`,
        );
        const last = serverOffers(alice).at(-1)!;
        const rejected = mLines(last).filter(([kind, port]) =>
          kind !== "application" && port === 0
        );
        assert.ok(rejected.length >= 2, `rejected m-lines in ${JSON.stringify(mLines(last))}`);
        counts.push(mLines(last).length);
      }
      // Alice's two own tracks, the data channel and two slots reused by every Bob, instead of
      // 2 × 5 ever more m-lines.
      assert.ok(counts.every((n) => n <= 5), `m-lines per round ${counts}`);
      // A track its publisher stops (updateRoomState with it inactive) is withdrawn the same way.
      const carol = await SfuClient.connect(server.wsUrl, "carol", "churn");
      clients.push(carol);
      carol.addMedia();
      await carol.join("churn", "1");
      await alice.waitFor((e) =>
        e.type === "ADD_TRACKS" && (e.info as { nickName: string }).nickName === "carol"
      );
      const offersBefore = serverOffers(alice).length;
      carol.pc.getTransceivers().find((t) => t.kind === "video")!.setDirection("inactive");
      await carol.result(await carol.updateState(), "ACK");
      const removed = await alice.waitFor((e) =>
        e.type === "REMOVE_TRACKS" && (e.info as { nickName: string }).nickName === "carol"
      );
      const removedTypes = (removed.info as { info: { type: string }[] }).info.map((t) => t.type);
      assert.deepEqual(removedTypes, ["VIDEO"]);
      await alice.until(
        () => serverOffers(alice).length > offersBefore && alice.pc.signalingState === "stable",
        "carol's video rejected at alice",
      );
      const afterStop = mLines(serverOffers(alice).at(-1)!);
      assert.ok(afterStop.length <= 5, JSON.stringify(afterStop));
      assert.equal(afterStop.filter(([kind, port]) => kind === "video" && port === 0).length, 1);
      const carolStats = (await stats(server, "churn")).participants[1];
      assert.deepEqual(carolStats.outgoingTracks.map((t) => t.type), ["AUDIO"]);
      // A client offer carrying the rejected m-lines is answered.
      await alice.result(await alice.updateState(), "ACK");
      await alice.until(() => alice.pc.signalingState === "stable", "alice's offer answered");
    });
  },
});

Deno.test({
  name:
    "SFU /sfu/stats feedbackStats count the NACKs, PLIs and receiver reports a subscriber sends",
  ...weriftSanitizers,
  fn: async () => {
    await withSfuServer(async (server, clients) => {
      const alice = await SfuClient.connect(server.wsUrl, "alice", "fb");
      const bob = await SfuClient.connect(server.wsUrl, "bob", "fb");
      clients.push(alice, bob);
      alice.addMedia();
      await alice.join("fb", "1");
      await bob.join("fb", "1");
      const added = await bob.waitFor((e) => e.type === "ADD_TRACKS");
      const video = (added.info as { info: { id: string; type: string; mid: string }[] }).info
        .find((t) => t.type === "VIDEO")!;
      await bob.until(() => (bob.received.get(video.mid) ?? 0) >= 10, "bob receiving video");
      const transceiver = bob.pc.getTransceivers().find((t) => t.mid === video.mid)!;
      const remote = transceiver.receiver.tracks[0];
      const mediaSsrc = remote.ssrc!;
      let lastSeq = -1;
      remote.onReceiveRtp.subscribe((rtp) => {
        lastSeq = rtp.header.sequenceNumber;
      });
      await bob.until(() => lastSeq >= 0, "a sequence number seen");
      const outgoing = async () => {
        const s = await stats(server, "fb");
        const track = s.participants[0].outgoingTracks.find((t) => t.id === video.id)!;
        return { track: track.feedbackStats!, incoming: s.participants[1].incomingFeedbackStats };
      };
      const start = await outgoing();
      assert.deepEqual(start.incoming[video.id], {
        ...start.incoming[video.id],
        receivedNACK: 0,
        receivedFIR: 0,
      });

      // Bob sends 3 NACKs, 2 PLIs and a receiver report of 25% loss about Alice's video.
      const transport = bob.pc.dtlsTransports[0];
      for (let i = 0; i < 3; i++) {
        await transport.sendRtcp([
          new RtcpTransportLayerFeedback({
            feedback: new GenericNack({
              senderSsrc: 1,
              mediaSourceSsrc: mediaSsrc,
              lost: [lastSeq],
            }),
          }),
        ]);
      }
      for (let i = 0; i < 2; i++) await transceiver.receiver.sendRtcpPLI(mediaSsrc);
      // werift's own receiver reports replace the latest one on the server, so ours is sent
      // again at each look until a look sees it.
      const sendReport = () =>
        transport.sendRtcp([
          new RtcpRrPacket({
            ssrc: 1,
            reports: [
              new RtcpReceiverInfo({
                ssrc: mediaSsrc,
                fractionLost: 64,
                packetsLost: 17,
                highestSequence: 0,
                jitter: 321,
                lsr: 0,
                dlsr: 0,
              }),
            ],
          }),
        ]);
      let now = start;
      await waitFor("the feedback counted", async () => {
        await sendReport();
        now = await outgoing();
        return now.incoming[video.id].receivedNACK >= 3 &&
            now.incoming[video.id].receivedPLI >= start.incoming[video.id].receivedPLI + 2 &&
            now.incoming[video.id].jitter === 321
          ? true
          : undefined;
      });
      // At least ours: werift NACKs on its own what a loaded machine loses.
      assert.ok(now.incoming[video.id].receivedNACK >= 3);
      assert.equal(now.incoming[video.id].fractionLost, 0.25);
      assert.equal(now.incoming[video.id].packetsLost, 17);
      assert.ok(now.track.receivedNACK - start.track.receivedNACK >= 3);
      assert.ok(now.track.receivedPLI - start.track.receivedPLI >= 2);
      // The PLIs made the server ask the publisher for keyframes.
      assert.ok(now.track.sentPLI > start.track.sentPLI, JSON.stringify(now.track));
      assert.ok(now.track.retransmitted > 0, JSON.stringify(now.track));
    });
  },
});
