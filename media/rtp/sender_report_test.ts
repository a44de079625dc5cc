import assert from "node:assert/strict";
import { parseSenderReports } from "./rtcp.ts";
import { writeSenderReport } from "./sender_report.ts";

Deno.test("sender report: SR + SDES CNAME compound, read back by the RTCP parser", () => {
  const ntpSec = 3_900_000_000.25;
  const bytes = writeSenderReport({
    ssrc: 0xdeadbeef,
    ntpSec,
    rtpTimestamp: 0xfffffff0,
    packets: 10,
    octets: 12000,
    cname: "media-server",
  }, 4);
  assert.deepEqual([...bytes.subarray(0, 4)], [0, 0, 0, 0]);
  const packet = bytes.subarray(4);
  assert.equal(packet.length % 4, 0);
  const [report, ...rest] = parseSenderReports(packet);
  assert.equal(rest.length, 0);
  assert.equal(report.ssrc, 0xdeadbeef);
  assert.equal(report.rtpTimestamp, 0xfffffff0);
  assert.ok(Math.abs(report.ntpMs - ntpSec * 1000) < 0.001);
  // SDES: type 202, the CNAME item after the SSRC.
  assert.equal(packet[29], 202);
  assert.equal(new TextDecoder().decode(packet.subarray(38, 38 + packet[37])), "media-server");
});
