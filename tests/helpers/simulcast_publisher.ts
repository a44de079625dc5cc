/**
 * A werift simulcast publisher for tests: one sendonly video transceiver whose layers are
 * H.264 clips (made by makeH264OpusClip) or VP8 clips (makeVp8LayerClips) of different sizes,
 * each packetized and sent under its own SSRC with its rid header extension, 25 frames a
 * second, the clips looped (timestamps keep growing) until stopped. VP8 packets carry the
 * descriptor a browser writes (15-bit picture ID and TL0PICIDX, each layer its own count).
 */
import { Buffer } from "node:buffer";
import { type RTCRtpTransceiver, RtpHeader, useSdesRTPStreamId } from "werift";
import type { MediaFrame } from "../../media/frame.ts";
import { IvfReader } from "../../media/formats/ivf.ts";
import { run } from "../../media/formats/test_fixtures.ts";
import { H264Packetizer } from "../../media/rtp/h264_packetizer.ts";
import {
  type Packetizer,
  type PacketSink,
  rtpMaxPayloadBytes,
} from "../../media/rtp/packetizer.ts";
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
 * A VP8 clip (ffmpeg's libvpx, testsrc2, 25 fps, a keyframe a second, no audio) of `seconds`
 * for each layer of `shapes`, by rid.
 */
export async function makeVp8LayerClips(
  shapes: Record<string, LayerShape>,
  seconds: number,
): Promise<Record<string, Clip>> {
  const rids = Object.keys(shapes);
  const made = await Promise.all(rids.map((rid) => makeVp8Clip(shapes[rid], seconds)));
  return Object.fromEntries(rids.map((rid, i) => [rid, made[i]]));
}

async function makeVp8Clip(shape: LayerShape, seconds: number): Promise<Clip> {
  const dir = await Deno.makeTempDir({ prefix: "vp8-clip-" });
  try {
    const path = `${dir}/clip.ivf`;
    await run("ffmpeg", [
      ...[
        "-v",
        "error",
        "-f",
        "lavfi",
        "-i",
        `testsrc2=size=${shape.width}x${shape.height}:rate=25`,
      ],
      ...["-t", String(seconds), "-c:v", "libvpx", "-deadline", "realtime", "-cpu-used", "8"],
      ...["-g", "25", "-b:v", `${shape.videoKbps}k`, "-threads", "1", "-f", "ivf", path],
    ]);
    const reader = new IvfReader();
    const frames = reader.push(await Deno.readFile(path));
    reader.end();
    const { timeBaseNum, timeBaseDen } = reader.header!;
    const track = {
      id: 0,
      kind: "video" as const,
      codec: "VP8" as const,
      clockRate: 90_000,
      width: shape.width,
      height: shape.height,
    };
    return {
      tracks: [track],
      frames: frames.map((f, i) => {
        const pts = Math.round(f.timestamp * 90_000 * timeBaseNum / timeBaseDen);
        // A VP8 keyframe has the frame tag's lowest bit clear (RFC 6386 §9.1).
        return {
          trackId: 0,
          codec: "VP8",
          pts,
          dts: pts,
          keyframe: i === 0 || (f.data[0] & 1) === 0,
          data: f.data,
        };
      }),
      seconds,
    };
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

/**
 * VP8 as a browser packetizes it (RFC 7741): X, I (15-bit picture ID, one per frame) and L
 * (TL0PICIDX, one per frame: every frame is on temporal layer 0) in every packet's descriptor.
 */
class BrowserVp8Packetizer implements Packetizer {
  #pictureId: number;
  #tl0PicIdx: number;

  constructor(start: number) {
    this.#pictureId = start & 0x7fff;
    this.#tl0PicIdx = start & 0xff;
  }

  packetize(frame: MediaFrame, emit: PacketSink): void {
    const descriptorBytes = 5;
    const piece = rtpMaxPayloadBytes - descriptorBytes;
    const data = frame.data;
    for (let pos = 0; pos < data.length; pos += piece) {
      const end = Math.min(pos + piece, data.length);
      const payload = new Uint8Array(descriptorBytes + end - pos);
      payload[0] = 0x80 | (pos === 0 ? 0x10 : 0);
      payload[1] = 0xc0;
      payload[2] = 0x80 | (this.#pictureId >> 8);
      payload[3] = this.#pictureId & 0xff;
      payload[4] = this.#tl0PicIdx;
      payload.set(data.subarray(pos, end), descriptorBytes);
      emit(payload, end === data.length, 0);
    }
    this.#pictureId = (this.#pictureId + 1) & 0x7fff;
    this.#tl0PicIdx = (this.#tl0PicIdx + 1) & 0xff;
  }
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
    const packetizer: Packetizer = track.codec === "VP8"
      ? new BrowserVp8Packetizer(1000 * (i + 1) + 7)
      : new H264Packetizer(() => config?.codec === "H264" ? [...config.sps, ...config.pps] : []);
    return {
      frames: clip.frames.filter((f) => f.trackId === track.id),
      packetizer,
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
