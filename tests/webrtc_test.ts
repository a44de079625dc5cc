/**
 * WebRTC publish and play through the signaling protocol, werift on both ends (no browser):
 * statuses, forwarding, keyframe requests, records and metrics, stream events, terminate,
 * refusals, and that no peer connection is left open.
 */
import assert from "node:assert/strict";
import { openPeerCount } from "../media/protocols/webrtc/peer.ts";
import type { WebRtcPublisher } from "../media/providers/webrtc_publisher.ts";
import { ok } from "./helpers/rest_checks.ts";
import { startTestServer, type TestServer } from "./helpers/test_server.ts";
import { WcsClient } from "./helpers/wcs_client.ts";
import {
  nextStatus,
  startPlaying,
  startPublishing,
  TestPlayer,
  TestPublisher,
  type TestVideoCodec,
  waitFor,
  weriftSanitizers,
  withTwoClients,
} from "./webrtc_helpers.ts";

async function findStreams(s: TestServer, filter: Record<string, unknown>) {
  const res = await s.post("/stream/find", filter);
  assert.equal(res.status, 200);
  return await res.json() as Record<string, unknown>[];
}

for (const codec of ["VP8", "H264"] as TestVideoCodec[]) {
  Deno.test({
    name: `webrtc: ${codec} publish and play, metrics, events, terminate`,
    ...weriftSanitizers,
    fn: async () => {
      const publisher = new TestPublisher(codec);
      const player = new TestPlayer(codec);
      await withTwoClients([publisher, player], async (s, pubClient, playClient) => {
        const pubId = crypto.randomUUID();
        const answer = await publisher.publish(pubClient, { mediaSessionId: pubId, name: "cam" });
        assert.match(answer, /a=candidate:\S+ 1 udp \d+ 127\.0\.0\.1 \d+ typ host/);
        assert.doesNotMatch(answer, /typ (srflx|relay)/);
        publisher.start();
        const publishing = await nextStatus(pubClient, pubId);
        assert.equal(publishing.status, "PUBLISHING");
        assert.equal(publishing.name, "cam");

        const avail = crypto.randomUUID();
        playClient.send("availableStream", { mediaSessionId: avail, name: "cam" });
        const [available] = await playClient.next("availableStream") as [Record<string, unknown>];
        assert.deepEqual([available.id, available.status], [avail, "true"]);

        const playId = crypto.randomUUID();
        const pliBefore = publisher.plis;
        await player.play(playClient, { mediaSessionId: playId, name: "cam" });
        assert.equal((await nextStatus(playClient, playId)).status, "PLAYING");
        const playingMs = performance.now();
        await waitFor(
          () => player.received.video > 50 && player.received.audio > 50,
          10_000,
          "media",
        );
        // Keyframes come every 2 s on their own; sooner means the PLI was relayed.
        const keyframeAfterMs = player.firstKeyframeMs - playingMs;
        assert.ok(keyframeAfterMs < 1000, `first keyframe ${keyframeAfterMs} ms after PLAYING`);
        assert.ok(
          publisher.plis > pliBefore,
          "the late joiner's keyframe request reached the publisher",
        );

        await new Promise((r) => setTimeout(r, 1200));
        const [record] = await findStreams(s, {
          name: "cam",
          published: true,
          display: ["metrics"],
        });
        assert.equal(record.mediaProvider, "WebRTC");
        assert.equal(record.status, "PUBLISHING");
        assert.equal(record.mediaType, "publish");
        assert.equal(record.transport, "UDP");
        assert.equal(record.videoCodec, codec);
        assert.equal(record.audioCodec, "OPUS");
        assert.deepEqual([record.width, record.height], [640, 480]);
        const metrics = record.metrics as Record<string, number>;
        assert.ok(metrics.VIDEO_RATE > 100, `VIDEO_RATE ${metrics.VIDEO_RATE}`);
        assert.ok(metrics.AUDIO_RATE > 10, `AUDIO_RATE ${metrics.AUDIO_RATE}`);
        assert.ok(
          metrics.VIDEO_FPS >= 10 && metrics.VIDEO_FPS <= 30,
          `VIDEO_FPS ${metrics.VIDEO_FPS}`,
        );
        assert.ok(metrics.VIDEO_K_FRAMES >= 1 && metrics.VIDEO_P_FRAMES > 10);
        assert.ok(metrics.VIDEO_PLI >= 1);
        assert.equal(metrics.VIDEO_LOST, 0);
        // Sender reports reach the player in the publisher's RTP clock (A/V sync needs it).
        for (const kind of ["video", "audio"]) {
          const reports = player.senderReports.filter((r) => r.kind === kind);
          assert.ok(reports.length > 0, `a ${kind} sender report reached the player`);
          const clock = kind === "video" ? 90000 : 48000;
          assert.ok(reports.every((r) => Math.abs(r.rtpLead) < clock), JSON.stringify(reports));
        }
        // A frame reader makes the stream depacketize: it starts at a keyframe of the codec.
        const source = s.services.streams.get(pubId) as WebRtcPublisher;
        const reader = source.reader();
        const frames = [];
        while (frames.length < 60) frames.push((await reader.next())!);
        reader.close();
        const video = frames.filter((f) => f.trackId === 0);
        assert.deepEqual([video[0].codec, video[0].keyframe], [codec, true]);
        assert.ok(frames.some((f) => f.codec === "OPUS"));
        assert.ok(video.length > 10 && video.every((f, i) => i === 0 || f.pts > video[i - 1].pts));
        assert.deepEqual([source.videoTrack?.width, source.videoTrack?.height], [640, 480]);
        const [played] = await findStreams(s, { mediaSessionId: playId });
        assert.deepEqual([played.mediaType, played.status, played.published], [
          "play",
          "PLAYING",
          false,
        ]);

        pubClient.send("sendStreamEvent", { mediaSessionId: pubId, type: "videoMuted" });
        const [muted] = await playClient.next("notifyStreamEvent") as [Record<string, unknown>];
        assert.equal(muted.mediaSessionId, playId);
        assert.equal(muted.type, "videoMuted");
        assert.equal((muted.payload as Record<string, unknown>).streamName, "cam");
        const [mutedRecord] = await findStreams(s, { mediaSessionId: pubId });
        assert.deepEqual(mutedRecord.videoState, { muted: true });

        await ok(s, "/stream/event/send", { streamName: "cam", payload: { hello: 1 } });
        const [data] = await playClient.next("notifyStreamEvent") as [Record<string, unknown>];
        assert.deepEqual([data.mediaSessionId, data.payload], [playId, { hello: 1 }]);

        await ok(s, "/stream/terminate", { mediaSessionId: pubId });
        const unpublished = await nextStatus(pubClient, pubId);
        assert.deepEqual([unpublished.status, unpublished.info], [
          "UNPUBLISHED",
          "Stopped by rest /terminate",
        ]);
        const stopped = await nextStatus(playClient, playId);
        assert.deepEqual([stopped.status, stopped.info], ["STOPPED", "Stopped by rest /terminate"]);
        assert.deepEqual(await findStreams(s, {}), []);
        assert.equal(openPeerCount(), 0);
      });
    },
  });
}

Deno.test({
  name: "webrtc: NACKs of a lossy player are answered from the stream's packet cache",
  ...weriftSanitizers,
  fn: async () => {
    const publisher = new TestPublisher("VP8");
    const player = new TestPlayer("VP8", 90);
    await withTwoClients([publisher, player], async (s, pubClient, playClient) => {
      const pubId = await startPublishing(publisher, pubClient, { name: "lossy" });
      await startPlaying(player, playClient, { name: "lossy" });
      await new Promise((r) => setTimeout(r, 3000));
      const [record] = await findStreams(s, { mediaSessionId: pubId, display: ["metrics"] });
      const nacks = (record.metrics as Record<string, number>).VIDEO_NACK;
      assert.ok(nacks > 0, "the player's NACKs reached the server");
      const source = s.services.streams.get(pubId) as WebRtcPublisher;
      assert.ok(source.retransmittedPackets > 0, "lost packets were resent from the cache");
    });
  },
});

Deno.test({
  name: "webrtc: stopStream, unPublishStream and a closed socket end every stream and peer",
  ...weriftSanitizers,
  fn: async () => {
    const publisher = new TestPublisher("VP8");
    const [first, second] = [new TestPlayer(), new TestPlayer()];
    await withTwoClients([publisher, first, second], async (s, pubClient, playClient) => {
      const pubId = await startPublishing(publisher, pubClient, { name: "life" });
      const id1 = await startPlaying(first, playClient, { name: "life" });
      const id2 = await startPlaying(second, playClient, { name: "life" });

      playClient.send("stopStream", { mediaSessionId: id1, name: "life" });
      const stopped = await nextStatus(playClient, id1);
      assert.deepEqual([stopped.status, stopped.info], ["STOPPED", "Stopped by user"]);
      assert.equal(openPeerCount(), 2);

      pubClient.send("unPublishStream", { mediaSessionId: pubId, name: "life" });
      const gone = await nextStatus(playClient, id2);
      assert.deepEqual([gone.status, gone.info], ["STOPPED", "Stopped by publisher stop"]);
      const unpublished = await nextStatus(pubClient, pubId);
      assert.deepEqual([unpublished.status, unpublished.info], ["UNPUBLISHED", "Stopped by user"]);
      assert.equal(openPeerCount(), 0);

      // A publisher whose socket closes takes its players with it.
      const publisher2 = new TestPublisher("VP8");
      const third = new TestPlayer();
      try {
        await startPublishing(publisher2, pubClient, { name: "life" });
        const id3 = await startPlaying(third, playClient, { name: "life" });
        await pubClient.close();
        const ended = await nextStatus(playClient, id3);
        assert.deepEqual([ended.status, ended.info], ["STOPPED", "Stopped by publisher stop"]);
        await waitFor(() => s.services.streams.size === 0, 5000, "the streams to go");
        assert.equal(openPeerCount(), 0);
      } finally {
        await publisher2.close();
        await third.close();
      }
    });
  },
});

Deno.test({
  name: "webrtc: a publish with record: true is recorded from its start to its end",
  ...weriftSanitizers,
  fn: async () => {
    const s = await startTestServer();
    const { client } = await WcsClient.connect(s.wsUrl);
    const publisher = new TestPublisher("H264");
    try {
      const id = await startPublishing(publisher, client, { name: "rec", record: true });
      await waitFor(() => s.services.recorders.list().length === 1, 5000, "the recorder");
      const [live] = await findStreams(s, { mediaSessionId: id });
      assert.equal(live.record, true);
      assert.match(String(live.recordName), /^rec-\d+-\{endTime\}\.mp4$/);
      await new Promise((r) => setTimeout(r, 2500));
      client.send("unPublishStream", { mediaSessionId: id, name: "rec" });
      assert.equal((await nextStatus(client, id)).status, "UNPUBLISHED");
      const folder = s.services.config.folders.records;
      const finished = () =>
        [...Deno.readDirSync(folder)].map((e) => e.name).filter((n) => !n.includes("{endTime}"));
      await waitFor(() => finished().length === 1, 5000, "the file under its final name");
      const probe = await new Deno.Command("ffprobe", {
        args: [
          ...["-v", "error", "-count_packets", "-show_entries"],
          ...["stream=codec_name,width,height,nb_read_packets", "-of", "json"],
          `${folder}/${finished()[0]}`,
        ],
      }).output();
      assert.ok(probe.success, new TextDecoder().decode(probe.stderr));
      const streams = JSON.parse(new TextDecoder().decode(probe.stdout)).streams;
      const video = streams.find((x: Record<string, unknown>) => x.codec_name === "h264");
      assert.deepEqual([video?.width, video?.height], [640, 480]);
      assert.ok(Number(video.nb_read_packets) >= 40, JSON.stringify(streams));
      assert.ok(streams.some((x: Record<string, unknown>) => x.codec_name === "opus"));
    } finally {
      await publisher.close();
      await client.close();
      await s.stop();
    }
  },
});
