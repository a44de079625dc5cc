/**
 * Interop proof of the SRT encryption against libsrt (ffmpeg's srt protocol): a raw UDP
 * socket plays just enough of the handshake (induction, conclusion with HSREQ/KMREQ) for
 * libsrt to exchange keys and send or accept encrypted data. The packet layouts here are
 * the minimum the proof needs; the connection code has its own.
 */
import assert from "node:assert/strict";
import dgram from "node:dgram";
import { SrtCipher, SrtCryptoError } from "./crypto.ts";
import { KeyMaterial, parseKeyMaterial } from "./key_material.ts";

const HANDSHAKE_TYPE_INDUCTION = 1;
const HANDSHAKE_TYPE_CONCLUSION = 0xffffffff;
const SRT_MAGIC = 0x4a17;
/** Handshake type of libsrt's rejection for a wrong passphrase (1000 + SRT_REJ_BADSECRET). */
const SRT_REJ_BADSECRET = 1010;
const EXT_HSREQ = 1;
const EXT_HSRSP = 2;
const EXT_KMREQ = 3;
const EXT_KMRSP = 4;
const CONTROL_HANDSHAKE = 0;
const CONTROL_ACK = 2;
const CONTROL_SHUTDOWN = 5;
const ACK_EVERY_PACKETS = 32;
const CONTROL_USER_DEFINED = 0x7fff;
/** First word of a KMREQ user-defined control packet (subtype 3): a key refresh. */
const CONTROL_KMREQ = 0xffff0003;
/** First word of a KMRSP user-defined control packet (subtype 4). */
const CONTROL_KMRSP = 0xffff0004;
/** Where our sender refreshes, switches and retires keys in its 2 s stream, in packets. */
const REFRESH_AT_PACKET = 10;
const SWITCH_AT_PACKET = 20;
const RETIRE_AT_PACKET = 35;
/** TSBPD, TLPKTDROP, HAICRYPT, NAKREPORT, REXMITFLG: what libsrt 1.5 live mode offers. */
const SRT_FLAGS = 0x3f;
const SRT_VERSION = 0x00010501;
const LATENCY_MS = 120;
const TS_PACKET_BYTES = 188;
const PAYLOAD_BYTES = 7 * TS_PACKET_BYTES;

const hasSrt = (() => {
  try {
    const out = new Deno.Command("ffmpeg", { args: ["-hide_banner", "-protocols"] }).outputSync();
    return new TextDecoder().decode(out.stdout).includes("  srt\n");
  } catch {
    return false;
  }
})();

interface Handshake {
  version: number;
  encryption: number;
  extensionField: number;
  isn: number;
  type: number;
  socketId: number;
  cookie: number;
  extensions: Map<number, Uint8Array>;
}

function controlPacket(
  type: number,
  destSocketId: number,
  cif: Uint8Array,
  startMs: number,
  subtype = 0,
  typeInfo = 0,
) {
  const out = new Uint8Array(16 + cif.length);
  const view = new DataView(out.buffer);
  view.setUint32(0, (((0x8000 | type) << 16) | subtype) >>> 0);
  view.setUint32(4, typeInfo);
  view.setUint32(8, Math.round((performance.now() - startMs) * 1000) >>> 0);
  view.setUint32(12, destSocketId);
  out.set(cif, 16);
  return out;
}

function handshakeCif(hs: Omit<Handshake, "extensions">, extensions: [number, Uint8Array][]) {
  const extBytes = extensions.reduce((n, [, body]) => n + 4 + body.length, 0);
  const out = new Uint8Array(48 + extBytes);
  const view = new DataView(out.buffer);
  view.setUint32(0, hs.version);
  view.setUint16(4, hs.encryption);
  view.setUint16(6, hs.extensionField);
  view.setUint32(8, hs.isn);
  view.setUint32(12, 1500);
  view.setUint32(16, 8192);
  view.setUint32(20, hs.type);
  view.setUint32(24, hs.socketId);
  view.setUint32(28, hs.cookie);
  view.setUint32(32, 0x0100007f); // 127.0.0.1 as libsrt writes it
  let at = 48;
  for (const [type, body] of extensions) {
    view.setUint16(at, type);
    view.setUint16(at + 2, body.length / 4);
    out.set(body, at + 4);
    at += 4 + body.length;
  }
  return out;
}

function parseHandshake(packet: Uint8Array): Handshake | undefined {
  const view = new DataView(packet.buffer, packet.byteOffset, packet.byteLength);
  if (packet.length < 64 || view.getUint32(0) !== 0x80000000) return undefined;
  const extensions = new Map<number, Uint8Array>();
  for (let at = 64; at + 4 <= packet.length;) {
    const bytes = view.getUint16(at + 2) * 4;
    extensions.set(view.getUint16(at), packet.slice(at + 4, at + 4 + bytes));
    at += 4 + bytes;
  }
  return {
    version: view.getUint32(16),
    encryption: view.getUint16(20),
    extensionField: view.getUint16(22),
    isn: view.getUint32(24),
    type: view.getUint32(36),
    socketId: view.getUint32(40),
    cookie: view.getUint32(44),
    extensions,
  };
}

function words(...values: number[]): Uint8Array {
  const out = new Uint8Array(values.length * 4);
  values.forEach((v, i) => new DataView(out.buffer).setUint32(i * 4, v >>> 0));
  return out;
}

async function bindSocket(): Promise<dgram.Socket> {
  const socket = dgram.createSocket("udp4");
  await new Promise<void>((resolve) => socket.bind(0, "127.0.0.1", () => resolve()));
  return socket;
}

function ffmpeg(args: string[]): Deno.ChildProcess {
  return new Deno.Command("ffmpeg", {
    args: ["-hide_banner", "-nostdin", "-v", "error", ...args],
    stdin: "null",
    stdout: "null",
    stderr: "piped",
  }).spawn();
}

async function stop(child: Deno.ChildProcess): Promise<string> {
  try {
    child.kill("SIGKILL");
  } catch {
    // Already exited.
  }
  const { stderr } = await child.output();
  return new TextDecoder().decode(stderr);
}

function assertTransportStream(payload: Uint8Array, label: string): void {
  assert.equal(payload.length % TS_PACKET_BYTES, 0, label);
  for (let at = 0; at < payload.length; at += TS_PACKET_BYTES) {
    assert.equal(payload[at], 0x47, `${label}: sync byte at ${at}`);
  }
}

interface CallerRun {
  keyLength: 16 | 24 | 32;
  passphrase: string;
  /** Data packets to collect before hanging up. */
  packets: number;
  /** libsrt's key refresh period and pre-announce, in packets. */
  refresh?: { rate: number; preannounce: number };
}

/** Answers an ffmpeg caller's handshake as a listener and collects decrypted data packets. */
async function receiveFromFfmpeg(o: CallerRun) {
  const socket = await bindSocket();
  const port = socket.address().port;
  const startMs = performance.now();
  const ourSocketId = 0x2a2a2a2a;
  const cookie = 0x5eed1234;
  const decrypted: Promise<Uint8Array>[] = [];
  const raw: Uint8Array[] = [];
  const keyFlags: number[] = [];
  const refreshes: KeyMaterial[] = [];
  let peerSocketId = 0;
  let ackNumber = 0;
  let peer: { address: string; port: number } | undefined;
  // Each step (key exchange, each refresh) waits for the previous one, as packets do for it.
  let ready: Promise<SrtCipher> | undefined;
  let offered: KeyMaterial | undefined;
  let offeredEncryption = -1;
  const enough = Promise.withResolvers<void>();
  socket.on("message", (message: Uint8Array, from: { address: string; port: number }) => {
    const packet = new Uint8Array(message);
    const view = new DataView(packet.buffer, packet.byteOffset, packet.byteLength);
    peer = from;
    const reply = (bytes: Uint8Array) => socket.send(bytes, from.port, from.address);
    const hs = parseHandshake(packet);
    if (hs?.type === HANDSHAKE_TYPE_INDUCTION) {
      peerSocketId = hs.socketId;
      const cif = handshakeCif({
        ...hs,
        version: 5,
        extensionField: SRT_MAGIC,
        socketId: ourSocketId,
        cookie,
      }, []);
      reply(controlPacket(CONTROL_HANDSHAKE, peerSocketId, cif, startMs));
    } else if (hs?.type === HANDSHAKE_TYPE_CONCLUSION && !ready) {
      offeredEncryption = hs.encryption;
      offered = parseKeyMaterial(hs.extensions.get(EXT_KMREQ)!);
      ready = SrtCipher.fromKeyMaterial(offered, o.passphrase);
      ready.then((c) => {
        const hsrsp = words(SRT_VERSION, SRT_FLAGS, (LATENCY_MS << 16) | LATENCY_MS);
        const cif = handshakeCif({ ...hs, extensionField: 3, socketId: ourSocketId, cookie }, [
          [EXT_HSRSP, hsrsp],
          [EXT_KMRSP, c.keyMaterial()],
        ]);
        reply(controlPacket(CONTROL_HANDSHAKE, peerSocketId, cif, startMs));
      }, () => enough.resolve());
    } else if (view.getUint32(0) === CONTROL_KMREQ && ready) {
      const km = parseKeyMaterial(packet.slice(16));
      refreshes.push(km);
      ready = ready.then(async (c) => {
        await c.updateKeyMaterial(km);
        reply(controlPacket(CONTROL_USER_DEFINED, peerSocketId, c.keyMaterial(), startMs, 4));
        return c;
      });
    } else if (!(packet[0] & 0x80) && ready && packet.length > 16) {
      const seq = view.getUint32(0);
      const kk = ((view.getUint32(4) >>> 27) & 3) as 1 | 2;
      const payload = packet.slice(16);
      raw.push(payload);
      keyFlags.push(kk);
      decrypted.push(ready.then((c) => c.decrypt(seq, kk, payload)));
      // libsrt regenerates keys only while ACKs arrive (it checks on each ACK).
      if (decrypted.length % ACK_EVERY_PACKETS === 0) {
        const ack = words(seq + 1, 1000, 500, 8192, 1000, 10_000, 1_000_000);
        reply(controlPacket(CONTROL_ACK, peerSocketId, ack, startMs, 0, ++ackNumber));
      }
      if (decrypted.length >= o.packets) enough.resolve();
    }
  });
  const refresh = o.refresh
    ? `&kmrefreshrate=${o.refresh.rate}&kmpreannounce=${o.refresh.preannounce}`
    : "";
  const child = ffmpeg([
    "-f",
    "lavfi",
    "-i",
    "testsrc=size=640x480:rate=25",
    "-t",
    "120",
    "-b:v",
    "8M",
    "-c:v",
    "mpeg2video",
    "-f",
    "mpegts",
    `srt://127.0.0.1:${port}?mode=caller&passphrase=${o.passphrase}&pbkeylen=${o.keyLength}` +
    `&latency=${LATENCY_MS * 1000}${refresh}`,
  ]);
  const timer = setTimeout(() => enough.resolve(), 10_000);
  try {
    await enough.promise;
    const shutdown = controlPacket(CONTROL_SHUTDOWN, peerSocketId, new Uint8Array(4), startMs);
    if (peer) await new Promise((r) => socket.send(shutdown, peer!.port, peer!.address, r));
    return {
      offered,
      offeredEncryption,
      raw,
      keyFlags,
      refreshes,
      payloads: await Promise.all(decrypted),
      cipher: await ready?.catch((e) => e as Error),
    };
  } finally {
    clearTimeout(timer);
    await stop(child);
    socket.close();
  }
}

Deno.test({
  name:
    "libsrt interop: an ffmpeg caller's KMREQ unwraps and its packets decrypt to MPEG-TS (AES-128/192/256)",
  ignore: !hasSrt,
  async fn() {
    for (const keyLength of [16, 24, 32] as const) {
      const run = await receiveFromFfmpeg({
        keyLength,
        passphrase: "interop passphrase",
        packets: 40,
      });
      assert.equal(run.offered?.keyLength, keyLength);
      assert.equal(run.offeredEncryption, keyLength / 8, "the handshake's PBKEYLEN field");
      assert.ok(run.cipher instanceof SrtCipher, String(run.cipher));
      assert.ok(run.payloads.length >= 40, `only ${run.payloads.length} data packets`);
      run.payloads.forEach((p, i) => assertTransportStream(p, `AES-${keyLength * 8} packet ${i}`));
      assert.ok(run.raw.some((p) => p[0] !== 0x47), "the wire bytes are encrypted");
      await assert.rejects(
        SrtCipher.fromKeyMaterial(run.offered!, "interop passphrasf"),
        SrtCryptoError,
      );
    }
  },
});

Deno.test({
  name:
    "libsrt interop: keys ffmpeg refreshes mid-stream (KM with both keys, KK switching) decrypt",
  ignore: !hasSrt,
  async fn() {
    const run = await receiveFromFfmpeg({
      keyLength: 16,
      passphrase: "interop passphrase",
      packets: 600,
      refresh: { rate: 200, preannounce: 50 },
    });
    assert.ok(run.cipher instanceof SrtCipher, String(run.cipher));
    assert.ok(run.payloads.length >= 600, `only ${run.payloads.length} data packets`);
    run.payloads.forEach((p, i) => assertTransportStream(p, `packet ${i} (KK ${run.keyFlags[i]})`));
    const switches = run.keyFlags.filter((kk, i) => i > 0 && kk !== run.keyFlags[i - 1]).length;
    assert.ok(switches >= 2, `KK sequence switched ${switches} times`);
    assert.ok(run.keyFlags.includes(2), "the odd key was used");
    const kinds = new Set(run.refreshes.map((km) => km.keyBasedEncryption));
    assert.ok(kinds.has(3), "a refresh announced both keys");
  },
});

/** A UDP port that was free a moment ago on 127.0.0.1. */
async function freeUdpPort(): Promise<number> {
  const socket = await bindSocket();
  const port = socket.address().port;
  socket.close();
  return port;
}

/**
 * Calls an ffmpeg listener with our KMREQ; when it answers with a KMRSP, sends `ts`
 * encrypted in data packets and a shutdown. Returns the handshake answer.
 */
async function sendToFfmpeg(port: number, sender: SrtCipher, ts: Uint8Array, refresh: boolean) {
  const socket = await bindSocket();
  const startMs = performance.now();
  const ourSocketId = 0x1b1b1b1b;
  const isn = 1000;
  const answers: Handshake[] = [];
  const answered = Promise.withResolvers<void>();
  const kmRequests: Uint8Array[] = [];
  const kmResponses: Uint8Array[] = [];
  socket.on("message", (message: Uint8Array) => {
    const packet = new Uint8Array(message);
    if (new DataView(packet.buffer).getUint32(0) === CONTROL_KMRSP) {
      kmResponses.push(packet.slice(16));
    }
    const hs = parseHandshake(packet);
    if (!hs) return;
    answers.push(hs);
    if (hs.type === HANDSHAKE_TYPE_INDUCTION) {
      const hsreq = words(SRT_VERSION, SRT_FLAGS, (LATENCY_MS << 16) | LATENCY_MS);
      const cif = handshakeCif({
        version: 5,
        encryption: sender.keyLength / 8,
        extensionField: 3,
        isn,
        type: HANDSHAKE_TYPE_CONCLUSION,
        socketId: ourSocketId,
        cookie: hs.cookie,
      }, [[EXT_HSREQ, hsreq], [EXT_KMREQ, sender.keyMaterial()]]);
      socket.send(controlPacket(CONTROL_HANDSHAKE, 0, cif, startMs), port, "127.0.0.1");
    } else {
      answered.resolve();
    }
  });
  const induction = handshakeCif({
    version: 4,
    encryption: 0,
    extensionField: 2,
    isn,
    type: HANDSHAKE_TYPE_INDUCTION,
    socketId: ourSocketId,
    cookie: 0,
  }, []);
  // The listener may not be bound yet: repeat the induction as libsrt does.
  const repeat = setInterval(() => {
    if (answers.length === 0) {
      socket.send(controlPacket(CONTROL_HANDSHAKE, 0, induction, startMs), port, "127.0.0.1");
    }
  }, 100);
  const timeout = setTimeout(() => answered.resolve(), 10_000);
  try {
    await answered.promise;
    const conclusion = answers.find((a) => a.type !== HANDSHAKE_TYPE_INDUCTION);
    if (conclusion?.type === HANDSHAKE_TYPE_CONCLUSION) {
      let seq = isn;
      for (let at = 0; at < ts.length; at += PAYLOAD_BYTES, seq++) {
        // libsrt's order: announce both keys, switch to the new one, retire the old one.
        const index = seq - isn;
        if (refresh && (index === REFRESH_AT_PACKET || index === RETIRE_AT_PACKET)) {
          const km = index === REFRESH_AT_PACKET
            ? await sender.refresh()
            : await sender.retireOldKey();
          kmRequests.push(km);
          const kmreq = controlPacket(CONTROL_USER_DEFINED, conclusion.socketId, km, startMs, 3);
          socket.send(kmreq, port, "127.0.0.1");
        }
        if (refresh && index === SWITCH_AT_PACKET) sender.activateNewKey();
        const sealed = await sender.encrypt(seq, ts.subarray(at, at + PAYLOAD_BYTES));
        const header = words(
          seq,
          (0b11 << 30) | (sealed.kk << 27) | (seq - isn + 1),
          Math.round((performance.now() - startMs) * 1000),
          conclusion.socketId,
        );
        const packet = new Uint8Array(16 + sealed.payload.length);
        packet.set(header);
        packet.set(sealed.payload, 16);
        socket.send(packet, port, "127.0.0.1");
        await new Promise((r) => setTimeout(r, 2));
      }
      // Let TSBPD deliver the tail before closing.
      await new Promise((r) => setTimeout(r, LATENCY_MS * 3));
      const shutdown = controlPacket(
        CONTROL_SHUTDOWN,
        conclusion.socketId,
        new Uint8Array(4),
        startMs,
      );
      // Closing the socket right after send() would drop the datagram.
      await new Promise((r) => socket.send(shutdown, port, "127.0.0.1", r));
    }
    return { conclusion, kmRequests, kmResponses };
  } finally {
    clearInterval(repeat);
    clearTimeout(timeout);
    socket.close();
  }
}

async function makeTransportStream(seconds: number): Promise<Uint8Array> {
  const child = new Deno.Command("ffmpeg", {
    args: [
      "-hide_banner",
      "-v",
      "error",
      "-f",
      "lavfi",
      "-i",
      "testsrc=size=160x120:rate=25",
      "-t",
      String(seconds),
      "-c:v",
      "mpeg2video",
      "-f",
      "mpegts",
      "-",
    ],
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  });
  const out = await child.output();
  assert.ok(out.success, new TextDecoder().decode(out.stderr));
  return out.stdout;
}

async function countVideoFrames(path: string): Promise<number> {
  const out = await new Deno.Command("ffprobe", {
    args: [
      "-v",
      "error",
      "-count_frames",
      "-select_streams",
      "v:0",
      "-show_entries",
      "stream=nb_read_frames",
      "-of",
      "csv=p=0",
      path,
    ],
    stdout: "piped",
    stderr: "piped",
  }).output();
  // ffprobe prints the stream once under its program and once on its own.
  return Number(new TextDecoder().decode(out.stdout).match(/\d+/)?.[0]);
}

/** Runs an ffmpeg listener with `passphrase` recording to `out` while we call it. */
async function callFfmpegListener(
  passphrase: string,
  sender: SrtCipher,
  ts: Uint8Array,
  out: string,
  refresh = false,
) {
  const port = await freeUdpPort();
  const child = ffmpeg([
    "-i",
    `srt://127.0.0.1:${port}?mode=listener&passphrase=${passphrase}`,
    "-c",
    "copy",
    "-f",
    "mpegts",
    out,
  ]);
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    const { conclusion: answer, ...keys } = await sendToFfmpeg(port, sender, ts, refresh);
    // A refused caller never gets data through, so ffmpeg only ends on its own timeout.
    if (answer?.type !== HANDSHAKE_TYPE_CONCLUSION) return { answer, ended: false, ...keys };
    const ended = await Promise.race([
      child.status,
      new Promise((r) => timer = setTimeout(() => r(undefined), 10_000)),
    ]);
    return { answer, ended: ended !== undefined, ...keys };
  } finally {
    clearTimeout(timer);
    await stop(child);
  }
}

Deno.test({
  name: "libsrt interop: an ffmpeg listener accepts our KMREQ and records what we encrypt",
  ignore: !hasSrt,
  async fn() {
    const ts = await makeTransportStream(2);
    const dir = await Deno.makeTempDir();
    try {
      for (const keyLength of [16, 24, 32] as const) {
        const sender = await SrtCipher.create("interop passphrase", keyLength);
        const out = `${dir}/out${keyLength}.ts`;
        const { answer, ended } = await callFfmpegListener("interop passphrase", sender, ts, out);
        assert.equal(answer?.type, HANDSHAKE_TYPE_CONCLUSION, `answer ${answer?.type}`);
        assert.deepEqual(answer.extensions.get(EXT_KMRSP), sender.keyMaterial(), "KMRSP = KMREQ");
        assert.ok(ended, "ffmpeg ends on our shutdown");
        assert.equal(await countVideoFrames(out), 50, `AES-${keyLength * 8}`);
      }
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});

Deno.test({
  name: "libsrt interop: an ffmpeg listener follows our key refresh (both keys, switch, retire)",
  ignore: !hasSrt,
  async fn() {
    const ts = await makeTransportStream(2);
    const dir = await Deno.makeTempDir();
    try {
      const sender = await SrtCipher.create("interop passphrase", 16);
      const out = `${dir}/refresh.ts`;
      const run = await callFfmpegListener("interop passphrase", sender, ts, out, true);
      assert.equal(run.answer?.type, HANDSHAKE_TYPE_CONCLUSION, `answer ${run.answer?.type}`);
      assert.equal(sender.txKey, 2, "the stream ended on the odd key");
      assert.deepEqual(
        run.kmRequests.map((km) => parseKeyMaterial(km).keyBasedEncryption),
        [3, 2],
      );
      assert.deepEqual(run.kmResponses, run.kmRequests, "libsrt echoes each KMREQ");
      assert.equal(await countVideoFrames(out), 50, "every packet decrypted across the switch");
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});

Deno.test({
  name: "libsrt interop: an ffmpeg listener refuses our KMREQ under another passphrase",
  ignore: !hasSrt,
  async fn() {
    const sender = await SrtCipher.create("interop passphrase", 16);
    const dir = await Deno.makeTempDir();
    try {
      const { answer } = await callFfmpegListener(
        "another passphrase",
        sender,
        new Uint8Array(0),
        `${dir}/x.ts`,
      );
      assert.equal(answer?.type, SRT_REJ_BADSECRET, `answer ${answer?.type}`);
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});
