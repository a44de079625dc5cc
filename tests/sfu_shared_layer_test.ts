/**
 * SFU simulcast on the send engine: subscribers forwarding the same layer of a track share
 * that layer's engine group (each packet handed to the engine once), the Workers numbering
 * each one's copies. A subscriber switching layers moves to the other layer's group at its
 * keyframe and keeps one continuous stream: one SSRC, sequence numbers without a gap, H.264
 * that decodes without an error; the subscriber left on the first layer is undisturbed.
 */
import assert from "node:assert/strict";
import type { RtpPacket } from "werift";
import { openPeerCount } from "../media/protocols/webrtc/peer.ts";
import { SfuClient, type SfuEvent } from "./helpers/sfu_client.ts";
import { startTestServer, type TestServer } from "./helpers/test_server.ts";
import { weriftSanitizers } from "./webrtc_helpers.ts";
import { waitFor } from "./helpers/media_fixtures.ts";
import { H264Receiver } from "./helpers/h264_check.ts";
import {
  joinAsSimulcastPublisher,
  makeLayerClips,
  type SimulcastPublisher,
  threeLayerShapes,
} from "./helpers/simulcast_publisher.ts";

/** The mid and id of `publisher`'s video announced to `client`. */
async function videoOf(client: SfuClient, publisher: string): Promise<{ id: string; mid: string }> {
  let found: { id: string; mid: string; type: string } | undefined;
  await client.until(() => {
    found = client.events.filter((e: SfuEvent) =>
      e.type === "ADD_TRACKS" && (e.info as { nickName: string }).nickName === publisher
    ).flatMap((e) => (e.info as { info: { id: string; mid: string; type: string }[] }).info)
      .find((t) => t.type === "VIDEO");
    return found !== undefined;
  }, `${client.nickname} told of ${publisher}'s video`);
  return found!;
}

/** Names of the shared engine groups the server's paths are in now (the room has video only). */
function sharedVideoGroups(server: TestServer): string[] {
  return server.services.sendPaths.paths().flatMap((p) => p.sharedGroup?.name ?? []).sort();
}

/** Sequence numbers in `received` (in arrival order) that do not follow the one before. */
function gaps(received: number[]): string[] {
  const out: string[] = [];
  for (let i = 1; i < received.length; i++) {
    if (((received[i] - received[i - 1]) & 0xffff) !== 1) {
      out.push(`${received[i - 1]}→${received[i]}`);
    }
  }
  return out;
}

Deno.test({
  name:
    "SFU on the send engine: two subscribers of a layer share its group; a switch keeps sequence numbers continuous and the stream decodable",
  ...weriftSanitizers,
  fn: async () => {
    const clips = await makeLayerClips(threeLayerShapes, 3);
    const server = await startTestServer();
    const clients: SfuClient[] = [];
    let publishing: SimulcastPublisher | undefined;
    const dir = await Deno.makeTempDir({ prefix: "sfu-shared-" });
    try {
      const pub = await SfuClient.connect(server.wsUrl, "pub", "shared", { simulcast: true });
      const a = await SfuClient.connect(server.wsUrl, "a", "shared");
      const b = await SfuClient.connect(server.wsUrl, "b", "shared");
      clients.push(pub, a, b);
      publishing = await joinAsSimulcastPublisher(pub, "shared", clips);
      const sequences = new Map<SfuClient, number[]>([[a, []], [b, []]]);
      const receivers = new Map<SfuClient, H264Receiver>();
      for (const client of [a, b]) {
        receivers.set(
          client,
          new H264Receiver(
            client.pc,
            (p: RtpPacket) => sequences.get(client)!.push(p.header.sequenceNumber),
          ),
        );
        await client.join("shared", "1");
      }
      const video = await videoOf(a, "pub");
      const meterA = receivers.get(a)!.meter;
      const meterB = receivers.get(b)!.meter;
      await a.until(() => meterA.width === 640 && meterB.width === 640, "both decoding 640x360");

      // Both forward layer h: one group on the engine, which every packet of h reaches once.
      const together = sharedVideoGroups(server);
      assert.equal(together.length, 2, "both video paths are in a shared group");
      assert.equal(together[0], together[1], "the same group");

      const change = async (quality: string, width: number) => {
        const id = a.request("changeQuality", { roomId: "shared", id: video.id, quality });
        await a.result(id, "ACK");
        await a.until(() => meterA.width === width, `a decoding width ${width}`, 5000);
      };
      await change("l", 160);
      const apart = sharedVideoGroups(server);
      assert.equal(apart.length, 2);
      assert.notEqual(apart[0], apart[1], "a moved to layer l's group");
      await new Promise((r) => setTimeout(r, 1500));
      await change("h", 640);
      const again = sharedVideoGroups(server);
      assert.equal(again[0], again[1], "a is back in layer h's group with b");
      await new Promise((r) => setTimeout(r, 1000));
      publishing.stop();
      await new Promise((r) => setTimeout(r, 300));

      for (const [client, received] of sequences) {
        const name = client.nickname;
        assert.ok(received.length > 100, `${name}: ${received.length} packets`);
        assert.deepEqual(gaps(received), [], `${name}: sequence numbers without a gap`);
        const receiver = receivers.get(client)!;
        assert.equal(receiver.ssrcs.size, 1, `${name}: one SSRC`);
        const { errors, sizes } = await receiver.decode(`${dir}/${name}.h264`);
        assert.equal(errors, "", `${name}: decoder errors`);
        const runs = sizes.filter((size, i) => size !== sizes[i - 1]);
        assert.deepEqual(runs, client === a ? ["640,360", "160,90", "640,360"] : ["640,360"]);
      }
    } finally {
      publishing?.stop();
      await Promise.allSettled(clients.map((c) => c.close()));
      await server.stop();
      await Deno.remove(dir, { recursive: true });
    }
    await waitFor("every server peer closed", () => openPeerCount() === 0 ? true : undefined);
  },
});
