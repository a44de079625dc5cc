/**
 * Transport-cc in SFU rooms, with werift participants, on the send engine (two Workers) and on
 * werift's send path: the server offers
 * subscribers the transport-wide sequence number extension and `a=rtcp-fb:* transport-cc`,
 * numbers every video packet of a transport in one sequence (across the tracks it carries,
 * whichever Worker sends them), reads the subscribers' feedback (sent by the test for a
 * modelled link in front of each werift peer: werift 0.25's own feedback gives a length that
 * leaves out its last bytes, so werift's RTCP reader drops the whole datagram) and lowers the
 * layer of a subscriber whose link cannot carry it, then raises it again once the link is
 * wide, while a subscriber with room keeps the top layer; /sfu/stats shows the feedback and
 * the estimate.
 */
import assert from "node:assert/strict";
import type { RtcpPacket, RtpPacket } from "werift";
import { openPeerCount } from "../media/protocols/webrtc/peer.ts";
import { transportCcPacket, transportCcUri } from "../media/rtp/transport_cc.ts";
import { H264Receiver } from "./helpers/h264_check.ts";
import { waitFor } from "./helpers/media_fixtures.ts";
import { SfuClient } from "./helpers/sfu_client.ts";
import {
  joinAsSimulcastPublisher,
  makeLayerClips,
  type SimulcastPublisher,
  threeLayerShapes,
} from "./helpers/simulcast_publisher.ts";
import { startTestServer, testConfig } from "./helpers/test_server.ts";
import { weriftSanitizers } from "./webrtc_helpers.ts";

type Feedback = { transportCcFeedback: number; transportCcEstimate: number; remb: number };
type Stats = {
  participants: {
    nickName: string;
    incomingTracks: Record<string, string | null>;
    incomingFeedbackStats: Record<string, Feedback>;
  }[];
};

/** The transport-cc number of `packet` under extension `id`, undefined without one. */
function transportSequence(packet: RtpPacket, id: number): number | undefined {
  const e = packet.header.extensions.find((x) => x.id === id);
  return e ? (e.payload[0] << 8) | e.payload[1] : undefined;
}

/**
 * A link of `kbps` in front of a werift peer, modelled: each numbered packet arrives once the
 * link has carried it (a FIFO queue drained at `kbps`, 10 ms of propagation), and transport
 * feedback with those arrival times goes to the server every 100 ms. `kbps` may change.
 */
class ModelledLink {
  kbps: number;
  #linkFreeMs = 0;
  #arrivals = new Map<number, number>();
  #count = 0;
  readonly #timer: ReturnType<typeof setInterval>;

  constructor(readonly client: SfuClient, kbps: number) {
    this.kbps = kbps;
    this.#timer = setInterval(() => this.#feedback(), 100);
  }

  /** A numbered packet of `bytes` came in now. */
  arrive(sequence: number, bytes: number): void {
    const nowMs = performance.now();
    this.#linkFreeMs = Math.max(this.#linkFreeMs, nowMs) + bytes * 8 / this.kbps;
    this.#arrivals.set(sequence, this.#linkFreeMs + 10);
  }

  stop(): void {
    clearInterval(this.#timer);
  }

  #feedback(): void {
    const nowMs = performance.now();
    const due = [...this.#arrivals].filter(([, at]) => at <= nowMs).map(([s]) => s);
    if (due.length === 0) return;
    // From the oldest number due, in order; a number not arrived by now is reported lost.
    const first = due.reduce((a, b) => (((b - a) & 0xffff) > 0x8000 ? b : a));
    const last = due.reduce((a, b) => (((b - a) & 0xffff) < 0x8000 ? b : a));
    const reports = [];
    for (let s = first;; s = (s + 1) & 0xffff) {
      const at = this.#arrivals.get(s);
      const arrived = at !== undefined && at <= nowMs;
      reports.push({ sequence: s, arrivalMs: arrived ? at : undefined });
      if (arrived) this.#arrivals.delete(s);
      if (s === last) break;
    }
    const bytes = transportCcPacket(1, 0, this.#count++, reports);
    const packet = { serialize: () => bytes } as unknown as RtcpPacket;
    this.client.pc.dtlsTransports[0]?.sendRtcp([packet]).catch(() => {});
  }
}

for (const sendEngine of ["ffi", "werift"] as const) {
  Deno.test({
    name:
      `SFU transport-cc, ${sendEngine} send path: numbers across a transport's tracks, feedback read, a narrow link's layer lowered and raised`,
    ...weriftSanitizers,
    fn: async () => {
      const clips = await makeLayerClips(threeLayerShapes, 3);
      const server = await startTestServer(
        testConfig({ media: { iceMux: "on", sendEngine, sendWorkers: 2 } }),
      );
      const clients: SfuClient[] = [];
      let publishing: SimulcastPublisher | undefined;
      const links = new Map<SfuClient, ModelledLink>();
      try {
        const pub = await SfuClient.connect(server.wsUrl, "pub", "tcc", { simulcast: true });
        const bob = await SfuClient.connect(server.wsUrl, "bob", "tcc");
        // `open` has a wide link, `narrow` one that is narrowed later.
        const open = await SfuClient.connect(server.wsUrl, "open", "tcc");
        const narrow = await SfuClient.connect(server.wsUrl, "narrow", "tcc");
        clients.push(pub, bob, open, narrow);
        for (const client of [open, narrow]) {
          client.takeTransportCc();
          // werift's own feedback is kept off (see above): its receivers never start it.
          client.pc.onTransceiverAdded.subscribe((t) => {
            (t.receiver as unknown as { setupTWCC(): void }).setupTWCC = () => {};
          });
        }
        publishing = await joinAsSimulcastPublisher(pub, "tcc", clips);
        bob.addMedia();
        await bob.join("tcc", "1");

        const numbers = new Map<SfuClient, number[]>([[open, []], [narrow, []]]);
        const ids = new Map<SfuClient, number>();
        const onPacket = (client: SfuClient) => (p: RtpPacket) => {
          const id = ids.get(client);
          const n = id === undefined ? undefined : transportSequence(p, id);
          if (n === undefined) return;
          numbers.get(client)!.push(n);
          links.get(client)?.arrive(n, p.serialize().length + 10);
        };
        new H264Receiver(open.pc, onPacket(open));
        new H264Receiver(narrow.pc, onPacket(narrow));
        const wide = new ModelledLink(open, 10_000);
        const link = new ModelledLink(narrow, 10_000);
        links.set(open, wide);
        links.set(narrow, link);
        for (const client of [open, narrow]) {
          await client.join("tcc", "1");
          const offer = await client.waitFor((e) =>
            e.type === "REMOTE_SDP" && (e.info as { type: string }).type === "offer"
          );
          const sdp = (offer.info as { sdp: string }).sdp;
          assert.match(sdp, new RegExp(`a=extmap:\\d+ ${transportCcUri}`));
          assert.match(sdp, /a=rtcp-fb:\d+ transport-cc/);
          await client.until(() => client.pc.connectionState === "connected", "connected");
          await client.until(
            () =>
              client.pc.getTransceivers().filter((t) =>
                t.receiver.track?.kind === "video" &&
                t.headerExtensions.some((e) => e.uri === transportCcUri)
              ).length === 2,
            "two videos with transport-cc",
          );
          const t = client.pc.getTransceivers().find((t) =>
            t.headerExtensions.some((e) => e.uri === transportCcUri)
          )!;
          ids.set(client, t.headerExtensions.find((e) => e.uri === transportCcUri)!.id);
        }
        const stats = async (nickName: string) => {
          const res = await server.post("/sfu/stats", { roomName: "tcc" });
          assert.equal(res.status, 200);
          return (await res.json() as Stats).participants.find((p) => p.nickName === nickName)!;
        };
        // The layer `nickName` gets of pub's video (bob's video has none).
        const added = narrow.events.find((e) =>
          e.type === "ADD_TRACKS" && (e.info as { nickName: string }).nickName === "pub"
        )!;
        const pubVideo = (added.info as { info: { id: string; type: string }[] }).info
          .find((t) => t.type === "VIDEO")!.id;
        const layerOf = async (nickName: string) =>
          (await stats(nickName)).incomingTracks[pubVideo];
        const layerBecomes = (nickName: string, test: (layer: string | null) => boolean) =>
          waitFor(`${nickName}'s layer`, async () => test(await layerOf(nickName)) || undefined);
        await layerBecomes("open", (l) => l === "h send");
        await layerBecomes("narrow", (l) => l === "h send");

        // One numbering per transport over both videos (pub's layers and bob's): every number
        // once, none skipped, whichever Worker sent the track.
        await open.until(() => numbers.get(open)!.length >= 400, "400 numbered packets");
        const seen = numbers.get(open)!.slice(0, 400).sort((a, b) => a - b);
        const span = (seen[seen.length - 1] - seen[0]) & 0xffff;
        assert.equal(new Set(seen).size, seen.length, "a number given twice");
        assert.ok(span < 420, `400 packets numbered over ${span + 1}`);

        // The feedback arrives; with room on the link the estimate keeps the top layer.
        await waitFor("open's feedback counted", async () => {
          const f = Object.values((await stats("open")).incomingFeedbackStats);
          return f.some((x) => x.transportCcFeedback > 10 && x.transportCcEstimate > 0)
            ? true
            : undefined;
        });
        const openIn = await stats("open");
        assert.equal(openIn.incomingTracks[pubVideo], "h send", JSON.stringify(openIn));

        // A link of 450 kbit/s: the 600 kbit/s layer does not fit, 300 does.
        link.kbps = 450;
        const downFrom = performance.now();
        await waitFor(
          "narrow lowered",
          async () => (await layerOf("narrow")) !== "h send" || undefined,
          20_000,
        );
        const downMs = Math.round(performance.now() - downFrom);
        const lowered = await stats("narrow");
        assert.match(lowered.incomingTracks[pubVideo] ?? "", /^[ml] send$/);
        const estimate = Math.max(
          ...Object.values(lowered.incomingFeedbackStats).map((f) => f.transportCcEstimate),
        );
        assert.ok(estimate > 250_000 && estimate < 450_000, `estimate ${estimate} bit/s`);
        // The subscriber with room keeps its layer.
        assert.equal(await layerOf("open"), "h send");

        // The link widens: the layer climbs back to the top.
        link.kbps = 10_000;
        const upFrom = performance.now();
        await waitFor(
          "narrow back to h",
          async () => (await layerOf("narrow")) === "h send" || undefined,
          40_000,
        );
        const upMs = Math.round(performance.now() - upFrom);
        console.log(
          `transport-cc (${sendEngine}): 450 kbit/s link lowered in ${downMs} ms (estimate ${estimate} bit/s); ` +
            `widened: back to the top layer ${upMs} ms later (a climb waits 8 s after a step)`,
        );
      } finally {
        for (const l of links.values()) l.stop();
        publishing?.stop();
        await Promise.allSettled(clients.map((c) => c.close()));
        await server.stop();
      }
      await waitFor("every server peer closed", () => openPeerCount() === 0 ? true : undefined);
    },
  });
}
