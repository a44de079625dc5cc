import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import dgram from "node:dgram";
import { FfiSrtpProtector } from "../../media/rtp/srtp/srtp_ffi.ts";
import { srtpTrailerBytes } from "../../media/rtp/srtp/srtp_protector.ts";
import { SrtpReceiverPool } from "./srtp_receivers.ts";

/** An RTP packet of 100 payload bytes, SRTP-protected by `protector`. */
function srtpPacket(protector: FfiSrtpProtector, sequence: number): Uint8Array {
  const packet = new Uint8Array(12 + 100 + srtpTrailerBytes);
  const view = new DataView(packet.buffer);
  packet[0] = 0x80;
  packet[1] = 96;
  view.setUint16(2, sequence);
  view.setUint32(8, 0xabcdef01);
  return packet.slice(0, protector.protect(packet, 112));
}

Deno.test("receiver pool: werift's datagrams pass back, SRTP is verified and counted in the Worker", async () => {
  const pool = new SrtpReceiverPool(1, 16);
  const socket = pool.socket("127.0.0.1");
  const sender = dgram.createSocket("udp4");
  await new Promise<void>((resolve) => sender.bind(0, "127.0.0.1", resolve));
  const senderPort = sender.address().port;
  const send = (bytes: Uint8Array) =>
    new Promise<void>((resolve) => sender.send(bytes, socket.port, "127.0.0.1", () => resolve()));
  const masterKey = randomBytes(16);
  const masterSalt = randomBytes(14);
  const protector = new FfiSrtpProtector({
    profile: "AES_CM_128_HMAC_SHA1_80",
    masterKey,
    masterSalt,
  });
  try {
    // A STUN-like datagram (first byte 0) goes to werift's listener with the sender's address.
    const stun = Uint8Array.of(0, 1, 0, 0, 0x21, 0x12, 0xa4, 0x42);
    const message = new Promise<[Uint8Array, { port: number }]>((resolve) =>
      socket.once("message", (data, info) => resolve([new Uint8Array(data), info]))
    );
    await send(stun);
    const [data, info] = await message;
    assert.deepEqual(data, stun);
    assert.equal(info.port, senderPort);

    // The fields of a connected werift peer that useKeys reads (werift's SRTP profile 1).
    const peer = {
      dtlsTransports: [{
        srtp: {
          config: {
            profile: 1,
            keys: { remoteMasterKey: masterKey, remoteMasterSalt: masterSalt },
          },
        },
        iceTransport: { connection: { nominated: { protocol: { transport: { socket } } } } },
      }],
    };
    assert.equal(pool.useKeys(peer), true);
    await pool.counts(); // the Worker has the keys once it answers
    for (const sequence of [10, 11, 13, 14]) await send(srtpPacket(protector, sequence));
    const forged = srtpPacket(protector, 15);
    forged[30] ^= 1;
    await send(forged);
    let counts = await pool.counts();
    for (let i = 0; i < 100 && counts.received + counts.failed < 5; i++) {
      await new Promise((r) => setTimeout(r, 20));
      counts = await pool.counts();
    }
    assert.deepEqual(
      { received: counts.received, failed: counts.failed, gaps: counts.gaps },
      { received: 4, failed: 1, gaps: 1 },
    );
  } finally {
    protector.close();
    await new Promise<void>((resolve) => sender.close(() => resolve()));
    socket.close();
    await pool.close();
  }
});
