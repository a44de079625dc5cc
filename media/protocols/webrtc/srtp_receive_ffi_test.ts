import assert from "node:assert/strict";
import { Buffer } from "node:buffer";
import {
  MediaStreamTrack,
  RTCPeerConnection,
  RTCRtpCodecParameters,
  RtpHeader,
  RtpPacket,
} from "werift";
import { until } from "../../../tests/helpers/udp_collector.ts";
import { IceMux } from "./ice_mux.ts";
import { Peer } from "./peer.ts";
import { receivesThroughFfi } from "./srtp_receive_ffi.ts";

const vp8 = () =>
  new RTCRtpCodecParameters({ mimeType: "video/VP8", clockRate: 90000, payloadType: 96 });

Deno.test("a server peer decrypts what a publisher sends with libcrypto: every packet intact, a forged one dropped, the keys freed on close", async () => {
  const mux = IceMux.open({ host: "127.0.0.1", port: 0 });
  const client = new RTCPeerConnection({ iceServers: [], codecs: { video: [vp8()], audio: [] } });
  const server = new Peer(
    { bind: "127.0.0.1", portMin: 40000, portMax: 40001, mux },
    [{ kind: "video", codec: "VP8", params: vp8() }],
  );
  try {
    const received: string[] = [];
    server.pc.onTrack.subscribe((track) =>
      track.onReceiveRtp.subscribe((rtp) => received.push(rtp.payload.toString("hex")))
    );
    const track = new MediaStreamTrack({ kind: "video" });
    client.addTransceiver(track, { direction: "sendonly" });
    await client.setLocalDescription(await client.createOffer());
    await until(() => client.iceGatheringState === "complete", 5000);
    const answer = await server.answer(client.localDescription!.sdp, () => {});
    await client.setRemoteDescription({ type: "answer", sdp: answer });
    await until(() => server.pc.connectionState === "connected", 10_000);
    await until(() => client.connectionState === "connected", 5000);
    const transport = server.pc.dtlsTransports[0];
    await until(() => receivesThroughFfi(transport), 5000);

    const sent: string[] = [];
    const send = (count: number, from: number) => {
      for (let i = 0; i < count; i++) {
        const payload = Buffer.alloc(20 + ((from + i) % 7) * 150, from + i);
        payload[0] = 0x10; // VP8 payload descriptor: start of a partition
        sent.push(payload.toString("hex"));
        track.writeRtp(
          new RtpPacket(
            new RtpHeader({
              payloadType: 96,
              sequenceNumber: from + i,
              timestamp: (from + i) * 3000,
            }),
            payload,
          ),
        );
      }
    };
    send(20, 1);
    await until(() => received.length >= 20, 5000);
    // A datagram shaped as SRTP from the publisher's own address, with a tag nobody made.
    const forged = Buffer.alloc(200, 0xab);
    forged[0] = 0x80;
    forged[1] = 96;
    client.dtlsTransports[0].iceTransport.connection.send(forged);
    send(20, 21);
    await until(() => received.length >= 40, 5000);
    await new Promise((resolve) => setTimeout(resolve, 200));
    assert.deepEqual(received, sent, "every packet decrypted intact, the forged one dropped");
    await server.close();
    assert.equal(receivesThroughFfi(transport), false, "the unprotector is closed with the peer");
  } finally {
    await client.close();
    await server.close();
    await until(() => mux.socketCount === 0).catch(() => {});
    await mux.close();
  }
});
