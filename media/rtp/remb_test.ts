import assert from "node:assert/strict";
import { RtcpPacketConverter, RtcpRrPacket } from "werift";
import { readRemb, rembPacket } from "./remb.ts";

Deno.test("a REMB round-trips its bitrate (18-bit mantissa, exponent) and SSRCs", () => {
  for (const bps of [0, 100_000, 262_143, 2_500_000, 10_000_000]) {
    const wire = rembPacket(5, bps, [0x2000, 0x2001]).serialize();
    const [packet] = RtcpPacketConverter.deSerialize(wire);
    const remb = readRemb(packet)!;
    // Exact while the value fits the mantissa, else rounded down by under 2^-17.
    assert.ok(remb.bps <= bps && remb.bps > bps * (1 - 2 ** -17) - 1, `${bps}: ${remb.bps}`);
    assert.deepEqual(remb.ssrcs, [0x2000, 0x2001]);
  }
  assert.equal(readRemb(new RtcpRrPacket({ ssrc: 1 })), undefined);
});
