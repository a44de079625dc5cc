import assert from "node:assert/strict";
import { buildAsc } from "../codecs/aac.ts";
import type { Track } from "../frame.ts";
import { parseSdp, writeSdp } from "../formats/sdp/sdp.ts";
import { sdpTrack } from "./sdp_track.ts";
import { trackMedia } from "./track_sdp.ts";
import { aacTrack, h264TrackOf } from "../../tests/helpers/media_tracks.ts";

const sps = Uint8Array.of(0x67, 0x42, 0xc0, 0x1e, 0xda, 0x02, 0x80, 0xbf, 0xe5, 0xc0, 0x44);
const pps = Uint8Array.of(0x68, 0xce, 0x3c, 0x80);

/** Writes the tracks as SDP, parses it and reads each section back as the RTSP pull does. */
function readBack(tracks: Track[]) {
  const media = tracks.map((t) => trackMedia(t, `trackID=${t.id}`)!);
  const text = writeSdp({
    version: 0,
    origin: "- 1 1 IN IP4 127.0.0.1",
    sessionName: "s",
    timing: ["0 0"],
    bandwidths: [],
    other: [],
    attributes: [],
    media,
  });
  return { text, back: parseSdp(text).media.map((m, i) => sdpTrack(m, i)!) };
}

Deno.test("track SDP: H.264 + AAC + PCMU sections are read back with their configuration", () => {
  const asc = buildAsc(2, 48000, 2);
  const { text, back } = readBack([
    h264TrackOf(sps, pps),
    aacTrack(2),
    { id: 2, kind: "audio", codec: "PCMU", clockRate: 8000, sampleRate: 8000, channels: 1 },
  ]);
  assert.match(
    text,
    /a=fmtp:96 packetization-mode=1;profile-level-id=42c01e;sprop-parameter-sets=/,
  );
  assert.match(text, /a=control:trackID=1/);
  assert.deepEqual(back.map((t) => [t.payloadType, t.track.codec, t.track.clockRate]), [
    [96, "H264", 90000],
    [97, "AAC", 48000],
    [0, "PCMU", 8000],
  ]);
  const h264 = back[0].track.config;
  assert.ok(h264?.codec === "H264");
  assert.deepEqual([...h264.sps[0]], [...sps]);
  const aac = back[1].track.config;
  assert.ok(aac?.codec === "AAC");
  assert.deepEqual([...aac.asc], [...asc]);
  assert.equal(back[1].track.channels, 2);
});

Deno.test("track SDP: H.265 parameter sets and Opus at 48 kHz", () => {
  const vps = Uint8Array.of(0x40, 0x01, 0x0c);
  const hsps = Uint8Array.of(0x42, 0x01, 0x01);
  const hpps = Uint8Array.of(0x44, 0x01, 0xc1);
  const { back } = readBack([
    {
      id: 0,
      kind: "video",
      codec: "H265",
      clockRate: 90000,
      config: { codec: "H265", vps: [vps], sps: [hsps], pps: [hpps] },
    },
    { id: 1, kind: "audio", codec: "OPUS", clockRate: 48000, channels: 2 },
  ]);
  const config = back[0].track.config;
  assert.ok(config?.codec === "H265");
  assert.deepEqual([...config.vps[0]], [...vps]);
  assert.deepEqual(back.map((t) => t.track.codec), ["H265", "OPUS"]);
  assert.equal(back[1].track.channels, 2);
});
