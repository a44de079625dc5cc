import assert from "node:assert/strict";
import { RTCPeerConnection } from "werift";
import { Peer } from "./peer.ts";
import { loopbackIce } from "../../../tests/webrtc_helpers.ts";

/** The controlling flag of each of `pc`'s ICE agents. */
function roles(pc: RTCPeerConnection): boolean[] {
  return pc.dtlsTransports.map((t) => t.iceTransport.connection.iceControlling);
}

/** A werift client's offer with one data channel (one transport). */
async function clientOffer(client: RTCPeerConnection): Promise<string> {
  client.createDataChannel("probe");
  await client.setLocalDescription(await client.createOffer());
  return client.localDescription!.sdp;
}

Deno.test("werift itself turns an answering agent controlling when it then offers (what the hold is for)", async () => {
  const client = new RTCPeerConnection(loopbackIce());
  const server = new RTCPeerConnection(loopbackIce());
  try {
    await server.setRemoteDescription({ type: "offer", sdp: await clientOffer(client) });
    await server.setLocalDescription(await server.createAnswer());
    assert.deepEqual(roles(server), [false]);
    await server.setLocalDescription(await server.createOffer());
    // If werift stops doing this, the hold in Peer is no longer needed.
    assert.deepEqual(roles(server), [true]);
  } finally {
    await Promise.all([client.close(), server.close()]);
  }
});

Deno.test("a server offer during the first checks keeps the role the answer gave (controlled)", async () => {
  const client = new RTCPeerConnection(loopbackIce());
  const peer = new Peer({ bind: "127.0.0.1", portMin: 41310, portMax: 41319 }, []);
  try {
    // The client never gets the answer, so no pair is nominated: werift's own guard is off.
    await peer.answer(await clientOffer(client), () => {});
    assert.deepEqual(roles(peer.pc), [false]);
    await peer.offer(() => {});
    assert.deepEqual(roles(peer.pc), [false]);
    // The hold ends with the step: werift's setter works again.
    peer.pc.dtlsTransports[0].iceTransport.connection.iceControlling = true;
    assert.deepEqual(roles(peer.pc), [true]);
  } finally {
    await Promise.all([client.close(), peer.close()]);
  }
});

Deno.test("a first offer from the server makes it controlling, as ICE asks of the offerer", async () => {
  const peer = new Peer({ bind: "127.0.0.1", portMin: 41320, portMax: 41329 }, []);
  try {
    await peer.offer(() => {
      peer.pc.createDataChannel("probe");
    });
    assert.deepEqual(roles(peer.pc), [true]);
  } finally {
    await peer.close();
  }
});
