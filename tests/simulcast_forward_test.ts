/**
 * Simulcast forwarding with real werift peers: a publisher sends three H.264 layers (ffmpeg
 * clips of three sizes, packetized by the server's packetizer) as three SSRCs with rid
 * header extensions; a forwarding peer receives them as werift's per-rid tracks and passes
 * them through LayerMonitor, LayerChoice and SimulcastSwitch (as an SFU room does) to a
 * player, whose received H.264 must decode without errors while its picture size follows
 * the chosen layer.
 */
import assert from "node:assert/strict";
import { Buffer } from "node:buffer";
import {
  RTCPeerConnection,
  RtcpPayloadSpecificFeedback,
  type RTCRtpTransceiver,
  RtpHeader,
  useSdesMid,
  useSdesRTPStreamId,
} from "werift";
import { decodeH264 } from "./helpers/h264_check.ts";
import type { MediaFrame } from "../media/frame.ts";
import { lengthPrefixedToAnnexB } from "../media/codecs/nalu.ts";
import { H264Depacketizer } from "../media/rtp/h264_depacketizer.ts";
import { H264Packetizer } from "../media/rtp/h264_packetizer.ts";
import { LayerChoice, orderRids } from "../media/rtp/layer_choice.ts";
import { LayerMonitor } from "../media/rtp/layer_monitor.ts";
import { SimulcastSwitch } from "../media/rtp/simulcast_switch.ts";
import { type Clip, makeH264OpusClip } from "./helpers/webrtc_clip_publisher.ts";
import { h264Codec, loopbackIce, weriftSanitizers } from "./webrtc_helpers.ts";

/** Layers the publisher sends, in its offer's order. */
const rids = ["h", "m", "l"];
const layerShapes: Record<string, { width: number; height: number; videoKbps: number }> = {
  l: { width: 160, height: 90, videoKbps: 150 },
  m: { width: 320, height: 180, videoKbps: 300 },
  h: { width: 640, height: 360, videoKbps: 600 },
};
const clipSeconds = 6;
/** How often the forwarder re-chooses layers, as an SFU room's timer would, in ms. */
const chooseIntervalMs = 100;

function peer(simulcast: boolean): RTCPeerConnection {
  return new RTCPeerConnection({
    ...loopbackIce(),
    codecs: {
      video: [h264Codec()],
    },
    // The rid header extension is what routes a simulcast layer to its rid track.
    headerExtensions: { video: simulcast ? [useSdesMid(), useSdesRTPStreamId()] : [], audio: [] },
  });
}

async function connect(offerer: RTCPeerConnection, answerer: RTCPeerConnection): Promise<void> {
  await offerer.setLocalDescription(await offerer.createOffer());
  await answerer.setRemoteDescription(offerer.localDescription!);
  await answerer.setLocalDescription(await answerer.createAnswer());
  await offerer.setRemoteDescription(answerer.localDescription!);
}

async function connected(pcs: RTCPeerConnection[]): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (!pcs.every((pc) => pc.connectionState === "connected")) {
    if (Date.now() > deadline) throw new Error("peers did not connect");
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** The publisher side: three SSRCs of one transceiver, each packet with its rid. */
function startPublisher(
  tx: RTCRtpTransceiver,
  clips: Record<string, Clip>,
): { stop: () => void; done: Promise<void> } {
  const ridId = tx.headerExtensions.find((e) => e.uri === useSdesRTPStreamId().uri)!.id;
  const payloadType = tx.codecs[0].payloadType;
  const layers = rids.map((rid, i) => {
    const clip = clips[rid];
    const track = clip.tracks.find((t) => t.kind === "video")!;
    const config = track.config;
    return {
      rid,
      frames: clip.frames.filter((f) => f.trackId === track.id),
      packetizer: new H264Packetizer(() =>
        config?.codec === "H264" ? [...config.sps, ...config.pps] : []
      ),
      header: new RtpHeader({
        ssrc: 0x1000 + i,
        payloadType,
        sequenceNumber: 1000 * (i + 1) + 60000,
        extension: true,
        extensions: [{ id: ridId, payload: Buffer.from(rid) }],
      }),
      // Layers have unrelated timestamp bases, as in a browser.
      tsBase: 0x7fff0000 * i,
    };
  });
  const frameCount = Math.min(...layers.map((l) => l.frames.length));
  const startMs = performance.now();
  let next = 0;
  let timer: ReturnType<typeof setInterval>;
  const done = new Promise<void>((resolve) => {
    timer = setInterval(() => {
      while (next < frameCount && next * 40 <= performance.now() - startMs) {
        for (const layer of layers) send(layer, layer.frames[next]);
        next++;
      }
      if (next === frameCount) {
        clearInterval(timer);
        resolve();
      }
    }, 10);
  });
  const send = (layer: typeof layers[number], frame: MediaFrame) => {
    layer.packetizer.packetize(frame, (payload, marker) => {
      const h = layer.header;
      h.marker = marker;
      h.timestamp = (frame.pts + layer.tsBase) >>> 0;
      tx.sender.dtlsTransport.sendRtp(Buffer.from(payload), h);
      h.sequenceNumber = (h.sequenceNumber + 1) & 0xffff;
    });
  };
  return { stop: () => clearInterval(timer), done };
}

Deno.test({
  name: "simulcast: a subscriber switches layers at keyframes and decodes one continuous stream",
  ...weriftSanitizers,
  async fn() {
    const shapes = rids.map((rid) => layerShapes[rid]);
    const made = await Promise.all(
      shapes.map((s) => makeH264OpusClip({ seconds: clipSeconds, ...s })),
    );
    const clips = Object.fromEntries(rids.map((rid, i) => [rid, made[i]]));

    const publisher = peer(true);
    const forwardIn = peer(true);
    const forwardOut = peer(false);
    const player = peer(false);
    const dir = await Deno.makeTempDir({ prefix: "simulcast-" });
    const timers: ReturnType<typeof setInterval>[] = [];
    try {
      const pubTx = publisher.addTransceiver("video", {
        direction: "sendonly",
        sendEncodings: rids.map((rid) => ({ rid })),
      });
      const outTx = forwardOut.addTransceiver("video", { direction: "sendonly" });

      // What the player receives: RTP header fields and the depacketized access units.
      const received: { ssrc: number; seq: number; ts: number }[] = [];
      const annexB: Uint8Array[] = [];
      const depacketizer = new H264Depacketizer(0);
      player.onTrack.subscribe((track) => {
        track.onReceiveRtp.subscribe((p) => {
          const { ssrc, sequenceNumber, timestamp, marker, payloadType } = p.header;
          received.push({ ssrc, seq: sequenceNumber, ts: timestamp });
          depacketizer.push(
            { ssrc, sequenceNumber, timestamp, marker, payloadType, payload: p.payload },
            (frame) => annexB.push(lengthPrefixedToAnnexB(frame.data)),
          );
        });
      });

      await connect(publisher, forwardIn);
      await connect(forwardOut, player);

      // Keyframe requests the publisher gets, by SSRC.
      const plis: number[] = [];
      await connected([publisher, forwardIn, forwardOut, player]);
      pubTx.sender.dtlsTransport.onRtcp.subscribe((rtcp) => {
        if (rtcp instanceof RtcpPayloadSpecificFeedback) {
          plis.push((rtcp.feedback as { mediaSsrc: number }).mediaSsrc);
        }
      });

      // The forwarder, as an SFU room wires it: rid tracks -> monitor + switch -> send path.
      const receiver = forwardIn.getTransceivers()[0].receiver;
      const order = orderRids(Object.keys(receiver.trackByRID));
      assert.deepEqual(order, ["l", "m", "h"]);
      const layerSsrcs: number[] = [];
      const monitor = new LayerMonitor("H264", 0, order.length);
      const choice = new LayerChoice(order.length);
      const outHeader = new RtpHeader({
        ssrc: outTx.sender.ssrc,
        payloadType: outTx.codecs[0].payloadType,
      });
      const sw = new SimulcastSwitch({
        codec: "H264",
        ssrc: outTx.sender.ssrc,
        requestKeyframe: (layer) => {
          if (layerSsrcs[layer] !== undefined) {
            receiver.sendRtcpPLI(layerSsrcs[layer]).catch(() => {});
          }
        },
      });
      const switchedAtMs: number[] = [];
      order.forEach((rid, layer) => {
        receiver.trackByRID[rid].onReceiveRtp.subscribe((packet) => {
          const now = performance.now();
          layerSsrcs[layer] = packet.header.ssrc;
          monitor.add(layer, packet, now);
          const before = sw.layer;
          const out = sw.forward(layer, packet, now);
          if (!out) return;
          if (sw.layer !== before) switchedAtMs.push(now);
          outHeader.sequenceNumber = out.sequenceNumber;
          outHeader.timestamp = out.timestamp;
          outHeader.marker = out.marker;
          const payload = Buffer.from(
            out.payload.buffer,
            out.payload.byteOffset,
            out.payload.length,
          );
          outTx.sender.dtlsTransport.sendRtp(payload, outHeader);
        });
      });
      const selectedAtMs: number[] = [];
      timers.push(setInterval(() => {
        const now = performance.now();
        const layer = choice.choose(monitor.aliveLayers(now), monitor.bitratesKbps(now), now);
        if (layer >= 0 && layer !== sw.targetLayer) {
          selectedAtMs.push(now);
          sw.select(layer, now);
        }
      }, chooseIntervalMs));

      const pub = startPublisher(pubTx, clips);
      // changeQuality: the top layer, then "l" at 1.5 s, then "m" at 3.5 s.
      await new Promise((r) => setTimeout(r, 1500));
      const alive = monitor.report(performance.now());
      choice.setCap(0);
      await new Promise((r) => setTimeout(r, 2000));
      choice.setCap(1);
      await pub.done;
      await new Promise((r) => setTimeout(r, 300));

      // All three layers were alive and measured while the publisher sent them.
      assert.deepEqual(alive.map((l) => [l.alive, l.width, l.height]), [
        [true, 160, 90],
        [true, 320, 180],
        [true, 640, 360],
      ]);
      assert.ok(alive.every((l) => l.kbps > 0 && l.fps >= 20), JSON.stringify(alive));

      // One SSRC, no sequence gap, timestamps never going back.
      assert.ok(received.length > 100, `${received.length} packets`);
      assert.deepEqual([...new Set(received.map((p) => p.ssrc))], [outTx.sender.ssrc]);
      for (let i = 1; i < received.length; i++) {
        assert.equal(received[i].seq, (received[i - 1].seq + 1) & 0xffff, `sequence at ${i}`);
        assert.ok(((received[i].ts - received[i - 1].ts) >>> 0) < 90000, `timestamp at ${i}`);
      }
      assert.equal(sw.switches, 2);
      // Each switch asked the new layer's SSRC for a keyframe.
      assert.ok(plis.includes(layerSsrcs[0]) && plis.includes(layerSsrcs[1]), String(plis));
      const switchMs = switchedAtMs.slice(1).map((t, i) => Math.round(t - selectedAtMs[i + 1]));
      console.log(`switch waits for the next keyframe (GOP 1 s): ${switchMs.join(", ")} ms`);
      assert.ok(switchMs.every((ms) => ms <= 1500), String(switchMs));

      // ffmpeg decodes the whole stream without an error, and the size follows the choice.
      const file = `${dir}/received.h264`;
      await Deno.writeFile(file, Buffer.concat(annexB));
      const { errors, sizes } = await decodeH264(file);
      assert.equal(errors, "", "decoder errors");
      const runs: { size: string; frames: number }[] = [];
      for (const size of sizes) {
        if (runs.at(-1)?.size === size) runs.at(-1)!.frames++;
        else runs.push({ size, frames: 1 });
      }
      console.log(
        `decoded ${sizes.length} frames: ${runs.map((r) => `${r.size} x${r.frames}`).join(", ")}`,
      );
      assert.deepEqual(runs.map((r) => r.size), ["640,360", "160,90", "320,180"]);
      assert.ok(runs.every((r) => r.frames >= 20), JSON.stringify(runs));
    } finally {
      for (const t of timers) clearInterval(t);
      await Promise.all([publisher, forwardIn, forwardOut, player].map((pc) => pc.close()));
      await Deno.remove(dir, { recursive: true });
    }
  },
});
