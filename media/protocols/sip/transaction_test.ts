import assert from "node:assert/strict";
import dgram from "node:dgram";
import { silentLogger } from "../../../core/log.ts";
import { newBranch, newCallId, newTag, parseCSeq } from "./headers.ts";
import {
  parseSipMessage,
  serializeSipMessage,
  SipHeaders,
  type SipRequest,
  type SipResponse,
} from "./message.ts";
import { type ServerTransaction, SipTransactions, type TransactionTimers } from "./transaction.ts";
import { type SipPeer, SipTransport, type SipTransportName } from "./transport.ts";

const encoder = new TextEncoder();
/** Short timers: 64*T1 is 1.28 s. */
const fastTimers: Partial<TransactionTimers> = { t1Ms: 20, t2Ms: 80, t4Ms: 50 };

/** A transaction layer on its own transport on 127.0.0.1. */
async function openLayer(
  timers: Partial<TransactionTimers> = fastTimers,
  maxServerTransactions?: number,
) {
  const transport = await SipTransport.open({ hostname: "127.0.0.1", port: 0, log: silentLogger });
  const layer = new SipTransactions(transport, {
    log: silentLogger,
    timers,
    maxServerTransactions,
  });
  return {
    transport,
    layer,
    async close() {
      layer.close();
      await transport.close();
    },
  };
}

/** Runs `fn` with two layers on their own transports (a asks, b answers), closing both after. */
async function withLayerPair(
  fn: (a: Layer, b: Layer) => Promise<void>,
): Promise<void> {
  const a = await openLayer();
  const b = await openLayer();
  try {
    await fn(a, b);
  } finally {
    await a.close();
    await b.close();
  }
}

/** A layer opened by openLayer. */
type Layer = Awaited<ReturnType<typeof openLayer>>;

/** A request out of dialog from `from` (a layer's port) to `to`. */
function makeRequest(
  method: string,
  fromPort: number,
  to: SipPeer,
  o: { callId?: string; cseq?: number; fromTag?: string; toTag?: string; body?: string } = {},
): SipRequest {
  const headers = new SipHeaders();
  headers.add("From", `<sip:alice@127.0.0.1:${fromPort}>;tag=${o.fromTag ?? newTag()}`);
  headers.add("To", `<sip:bob@${to.host}:${to.port}>${o.toTag ? `;tag=${o.toTag}` : ""}`);
  headers.add("Call-ID", o.callId ?? newCallId("127.0.0.1"));
  headers.add("CSeq", `${o.cseq ?? 1} ${method}`);
  headers.add(
    "Contact",
    `<sip:alice@127.0.0.1:${fromPort};transport=${to.transport.toLowerCase()}>`,
  );
  const body = encoder.encode(o.body ?? "");
  if (o.body) headers.add("Content-Type", "application/sdp");
  return { kind: "request", method, uri: `sip:bob@${to.host}:${to.port}`, headers, body };
}

/** The peer of a layer's transport. */
function peerOf(transport: SipTransport, name: SipTransportName): SipPeer {
  return { transport: name, host: "127.0.0.1", port: transport.port };
}

/** Polls `check` until it holds or `timeoutMs` passes. */
async function until(check: () => boolean, timeoutMs = 3000): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!check()) {
    if (performance.now() > deadline) throw new Error("condition not met in time");
    await new Promise((r) => setTimeout(r, 5));
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A raw UDP socket on 127.0.0.1 playing the far end. */
async function rawUdp(onDatagram: (data: Uint8Array, port: number) => void) {
  const socket = dgram.createSocket("udp4");
  socket.on("message", (d: Uint8Array, info: dgram.RemoteInfo) => onDatagram(d, info.port));
  await new Promise<void>((resolve) => socket.bind(0, "127.0.0.1", () => resolve()));
  return {
    port: socket.address().port,
    send(data: Uint8Array, port: number) {
      socket.send(data, port, "127.0.0.1");
    },
    close: () => new Promise<void>((resolve) => socket.close(() => resolve())),
  };
}

/**
 * An OPTIONS to bob at `port` built by hand, as an old or odd far end sends it: `via` is the Via
 * header's value after the protocol, `extra` headers go after it.
 */
function rawOptions(
  port: number,
  via: string,
  o: { fromTag: string; callId: string; cseq: number; extra?: string[] },
): Uint8Array {
  return encoder.encode(
    [
      `OPTIONS sip:bob@127.0.0.1:${port} SIP/2.0`,
      `Via: SIP/2.0/UDP ${via}`,
      ...o.extra ?? [],
      `From: <sip:alice@127.0.0.1>;tag=${o.fromTag}`,
      "To: <sip:bob@127.0.0.1>",
      `Call-ID: ${o.callId}`,
      `CSeq: ${o.cseq} OPTIONS`,
      "Content-Length: 0",
      "",
      "",
    ].join("\r\n"),
  );
}

/**
 * A layer `b` that answers every request 200 (counting them in `handled.calls`), and a raw UDP
 * far end collecting the responses it gets in `answers`.
 */
async function answeringLayerAndFarEnd() {
  const b = await openLayer();
  const answers: SipResponse[] = [];
  const far = await rawUdp((data) => answers.push(parseSipMessage(data) as SipResponse));
  const handled = { calls: 0 };
  b.layer.onRequest = (_req, tx) => {
    handled.calls++;
    void tx.respond(200, "OK");
  };
  return { b, answers, far, handled };
}

/** A response to `req` built by hand (as a far end that is not our layer would). */
function answer(req: SipRequest, status: number, reason: string): Uint8Array {
  const headers = new SipHeaders();
  for (const via of req.headers.getAll("Via")) headers.add("Via", via);
  for (const name of ["From", "Call-ID", "CSeq"]) headers.add(name, req.headers.get(name)!);
  headers.add("To", `${req.headers.get("To")};tag=far`);
  return serializeSipMessage({ kind: "response", status, reason, headers, body: new Uint8Array() });
}

for (const name of ["UDP", "TCP"] as const) {
  Deno.test(`${name}: a request gets its response through two layers`, async () => {
    await withLayerPair(async (a, b) => {
      const seen: string[] = [];
      b.layer.onRequest = (req, tx) => {
        seen.push(req.method);
        void tx.respond(200, "OK", { headers: [["Allow", "INVITE, ACK, BYE"]] });
      };
      const to = peerOf(b.transport, name);
      const tx = a.layer.request(makeRequest("OPTIONS", a.transport.port, to), to);
      const res = await tx.response;
      assert.equal(res.status, 200);
      assert.deepEqual(res.headers.getAll("Allow"), ["INVITE", "ACK", "BYE"]);
      assert.match(res.headers.get("To")!, /;tag=\w+/);
      assert.deepEqual(seen, ["OPTIONS"]);
      assert.match(tx.request.headers.get("Via")!, new RegExp(`^SIP/2.0/${name} 127.0.0.1:`));
      assert.ok(tx.branch.startsWith("z9hG4bK"));
      assert.equal(a.transport.stats.tcpConnections, name === "TCP" ? 1 : 0);
      // Over TCP nothing is retransmitted: one request, one response.
      if (name === "TCP") {
        await sleep(100);
        assert.equal(a.transport.stats.sent, 1);
        assert.equal(b.transport.stats.sent, 1);
      }
    });
  });
}

Deno.test("UDP: the request is retransmitted (timer E) when the first datagrams are lost", async () => {
  const a = await openLayer();
  let got = 0;
  const far = await rawUdp((data, port) => {
    // The first two copies are lost; the third is answered.
    if (++got === 3) {
      const req = parseSipMessage(data) as SipRequest;
      far.send(answer(req, 200, "OK"), port);
    }
  });
  try {
    const to: SipPeer = { transport: "UDP", host: "127.0.0.1", port: far.port };
    const started = performance.now();
    const res = await a.layer.request(makeRequest("OPTIONS", a.transport.port, to), to).response;
    assert.equal(res.status, 200);
    assert.equal(got, 3);
    // Sent at 0, T1 and 3*T1.
    assert.ok(performance.now() - started >= 55);
  } finally {
    await far.close();
    await a.close();
  }
});

Deno.test("UDP: an unanswered INVITE times out (timer B) after 64*T1, retransmitted doubling", async () => {
  const a = await openLayer();
  let got = 0;
  const far = await rawUdp(() => got++);
  try {
    const to: SipPeer = { transport: "UDP", host: "127.0.0.1", port: far.port };
    const started = performance.now();
    const tx = a.layer.request(makeRequest("INVITE", a.transport.port, to), to);
    await assert.rejects(tx.response, (err: Error) => err.name === "SipTimeoutError");
    const elapsed = performance.now() - started;
    assert.ok(elapsed >= 1280 && elapsed < 2500, `${elapsed} ms`);
    // At 0, 20, 60, 140, 300, 620 and 1260 ms: each retransmission is timed from the one
    // before (timer A doubles), so their lateness adds up and the last one may come after
    // timer B's 1280 ms on a loaded machine.
    await sleep(20);
    assert.ok(got === 6 || got === 7, `${got} INVITEs`);
    assert.deepEqual(a.layer.size, { clients: 0, servers: 0 });
  } finally {
    await far.close();
    await a.close();
  }
});

for (const name of ["UDP", "TCP"] as const) {
  Deno.test(`${name}: a 486 to an INVITE is ACKed by the transaction and the ACK absorbed`, async () => {
    await withLayerPair(async (a, b) => {
      const seen: string[] = [];
      b.layer.onRequest = (req, tx) => {
        seen.push(req.method);
        if (req.method === "INVITE") void tx.respond(486, "Busy Here");
      };
      const to = peerOf(b.transport, name);
      const tx = a.layer.request(makeRequest("INVITE", a.transport.port, to), to);
      const res = await tx.response;
      assert.equal(res.status, 486);
      // b's transaction ends once the ACK came (timer I, T4 = 50 ms), well before timer H.
      await until(() => b.layer.size.servers === 0, 1000);
      await sleep(100);
      assert.deepEqual(seen, ["INVITE"]);
      // b sent its 486 once (the ACK stopped timer G before its first firing or soon after).
      assert.ok(b.transport.stats.sent <= 2, `${b.transport.stats.sent} sent`);
    });
  });
}

Deno.test("UDP: a 2xx to an INVITE is retransmitted until acknowledged, re-ACKed by the UA", async () => {
  await withLayerPair(async (a, b) => {
    let acked = 0;
    let serverTx: ServerTransaction | undefined;
    b.layer.onRequest = (req, tx) => {
      if (req.method === "INVITE") {
        serverTx = tx;
        void tx.respond(200, "OK", {
          toTag: "b1",
          body: encoder.encode("v=0\r\n"),
          contentType: "application/sdp",
        });
      } else if (req.method === "ACK") {
        acked++;
        serverTx!.acknowledged();
      }
    };
    const strays: SipResponse[] = [];
    a.layer.onStray2xx = (res) => strays.push(res);
    const to = peerOf(b.transport, "UDP");
    const invite = makeRequest("INVITE", a.transport.port, to, { body: "v=0\r\n" });
    const tx = a.layer.request(invite, to);
    const res = await tx.response;
    assert.equal(res.status, 200);
    assert.equal(res.headers.get("Content-Type"), "application/sdp");
    assert.match(res.headers.get("To")!, /;tag=b1$/);
    // No ACK yet: b retransmits (T1, 2*T1, 4*T1...), each reaching onStray2xx.
    await until(() => strays.length >= 2, 1000);
    const ack = makeRequest("ACK", a.transport.port, to, {
      callId: invite.headers.get("Call-ID"),
      fromTag: "x",
      toTag: "b1",
    });
    ack.headers.set("CSeq", `${parseCSeq(invite.headers.get("CSeq")!).seq} ACK`);
    await a.layer.sendAck(ack, to);
    await until(() => acked === 1);
    const after = strays.length;
    await sleep(300);
    assert.ok(strays.length <= after + 1, `${strays.length - after} more after the ACK`);
    // The ACK got its own branch.
    assert.notEqual(ack.headers.get("Via"), tx.request.headers.get("Via"));
  });
});

Deno.test("UDP: a 2xx never ACKed ends in onAckTimeout after 64*T1", async () => {
  await withLayerPair(async (a, b) => {
    let timedOut = 0;
    b.layer.onRequest = (_req, tx) => {
      tx.onAckTimeout = () => timedOut++;
      void tx.respond(200, "OK");
    };
    const to = peerOf(b.transport, "UDP");
    const res = await a.layer.request(makeRequest("INVITE", a.transport.port, to), to).response;
    assert.equal(res.status, 200);
    await until(() => timedOut === 1, 3000);
    assert.equal(b.layer.size.servers, 0);
  });
});

for (const name of ["UDP", "TCP"] as const) {
  Deno.test(`${name}: CANCEL after 180 gets 200, the INVITE 487, and onCancel runs`, async () => {
    await withLayerPair(async (a, b) => {
      let cancelled = 0;
      b.layer.onRequest = (req, tx) => {
        assert.equal(req.method, "INVITE");
        tx.onCancel = () => cancelled++;
        void tx.respond(180, "Ringing", { toTag: "ring" });
      };
      const to = peerOf(b.transport, name);
      const provisional: number[] = [];
      const tx = a.layer.request(
        makeRequest("INVITE", a.transport.port, to),
        to,
        (r) => provisional.push(r.status),
      );
      // cancel() waits for the 180 itself.
      const cancelRes = await a.layer.cancel(tx);
      assert.equal(cancelRes.status, 200);
      assert.equal(parseCSeq(cancelRes.headers.get("CSeq")!).method, "CANCEL");
      const final = await tx.response;
      assert.equal(final.status, 487);
      assert.match(final.headers.get("To")!, /;tag=ring$/);
      assert.deepEqual(provisional, [180]);
      await until(() => cancelled === 1);
      // The 487's ACK (sent by a's transaction) ends b's transaction.
      await until(() => b.layer.size.servers === 0);
    });
  });
}

Deno.test("UDP: a retransmitted request reaches the handler once and gets the last answer again", async () => {
  const { b, answers, far, handled } = await answeringLayerAndFarEnd();
  try {
    const request = rawOptions(
      b.transport.port,
      `127.0.0.1:${far.port};branch=${newBranch()};rport`,
      {
        fromTag: "r1",
        callId: "retrans@test",
        cseq: 5,
        extra: ["Max-Forwards: 70"],
      },
    );
    far.send(request, b.transport.port);
    await until(() => answers.length === 1);
    far.send(request, b.transport.port);
    await until(() => answers.length === 2);
    assert.equal(handled.calls, 1);
    assert.equal(answers[1].status, 200);
    assert.equal(answers[1].headers.get("To"), answers[0].headers.get("To"));
  } finally {
    await far.close();
    await b.close();
  }
});

Deno.test("UDP: without rport the response goes to the sent-by port, with rport to the source port", async () => {
  const b = await openLayer();
  const atSentBy: SipResponse[] = [];
  const atSource: SipResponse[] = [];
  const sentBy = await rawUdp((data) => atSentBy.push(parseSipMessage(data) as SipResponse));
  const source = await rawUdp((data) => atSource.push(parseSipMessage(data) as SipResponse));
  try {
    b.layer.onRequest = (_req, tx) => void tx.respond(200, "OK");
    const request = (rport: string, callId: string) =>
      rawOptions(b.transport.port, `127.0.0.1:${sentBy.port};branch=${newBranch()}${rport}`, {
        fromTag: "p",
        callId,
        cseq: 1,
      });
    // RFC 3261 §18.2.2: the sent-by port; RFC 3581: the source port when rport is asked.
    source.send(request("", "plain@test"), b.transport.port);
    await until(() => atSentBy.length === 1);
    source.send(request(";rport", "rport@test"), b.transport.port);
    await until(() => atSource.length === 1);
    assert.equal(atSentBy[0].headers.get("Call-ID"), "plain@test");
    assert.equal(atSource[0].headers.get("Call-ID"), "rport@test");
    assert.match(atSource[0].headers.get("Via")!, new RegExp(`;rport=${source.port}`));
  } finally {
    await sentBy.close();
    await source.close();
    await b.close();
  }
});

Deno.test("UDP: a request without the magic cookie (RFC 2543) is matched by Call-ID, CSeq and From tag", async () => {
  const { b, answers, far, handled } = await answeringLayerAndFarEnd();
  try {
    const request = (branch: string) =>
      rawOptions(b.transport.port, `127.0.0.1:${far.port}${branch}`, {
        fromTag: "old",
        callId: "rfc2543@test",
        cseq: 9,
      });
    far.send(request(""), b.transport.port);
    await until(() => answers.length === 1);
    far.send(request(";branch=1"), b.transport.port);
    await until(() => answers.length === 2);
    assert.equal(handled.calls, 1);
  } finally {
    await far.close();
    await b.close();
  }
});

Deno.test("UDP: a new request beyond the server transactions' cap is answered 503", async () => {
  const a = await openLayer();
  const b = await openLayer(fastTimers, 1);
  try {
    let calls = 0;
    b.layer.onRequest = () => calls++; // never answers: the first transaction stays
    const to = peerOf(b.transport, "UDP");
    const first = a.layer.request(makeRequest("OPTIONS", a.transport.port, to), to);
    await until(() => calls === 1);
    const second = await a.layer.request(makeRequest("OPTIONS", a.transport.port, to), to)
      .response;
    assert.equal(second.status, 503);
    assert.equal(second.headers.get("Retry-After"), "5");
    assert.equal(b.layer.refusedRequests, 1);
    assert.equal(calls, 1);
    await assert.rejects(first.response, (err: Error) => err.name === "SipTimeoutError");
  } finally {
    await a.close();
    await b.close();
  }
});

Deno.test("close() rejects pending client transactions with SipTransportError and stops timers", async () => {
  const a = await openLayer();
  const far = await rawUdp(() => {});
  try {
    const to: SipPeer = { transport: "UDP", host: "127.0.0.1", port: far.port };
    const tx = a.layer.request(makeRequest("OPTIONS", a.transport.port, to), to);
    a.layer.close();
    await assert.rejects(
      tx.response,
      (err: Error) => err.name === "SipTransportError" && err.message === "closed",
    );
  } finally {
    await far.close();
    await a.close();
  }
});

/** A UDP port that was free a moment ago on 127.0.0.1 (and its TCP twin, checked). */
async function freePort(): Promise<number> {
  for (;;) {
    const socket = dgram.createSocket("udp4");
    await new Promise<void>((resolve) => socket.bind(0, "127.0.0.1", () => resolve()));
    const port = socket.address().port;
    await new Promise<void>((resolve) => socket.close(() => resolve()));
    try {
      Deno.listen({ hostname: "127.0.0.1", port }).close();
      return port;
    } catch {
      // TCP twin taken: another
    }
  }
}

/** sipp on 127.0.0.1 (never on the host's other addresses), its screen to /dev/null. */
function spawnSipp(args: string[]): Deno.ChildProcess {
  return new Deno.Command("sipp", {
    args: ["-i", "127.0.0.1", "-mi", "127.0.0.1", "-nostdin", "-m", "1", ...args],
    stdin: "null",
    stdout: "null",
    stderr: "piped",
  }).spawn();
}

/** sipp's exit code, killing it past `timeoutMs`; its stderr on failure. */
async function sippResult(sipp: Deno.ChildProcess, timeoutMs: number) {
  const timer = setTimeout(() => {
    try {
      sipp.kill("SIGKILL");
    } catch {
      // exited meanwhile
    }
  }, timeoutMs);
  try {
    const out = await sipp.output();
    return { code: out.code, stderr: new TextDecoder().decode(out.stderr) };
  } finally {
    clearTimeout(timer);
  }
}

const pcmuOffer = (port: number) =>
  [
    "v=0",
    "o=- 1 1 IN IP4 127.0.0.1",
    "s=-",
    "c=IN IP4 127.0.0.1",
    "t=0 0",
    `m=audio ${port} RTP/AVP 0`,
    "a=rtpmap:0 PCMU/8000",
    "",
  ].join("\r\n");

/** The URI of a Contact value (`<sip:...>;params` or a bare URI). */
function contactUri(value: string): string {
  return /<([^>]+)>/.exec(value)?.[1] ?? value.split(";")[0];
}

for (const name of ["UDP", "TCP"] as const) {
  Deno.test(`sipp uas (${name}): INVITE gets 180 then 200, ACK, BYE gets 200, sipp exits 0`, async () => {
    const sippPort = await freePort();
    const sipp = spawnSipp([
      "-sn",
      "uas",
      "-t",
      name === "UDP" ? "u1" : "t1",
      "-p",
      String(sippPort),
      "-cp",
      String(await freePort()),
    ]);
    let result: Promise<{ code: number; stderr: string }> | undefined = sippResult(sipp, 20_000);
    const a = await openLayer({});
    try {
      const to: SipPeer = { transport: name, host: "127.0.0.1", port: sippPort };
      if (name === "TCP") {
        // sipp listens a moment after it starts; UDP would simply retransmit.
        await until(() => {
          try {
            Deno.listen({ hostname: "127.0.0.1", port: sippPort }).close();
            return false;
          } catch {
            return true;
          }
        }, 5000);
      }
      const invite = makeRequest("INVITE", a.transport.port, to, { body: pcmuOffer(40000) });
      const statuses: number[] = [];
      const tx = a.layer.request(invite, to, (r) => statuses.push(r.status));
      const ok = await tx.response;
      statuses.push(ok.status);
      assert.deepEqual(statuses, [180, 200]);
      assert.match(new TextDecoder().decode(ok.body), /m=audio \d+ RTP\/AVP 0/);

      const dialog = (method: string, seq: number): SipRequest => {
        const headers = new SipHeaders();
        headers.add("From", invite.headers.get("From")!);
        headers.add("To", ok.headers.get("To")!);
        headers.add("Call-ID", invite.headers.get("Call-ID")!);
        headers.add("CSeq", `${seq} ${method}`);
        const uri = contactUri(ok.headers.get("Contact")!);
        return { kind: "request", method, uri, headers, body: new Uint8Array() };
      };
      await a.layer.sendAck(dialog("ACK", 1), to);
      const bye = await a.layer.request(dialog("BYE", 2), to).response;
      assert.equal(bye.status, 200);
      const { code, stderr } = await result;
      result = undefined;
      assert.equal(code, 0, stderr);
    } finally {
      await a.close();
      if (result) {
        sipp.kill("SIGKILL");
        await result;
      }
    }
  });

  Deno.test(`sipp uac (${name}) -d 500 calls a handler on the layer: 180, 200, ACK, BYE; sipp exits 0`, async () => {
    const b = await openLayer({});
    let sipp: Deno.ChildProcess | undefined;
    try {
      const seen: string[] = [];
      let invite: ServerTransaction | undefined;
      let ackTo: string | undefined;
      b.layer.onRequest = (req, tx) => {
        seen.push(req.method);
        if (req.method === "INVITE") {
          invite = tx;
          void tx.respond(180, "Ringing", { toTag: "ours" });
          void tx.respond(200, "OK", {
            toTag: "ours",
            headers: [["Contact", `<sip:b@127.0.0.1:${b.transport.port}>`]],
            body: encoder.encode(pcmuOffer(40002)),
            contentType: "application/sdp",
          });
        } else if (req.method === "ACK") {
          ackTo = req.headers.get("To");
          invite?.acknowledged();
        } else {
          void tx.respond(200, "OK");
        }
      };
      sipp = spawnSipp([
        "-sn",
        "uac",
        "-d",
        "500",
        "-t",
        name === "UDP" ? "u1" : "t1",
        "-p",
        String(await freePort()),
        "-cp",
        String(await freePort()),
        `127.0.0.1:${b.transport.port}`,
      ]);
      const { code, stderr } = await sippResult(sipp, 20_000);
      sipp = undefined;
      assert.equal(code, 0, stderr);
      assert.deepEqual(seen, ["INVITE", "ACK", "BYE"]);
      assert.match(ackTo!, /;tag=ours$/);
    } finally {
      if (sipp) {
        sipp.kill("SIGKILL");
        await sipp.output();
      }
      await b.close();
    }
  });
}
