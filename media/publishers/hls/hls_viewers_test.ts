import assert from "node:assert/strict";
import { HlsViewers, viewerActiveMs, viewerForgetMs } from "./hls_viewers.ts";

const chrome = { ip: "10.0.0.1", port: 5000, userAgent: "Chrome" };

Deno.test("a viewer's requests give its time per variant, switches, statuses and response times", () => {
  let now = 1_000_000;
  const viewers = new HlsViewers(() => now);
  viewers.count({ ...chrome, status: 200, responseMs: 4 });
  viewers.count({ ...chrome, variant: "source", status: 200, responseMs: 2 });
  now += 3000;
  viewers.count({ ...chrome, port: 5001, variant: "source", status: 404, responseMs: 1 });
  now += 1000;
  viewers.count({ ...chrome, port: 5002, variant: "360p", status: 200, responseMs: 9 });
  now += 2000;
  const [record] = viewers.records();
  assert.equal(record.ip, "10.0.0.1");
  assert.equal(record.port, 5002, "the latest connection's port");
  assert.equal(record.userAgent, "Chrome");
  assert.equal(record.active, true);
  assert.deepEqual(record.metrics, {
    profileTime: { source: 4000, "360p": 2000 },
    requestsNumber: 4,
    requestsStatuses: { "200 OK": 3, "404 Not Found": 1 },
    profileSwitches: 1,
    maxResponseTime: 9,
    minResponseTime: 1,
    avgResponseTime: 4,
  });
  assert.equal(viewers.active(), 1);
  assert.equal(viewers.active("360p"), 1);
  assert.equal(viewers.active("source"), 0);
  assert.equal(viewers.lastRequestMs, now - 2000);
});

Deno.test("address and user agent tell viewers apart; silence makes them inactive, then forgotten", () => {
  let now = 0;
  const viewers = new HlsViewers(() => now);
  viewers.count({ ...chrome, status: 200, responseMs: 1 });
  viewers.count({ ...chrome, userAgent: "Safari", status: 200, responseMs: 1 });
  viewers.count({ ...chrome, ip: "10.0.0.2", status: 200, responseMs: 1 });
  assert.equal(viewers.active(), 3);
  now += viewerActiveMs + 1;
  assert.equal(viewers.active(), 0);
  assert.deepEqual(viewers.records().map((r) => r.active), [false, false, false]);
  const before = viewers.records()[0].id;
  viewers.count({ ...chrome, status: 200, responseMs: 1 });
  const records = viewers.records();
  assert.equal(records.length, 3, "the returning client replaced its old viewer");
  assert.notEqual(records.at(-1)!.id, before);
  assert.equal(records.at(-1)!.metrics.requestsNumber, 1);
  now += viewerForgetMs + 1;
  assert.deepEqual(viewers.records(), []);
});

Deno.test("a player of an audio group: its video variant and audio rendition are followed apart, no switch between them", () => {
  let now = 0;
  const viewers = new HlsViewers(() => now);
  for (let i = 0; i < 3; i++) {
    viewers.count({ ...chrome, variant: "source", status: 200, responseMs: 1 });
    viewers.count({ ...chrome, variant: "aac64", audio: true, status: 200, responseMs: 1 });
    now += 1000;
  }
  viewers.count({ ...chrome, variant: "p180", status: 200, responseMs: 1 });
  viewers.count({ ...chrome, variant: "aac64", audio: true, status: 200, responseMs: 1 });
  now += 1000;
  const [record] = viewers.records();
  assert.equal(record.metrics.profileSwitches, 1, "source to p180 only");
  assert.deepEqual(record.metrics.profileTime, { source: 3000, p180: 1000, aac64: 4000 });
  assert.equal(viewers.active("aac64"), 1);
  assert.equal(viewers.active("p180"), 1);
  assert.equal(viewers.active("source"), 0);
});
