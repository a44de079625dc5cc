import assert from "node:assert/strict";
import { Buffer } from "node:buffer";
import { RTCPeerConnection } from "werift";
import { keepTcpPassiveCandidates, requestedIceTransport, selectedTransportOf } from "./ice_tcp.ts";
import { opensIceTcp } from "./ice_tcp_gate.ts";
import { installNoDefaultStun } from "./no_default_stun.ts";
import { openPeerCount, Peer } from "./peer.ts";
import { loopbackIce } from "../../../tests/webrtc_helpers.ts";

Deno.test("requestedIceTransport: the SDK's TCP or UDP in any case, else the server's", () => {
  assert.equal(requestedIceTransport("TCP", "udp"), "tcp");
  assert.equal(requestedIceTransport("tcp", "udp"), "tcp");
  assert.equal(requestedIceTransport("UDP", "tcp"), "udp");
  assert.equal(requestedIceTransport(undefined, "tcp"), "tcp");
  assert.equal(requestedIceTransport("SCTP", "udp"), "udp");
  assert.equal(requestedIceTransport(1, "udp"), "udp");
});

const answer = [
  "v=0",
  "a=candidate:1 1 udp 2116026367 127.0.0.1 41000 typ host generation 0",
  "a=candidate:2 1 tcp 1776287743 127.0.0.1 9 typ host tcptype active generation 0",
  "a=candidate:2 1 tcp 1772093439 127.0.0.1 41002 typ host tcptype passive generation 0",
  "a=candidate:3 1 tcp 1772093439 10.0.0.7 41002 typ host tcptype passive generation 0",
  "a=end-of-candidates",
  "",
].join("\r\n");

Deno.test("keepTcpPassiveCandidates: the passive ones of the host, announced when given", () => {
  assert.equal(
    keepTcpPassiveCandidates(answer, "127.0.0.1"),
    [
      "v=0",
      "a=candidate:2 1 tcp 1772093439 127.0.0.1 41002 typ host tcptype passive generation 0",
      "a=end-of-candidates",
      "",
    ].join("\r\n"),
  );
  assert.match(
    keepTcpPassiveCandidates(answer, "127.0.0.1", "203.0.113.5"),
    /^a=candidate:2 1 tcp 1772093439 203\.0\.113\.5 41002 typ host tcptype passive/m,
  );
  assert.equal(
    keepTcpPassiveCandidates(answer).split("\r\n").filter((l) => l.includes("candidate:")).length,
    2,
    "every interface's passive candidate without a host",
  );
});

Deno.test("selectedTransportOf: the nominated pair's local candidate", () => {
  assert.equal(selectedTransportOf({}), undefined);
  assert.equal(selectedTransportOf({ nominated: { localCandidate: { transport: "udp" } } }), "udp");
  assert.equal(
    selectedTransportOf({
      nominated: { localCandidate: { transport: "TCP", tcptype: "passive" } },
    }),
    "tcp",
  );
});

/** A STUN Binding request with USERNAME `username` (no integrity: the gate reads no more). */
function bindingRequest(username: string): Uint8Array {
  const name = Buffer.from(username);
  const padded = (name.length + 3) & ~3;
  const attribute = Buffer.alloc(4 + padded);
  attribute.writeUInt16BE(0x0006, 0);
  attribute.writeUInt16BE(name.length, 2);
  name.copy(attribute, 4);
  const header = Buffer.from("000100002112a442000000000000000000000000", "hex");
  header.writeUInt16BE(attribute.length, 2);
  return Buffer.concat([header, attribute]);
}

Deno.test("opensIceTcp: a Binding request for the peer's ufrag, nothing else", () => {
  assert.ok(opensIceTcp(bindingRequest("abcd:wxyz"), "abcd"));
  assert.ok(opensIceTcp(bindingRequest("abcd:wxyz"), undefined));
  assert.ok(!opensIceTcp(bindingRequest("efgh:wxyz"), "abcd"), "another peer's ufrag");
  assert.ok(!opensIceTcp(new TextEncoder().encode("GET / HTTP/1.1\r\n\r\n"), "abcd"));
  assert.ok(!opensIceTcp(new Uint8Array(40).fill(0x16), "abcd"), "a DTLS-looking record");
  const truncated = bindingRequest("abcd:wxyz").subarray(0, 24);
  assert.ok(!opensIceTcp(truncated, "abcd"));
});

Deno.test({
  name: "a TCP peer behind NAT listens on the bind address and announces the public one",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    // The client too must not ask werift's default STUN server.
    installNoDefaultStun();
    const client = new RTCPeerConnection(loopbackIce());
    client.createDataChannel("probe");
    await client.setLocalDescription(await client.createOffer());
    const peer = new Peer({
      bind: "127.0.0.1",
      announced: "203.0.113.5",
      portMin: 41300,
      portMax: 41309,
      transport: "tcp",
    }, []);
    try {
      const sdp = await peer.answer(client.localDescription!.sdp, () => {});
      const candidates = sdp.split("\r\n").filter((l) => l.startsWith("a=candidate:"));
      assert.ok(candidates.length > 0);
      for (const line of candidates) {
        const fields = line.split(" ");
        assert.deepEqual([fields[2], fields[4]], ["tcp", "203.0.113.5"], line);
        assert.match(line, /tcptype passive/);
        const port = Number(fields[5]);
        assert.ok(port >= 41300 && port <= 41309, line);
        // The listener is on the bind address: a client reaches it there.
        const conn = await Deno.connect({ hostname: "127.0.0.1", port });
        conn.close();
      }
    } finally {
      await peer.close();
      await client.close();
    }
    assert.equal(openPeerCount(), 0);
  },
});
