/**
 * A werift simulcast publisher for tests: one sendonly video transceiver whose layers are
 * H.264 clips of different sizes (made by makeH264OpusClip), each packetized by the server's
 * packetizer and sent under its own SSRC with its rid header extension, 25 frames a second,
 * the clips looped (timestamps keep growing) until stopped.
 */
import { Buffer } from "node:buffer";
import { type RTCRtpTransceiver, RtpHeader, useSdesRTPStreamId } from "werift";
import type { MediaFrame } from "../../media/frame.ts";
import { H264Packetizer } from "../../media/rtp/h264_packetizer.ts";
import type { SfuClient } from "./sfu_client.ts";
import { type Clip, makeH264OpusClip } from "./webrtc_clip_publisher.ts";

/** Interval of the frames sent, in milliseconds. */
export const simulcastFrameMs = 40;

/** The picture size and video bit rate of one layer's clip. */
export type LayerShape = { width: number; height: number; videoKbps: number };

/** Three layers by rid, in the offer's order: 640x360, 320x180 and 160x90. */
export const threeLayerShapes: Record<string, LayerShape> = {
  h: { width: 640, height: 360, videoKbps: 600 },
  m: { width: 320, height: 180, videoKbps: 300 },
  l: { width: 160, height: 90, videoKbps: 150 },
};

/** A clip of `seconds` for each layer of `shapes`, by rid. */
export async function makeLayerClips(
  shapes: Record<string, LayerShape>,
  seconds: number,
): Promise<Record<string, Clip>> {
  const rids = Object.keys(shapes);
  const made = await Promise.all(rids.map((rid) => makeH264OpusClip({ seconds, ...shapes[rid] })));
  return Object.fromEntries(rids.map((rid, i) => [rid, made[i]]));
}

/**
 * Has SFU participant `pub` offer one sendonly video whose layers are the clips' rids, join
 * `room` (pin "1") and, once its peer is connected, send the clips.
 */
export async function joinAsSimulcastPublisher(
  pub: SfuClient,
  room: string,
  clips: Record<string, Clip>,
): Promise<SimulcastPublisher> {
  const tx = pub.pc.addTransceiver("video", {
    direction: "sendonly",
    sendEncodings: Object.keys(clips).map((rid) => ({ rid })),
  });
  await pub.join(room, "1");
  await pub.until(() => pub.pc.connectionState === "connected", "publisher connected");
  return startSimulcastPublisher(tx, clips);
}

/** A running publisher. */
export interface SimulcastPublisher {
  /** Stops sending. */
  stop(): void;
}

/** Sends `clips` (by rid) as the layers of `tx`, whose sendEncodings name those rids. */
export function startSimulcastPublisher(
  tx: RTCRtpTransceiver,
  clips: Record<string, Clip>,
): SimulcastPublisher {
  const ridId = tx.headerExtensions.find((e) => e.uri === useSdesRTPStreamId().uri)!.id;
  const payloadType = tx.codecs[0].payloadType;
  const layers = Object.entries(clips).map(([rid, clip], i) => {
    const track = clip.tracks.find((t) => t.kind === "video")!;
    const config = track.config;
    return {
      frames: clip.frames.filter((f) => f.trackId === track.id),
      packetizer: new H264Packetizer(() =>
        config?.codec === "H264" ? [...config.sps, ...config.pps] : []
      ),
      header: new RtpHeader({
        ssrc: 0x2000 + i,
        payloadType,
        sequenceNumber: 1000 * (i + 1),
        extension: true,
        extensions: [{ id: ridId, payload: Buffer.from(rid) }],
      }),
      // Layers have unrelated timestamp bases, as in a browser.
      tsBase: 0x3fff0000 * i,
    };
  });
  const frameCount = Math.min(...layers.map((l) => l.frames.length));
  const pts = layers[0].frames;
  // One frame interval after the last frame, the next loop starts.
  const loopTicks = pts[frameCount - 1].pts - pts[0].pts + (pts[1].pts - pts[0].pts);
  const startMs = performance.now();
  let next = 0;
  const send = (layer: typeof layers[number], frame: MediaFrame, loop: number) => {
    layer.packetizer.packetize(frame, (payload, marker) => {
      const h = layer.header;
      h.marker = marker;
      h.timestamp = (frame.pts + loop * loopTicks + layer.tsBase) >>> 0;
      tx.sender.dtlsTransport.sendRtp(Buffer.from(payload), h).catch(() => {});
      h.sequenceNumber = (h.sequenceNumber + 1) & 0xffff;
    });
  };
  const timer = setInterval(() => {
    while (next * simulcastFrameMs <= performance.now() - startMs) {
      const loop = Math.floor(next / frameCount);
      for (const layer of layers) send(layer, layer.frames[next % frameCount], loop);
      next++;
    }
  }, 10);
  return { stop: () => clearInterval(timer) };
}
