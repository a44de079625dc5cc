/**
 * Makes the seed corpora of fuzz/corpus/ from real captures, once (the files are committed):
 * small media files written by ffmpeg (MP4, MPEG-TS, FLV), an RTSP session with the
 * GStreamer camera of the tests (OPTIONS/DESCRIBE/SETUP/PLAY answers, SDP, interleaved
 * H.264/H.265/AAC RTP and RTCP), the RTMP chunk stream ffmpeg sends when it publishes (tapped
 * between ffmpeg and nginx-rtmp), the Web SDK signalling frames of a test client, and an SRT
 * session between ffmpeg and srt-live-transmit.
 * Run: deno run -A fuzz/make_corpus.ts [media|png|rtsp|rtmp|signaling|srt ...]
 */
import { startGstRtsp } from "../tests/helpers/gst_rtsp.ts";
import { startNginxRtmp } from "../tests/helpers/nginx_rtmp.ts";
import { freePort } from "../tests/helpers/process.ts";
import { sdkConnectionObject } from "../tests/helpers/wcs_client.ts";
import { encodePacketList } from "./packet_list.ts";

const corpus = new URL("./corpus/", import.meta.url).pathname;
const enc = new TextEncoder();

async function write(target: string, name: string, data: Uint8Array | string): Promise<void> {
  await Deno.mkdir(`${corpus}${target}`, { recursive: true });
  const bytes = typeof data === "string" ? enc.encode(data) : data;
  await Deno.writeFile(`${corpus}${target}/${name}`, bytes);
  console.log(`${target}/${name}: ${bytes.length} bytes`);
}

async function ffmpeg(args: string[]): Promise<void> {
  const out = await new Deno.Command("ffmpeg", { args: ["-v", "error", "-y", ...args] }).output();
  if (!out.success) throw new Error(new TextDecoder().decode(out.stderr));
}

/** A short, tiny H.264 + AAC clip, encoded into `format` at `path`. */
async function clip(path: string, seconds: number, extra: string[] = []): Promise<Uint8Array> {
  await ffmpeg([
    "-f",
    "lavfi",
    "-i",
    "testsrc2=size=96x64:rate=10",
    "-f",
    "lavfi",
    "-i",
    "sine=frequency=440:sample_rate=16000",
    "-t",
    String(seconds),
    "-c:v",
    "libx264",
    "-preset",
    "ultrafast",
    "-g",
    "5",
    "-bf",
    "2",
    "-pix_fmt",
    "yuv420p",
    "-c:a",
    "aac",
    "-b:a",
    "16k",
    "-ac",
    "1",
    ...extra,
    path,
  ]);
  return await Deno.readFile(path);
}

async function mediaFiles(dir: string): Promise<void> {
  await write("mp4", "h264_aac.mp4", await clip(`${dir}/a.mp4`, 1));
  await write(
    "mp4",
    "h264_aac_faststart.mp4",
    await clip(`${dir}/b.mp4`, 0.5, ["-movflags", "+faststart"]),
  );
  await write("mpegts", "h264_aac.mpegts", await clip(`${dir}/a.ts`, 0.6));
  await write("flv", "h264_aac.flv", await clip(`${dir}/a.flv`, 0.6));
}

/**
 * PNGs ffmpeg writes, most of them tiny so that mutations often land in headers and CRCs:
 * RGBA, 1-bit gray, 16-bit gray+alpha Adam7, 16-bit gray, Adam7 RGBA, a palette with tRNS;
 * and some uncompressed (zlib level 0), whose scanlines a mutation can reach (the fuzz
 * target writes their Adler-32 again).
 */
async function pngFiles(dir: string): Promise<void> {
  const alpha = (size: string) =>
    `testsrc2=size=${size}:d=0.04,format=rgba,` +
    "geq=r='r(X,Y)':g='g(X,Y)':b='b(X,Y)':a='mod(X*7+Y*13,256)'";
  const palette = [
    "-vf",
    "split[a][b];[a]palettegen=reserve_transparent=1:max_colors=16[p];" +
    "[b][p]paletteuse=alpha_threshold=128",
  ];
  const stored = ["-compression_level", "0", "-pred", "mixed"];
  const pictures: [string, string, string[]][] = [
    ["tiny_rgba.png", "4x4", ["-pix_fmt", "rgba"]],
    ["tiny_mono.png", "8x2", ["-pix_fmt", "monob"]],
    ["tiny_ya16_adam7.png", "5x3", ["-pix_fmt", "ya16be", "-flags", "+ildct"]],
    ["gray16.png", "24x16", ["-pix_fmt", "gray16be", "-pred", "paeth"]],
    ["rgba_adam7.png", "24x16", ["-pix_fmt", "rgba", "-pred", "mixed", "-flags", "+ildct"]],
    ["pal_trns.png", "12x8", palette],
    ["stored_rgba.png", "4x4", [...stored, "-pix_fmt", "rgba"]],
    ["stored_pal_trns.png", "12x8", [...stored, ...palette]],
    ["stored_ya16_adam7.png", "5x3", [...stored, "-pix_fmt", "ya16be", "-flags", "+ildct"]],
    ["stored_mono_adam7.png", "9x3", [...stored, "-pix_fmt", "monob", "-flags", "+ildct"]],
    ["stored_rgb48.png", "6x4", [...stored, "-pix_fmt", "rgb48be"]],
  ];
  for (const [name, size, args] of pictures) {
    await ffmpeg(["-f", "lavfi", "-i", alpha(size), "-frames:v", "1", ...args, `${dir}/${name}`]);
    await write("png", name, await Deno.readFile(`${dir}/${name}`));
  }
}

/** Reads from `conn` until `done(bytes)` or `ms` pass; returns every byte read. */
async function readUntil(
  conn: Deno.Conn,
  ms: number,
  done: (bytes: Uint8Array) => boolean,
): Promise<Uint8Array> {
  const parts: Uint8Array[] = [];
  let total = 0;
  const deadline = Date.now() + ms;
  const buf = new Uint8Array(65536);
  while (Date.now() < deadline) {
    const timer = new Promise<null>((r) => setTimeout(() => r(null), deadline - Date.now()));
    const read = conn.read(buf);
    const n = await Promise.race([read, timer]);
    if (n === null) break;
    parts.push(buf.slice(0, n));
    total += n;
    const all = concat(parts, total);
    if (done(all)) return all;
  }
  return concat(parts, total);
}

function concat(parts: Uint8Array[], total: number): Uint8Array {
  const out = new Uint8Array(total);
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

const text = (b: Uint8Array) => new TextDecoder().decode(b);

/** One RTSP session with the camera over TCP; the answers and `mediaMs` of interleaved data. */
async function rtspSession(video: "baseline" | "h265-bframes", mediaMs: number) {
  const camera = await startGstRtsp({ video });
  const conn = await Deno.connect({ hostname: "127.0.0.1", port: camera.port });
  try {
    const answers: string[] = [];
    let cseq = 0;
    let session = "";
    const request = async (method: string, url: string, headers: string[] = []) => {
      const lines = [`${method} ${url} RTSP/1.0`, `CSeq: ${++cseq}`, ...headers];
      if (session) lines.push(`Session: ${session}`);
      await conn.write(enc.encode(lines.join("\r\n") + "\r\n\r\n"));
      const answer = await readUntil(conn, 5000, (b) => {
        const t = text(b);
        const end = t.indexOf("\r\n\r\n");
        if (end < 0) return false;
        const length = Number(/Content-Length:\s*(\d+)/i.exec(t)?.[1] ?? 0);
        return b.length >= end + 4 + length;
      });
      answers.push(text(answer));
      return text(answer);
    };
    await request("OPTIONS", camera.url);
    const describe = await request("DESCRIBE", camera.url, ["Accept: application/sdp"]);
    const sdp = describe.slice(describe.indexOf("\r\n\r\n") + 4);
    const controls = [...sdp.matchAll(/a=control:(\S+)/g)].map((m) => m[1])
      .filter((c) => c !== "*");
    for (const [i, control] of controls.entries()) {
      const url = control.startsWith("rtsp://") ? control : `${camera.url}/${control}`;
      const setup = await request("SETUP", url, [
        `Transport: RTP/AVP/TCP;unicast;interleaved=${2 * i}-${2 * i + 1}`,
      ]);
      session ||= /Session:\s*([^;\r\n]+)/i.exec(setup)?.[1] ?? "";
    }
    await request("PLAY", camera.url, ["Range: npt=0.000-"]);
    const media = await readUntil(conn, mediaMs, () => false);
    return { answers, sdp, media };
  } finally {
    conn.close();
    await camera.stop();
  }
}

/** Interleaved frames `$ channel length payload` of `data`, by channel (a cut last one left out). */
function interleaved(data: Uint8Array): Map<number, Uint8Array[]> {
  const out = new Map<number, Uint8Array[]>();
  let at = 0;
  while (at + 4 <= data.length && data[at] === 0x24) {
    const length = (data[at + 2] << 8) | data[at + 3];
    if (at + 4 + length > data.length) break;
    const list = out.get(data[at + 1]) ?? [];
    list.push(data.slice(at + 4, at + 4 + length));
    out.set(data[at + 1], list);
    at += 4 + length;
  }
  return out;
}

/** Keeps whole packets from the start up to `maxBytes` in all. */
function firstPackets(packets: Uint8Array[], maxBytes: number): Uint8Array[] {
  const kept: Uint8Array[] = [];
  let total = 0;
  for (const p of packets) {
    if (total + p.length > maxBytes) break;
    kept.push(p);
    total += p.length;
  }
  return kept;
}

async function rtspCaptures(): Promise<void> {
  // GStreamer sends its first sender reports within about five seconds.
  const h264 = await rtspSession("baseline", 7000);
  for (const [i, answer] of h264.answers.entries()) {
    await write("rtsp", `answer_${i}.txt`, answer);
  }
  await write("rtsp", "interleaved.bin", h264.media.slice(0, 6000));
  await write("sdp", "camera_h264_aac.sdp", h264.sdp);
  const channels = interleaved(h264.media);
  // SETUP gave the i-th m-line the channels 2i (RTP) and 2i+1 (RTCP).
  const kinds = [...h264.sdp.matchAll(/^m=(\w+)/gm)].map((m) => m[1]);
  const video = 2 * kinds.indexOf("video");
  const audio = 2 * kinds.indexOf("audio");
  await write(
    "rtp_h264",
    "camera.pkts",
    encodePacketList(firstPackets(channels.get(video) ?? [], 12000)),
  );
  await write(
    "rtp_aac",
    "camera.pkts",
    encodePacketList(firstPackets(channels.get(audio) ?? [], 3000)),
  );
  const rtcp = [...(channels.get(1) ?? []), ...(channels.get(3) ?? [])];
  if (rtcp.length === 0) throw new Error("no RTCP packet came from the camera");
  await write("rtcp", "camera.pkts", encodePacketList(firstPackets(rtcp, 2000)));

  const h265 = await rtspSession("h265-bframes", 1500);
  await write("sdp", "camera_h265_aac.sdp", h265.sdp);
  const h265Kinds = [...h265.sdp.matchAll(/^m=(\w+)/gm)].map((m) => m[1]);
  const h265Channels = interleaved(h265.media);
  const h265Video = h265Channels.get(2 * h265Kinds.indexOf("video")) ?? [];
  await write("rtp_h265", "camera.pkts", encodePacketList(firstPackets(h265Video, 12000)));
}

/** The bytes ffmpeg sends when it publishes over RTMP, tapped between it and nginx-rtmp. */
async function rtmpCapture(dir: string): Promise<void> {
  const nginx = await startNginxRtmp();
  const tapPort = freePort();
  const listener = Deno.listen({ hostname: "127.0.0.1", port: tapPort });
  const captured: Uint8Array[] = [];
  let capturedBytes = 0;
  // A tee of the client's bytes: read, record, forward.
  const session = (async () => {
    const client = await listener.accept();
    const upstream = await Deno.connect({ hostname: "127.0.0.1", port: nginx.port });
    const back = upstream.readable.pipeTo(client.writable).catch(() => {});
    const buf = new Uint8Array(65536);
    for (;;) {
      const n = await client.read(buf).catch(() => null);
      if (n === null) break;
      if (capturedBytes < 200_000) {
        captured.push(buf.slice(0, n));
        capturedBytes += n;
      }
      await upstream.write(buf.subarray(0, n)).catch(() => {});
    }
    try {
      upstream.close();
    } catch { /* closed */ }
    await back;
  })();
  await ffmpeg([
    "-re",
    "-i",
    `${dir}/a.mp4`,
    "-c",
    "copy",
    "-f",
    "flv",
    `rtmp://127.0.0.1:${tapPort}/live/fuzz`,
  ]);
  await session;
  listener.close();
  await nginx.stop();
  const all = concat(captured, capturedBytes);
  // C0 + C1 + C2 of the handshake come first; the chunk stream follows.
  const chunks = all.slice(1 + 1536 + 1536);
  await write("rtmp_chunks", "ffmpeg_publish.bin", chunks.slice(0, 16000));
  await write("rtmp_handshake", "c0c1.bin", all.slice(0, 1537));
}

/** Signalling frames as the Web SDK sends them. */
async function signallingFrames(): Promise<void> {
  const { RTCPeerConnection } = await import("werift");
  const pc = new RTCPeerConnection({ iceServers: [] });
  pc.addTransceiver("video", { direction: "sendonly" });
  pc.addTransceiver("audio", { direction: "sendonly" });
  const offer = await pc.createOffer();
  await pc.close();
  const stream = {
    mediaSessionId: "f2a1b3c4-0000-4000-8000-000000000001",
    name: "cam",
    published: true,
    hasVideo: true,
    hasAudio: true,
    status: "PENDING",
    record: false,
    width: 640,
    height: 480,
    bitrate: 0,
    minBitrate: 0,
    maxBitrate: 0,
    quality: 0,
    mediaProvider: "WebRTC",
    sdp: offer.sdp,
    custom: {},
  };
  const frames: [string, unknown[]][] = [
    ["connection", [sdkConnectionObject()]],
    ["publishStream", [stream]],
    ["playStream", [{ ...stream, published: false, name: "cam" }]],
    ["sendData", [{ operationId: "op-1", payload: { text: "hi" } }]],
    ["sendStreamEvent", [{ mediaSessionId: stream.mediaSessionId, type: "videoMuted" }]],
    ["stopStream", [{ mediaSessionId: stream.mediaSessionId, name: "cam" }]],
    ["pong", [null]],
  ];
  for (const [message, data] of frames) {
    await write("signaling", `${message}.json`, JSON.stringify({ message, data }));
  }
}

/**
 * SRT datagrams both ways between ffmpeg (caller, encrypted, with a stream id) and
 * srt-live-transmit (listener), through a relay dropping 5% of data packets so NAKs and
 * retransmissions are in: handshakes with HSREQ/KMREQ/SID, data, ACK, ACKACK, NAK,
 * keepalive, shutdown. One packet list, capped to the first datagrams of each kind.
 */
async function srtCapture(dir: string): Promise<void> {
  const { LossRelay } = await import("../media/protocols/srt/loss_relay.ts");
  const ts = `${dir}/srt.ts`;
  await clip(ts, 2, ["-f", "mpegts"]);
  const port = freePort();
  const listener = new Deno.Command("srt-live-transmit", {
    args: [`srt://127.0.0.1:${port}?mode=listener&passphrase=fuzzcorpus1`, "file://con"],
    stdout: "null",
    stderr: "null",
  }).spawn();
  await new Promise((resolve) => setTimeout(resolve, 300));
  const perKind = new Map<number, number>();
  const packets: Uint8Array[] = [];
  const relay = await LossRelay.open({
    targetPort: port,
    dropRatio: 0.05,
    onDatagram: (_fromCaller, data) => {
      const kind = data[0] & 0x80 ? ((data[0] & 0x7f) << 8) | data[1] : -1;
      const seen = perKind.get(kind) ?? 0;
      if (seen >= 8) return;
      perKind.set(kind, seen + 1);
      packets.push(data.slice());
    },
  });
  await ffmpeg([
    ...["-re", "-i", ts, "-c", "copy", "-f", "mpegts"],
    `srt://127.0.0.1:${relay.port}?mode=caller&passphrase=fuzzcorpus1&streamid=#!::r=cam,m=publish`,
  ]);
  await new Promise((resolve) => setTimeout(resolve, 300));
  await relay.close();
  listener.kill("SIGTERM");
  await listener.status;
  await write("srt", "session.bin", encodePacketList(packets));
}

/** Corpora to make: all, or those named on the command line (e.g. `srt`). */
const only = new Set(Deno.args);
const wanted = (name: string) => only.size === 0 || only.has(name);
const dir = await Deno.makeTempDir({ prefix: "fuzz-corpus-" });
try {
  if (wanted("media")) await mediaFiles(dir);
  if (wanted("png")) await pngFiles(dir);
  if (wanted("rtsp")) await rtspCaptures();
  if (wanted("rtmp")) await rtmpCapture(dir);
  if (wanted("signaling")) await signallingFrames();
  if (wanted("srt")) await srtCapture(dir);
} finally {
  await Deno.remove(dir, { recursive: true });
}
