import assert from "node:assert/strict";
import { Buffer } from "node:buffer";
import { prng, randomBytes } from "../../formats/test_fixtures.ts";
import { DtlsRetransmitFilter, filterDtlsRetransmits } from "./dtls_retransmit_filter.ts";

/** A DTLS record: handshake `msgType` with `messageSeq` in `epoch`, 4 bytes of body. */
function record(msgType: number, messageSeq: number, epoch = 0, recordSeq = 0): Uint8Array {
  const body = new Uint8Array(12 + 4);
  body[0] = msgType;
  body[3] = 4; // length
  body[4] = messageSeq >> 8;
  body[5] = messageSeq & 0xff;
  body[11] = 4; // fragment length
  const r = new Uint8Array(13 + body.length);
  r.set([22, 0xfe, 0xfd, epoch >> 8, epoch & 0xff, 0, 0, 0, 0, 0, recordSeq]);
  r[11] = body.length >> 8;
  r[12] = body.length & 0xff;
  r.set(body, 13);
  return r;
}

/** An encrypted record (epoch 1), as a Finished travels. */
function encrypted(recordSeq: number): Uint8Array {
  const r = record(0, 0, 1, recordSeq);
  r.fill(0xaa, 13);
  return r;
}

const concat = (...parts: Uint8Array[]) => new Uint8Array(Buffer.concat(parts));

Deno.test("dtls filter: a retransmitted key flight is dropped, its Finished passes", () => {
  const f = new DtlsRetransmitFilter();
  const clientHello = record(1, 0);
  const helloWithCookie = record(1, 1);
  assert.equal(f.filter(clientHello), clientHello);
  assert.equal(f.filter(helloWithCookie), helloWithCookie);
  // Certificate, ClientKeyExchange, CertificateVerify, then the encrypted Finished.
  const flight5 = concat(record(11, 2), record(16, 3), record(15, 4), encrypted(1));
  assert.equal(f.filter(flight5), flight5, "the first copy passes whole");
  const again = concat(
    record(11, 2, 0, 9),
    record(16, 3, 0, 10),
    record(15, 4, 0, 11),
    encrypted(2),
  );
  const left = f.filter(again);
  assert.deepEqual(new Uint8Array(left!), encrypted(2), "only the Finished of the copy is left");
  assert.equal(f.dropped, 3);
  assert.equal(f.filter(record(16, 3, 0, 12)), undefined);
});

Deno.test("dtls filter: a late first ClientHello is dropped, a ClientHello whose answer was lost passes", () => {
  const f = new DtlsRetransmitFilter();
  const first = record(1, 0);
  assert.equal(f.filter(first), first);
  // No HelloVerifyRequest came back: the browser sends the same ClientHello again.
  assert.equal(f.filter(record(1, 0, 0, 1)) !== undefined, true);
  assert.ok(f.filter(record(1, 1, 0, 2)));
  assert.equal(f.filter(record(1, 0, 0, 3)), undefined, "an earlier flight, once a later came");
  // The server's flight 4 (werift as client): copies of earlier messages go, the last passes.
  const g = new DtlsRetransmitFilter();
  for (let seq = 0; seq <= 4; seq++) g.filter(record([2, 11, 12, 13, 14][seq], seq));
  assert.equal(g.filter(record(2, 0, 0, 7)), undefined);
  assert.ok(g.filter(record(14, 4, 0, 8)), "ServerHelloDone again: werift resends its flight");
});

Deno.test("dtls filter: media, STUN and truncated or random DTLS pass without a throw", () => {
  const seen: Uint8Array[] = [];
  const event = { execute: (data: Buffer) => void seen.push(data) };
  const filter = filterDtlsRetransmits(event);
  const rtp = Buffer.from([0x80, 96, 0, 1]);
  const stun = Buffer.from([0x00, 0x01, 0, 0]);
  event.execute(rtp);
  event.execute(stun);
  assert.deepEqual(seen, [rtp, stun]);
  const rand = prng(11);
  for (let i = 0; i < 5000; i++) {
    const bytes = randomBytes(rand, Math.floor(rand() * 60));
    if (bytes.length) bytes[0] = 20 + Math.floor(rand() * 44);
    filter.filter(bytes);
  }
});
