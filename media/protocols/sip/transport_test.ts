import assert from "node:assert/strict";
import dgram from "node:dgram";
import { silentLogger } from "../../../core/log.ts";
import { parseVia } from "./headers.ts";
import { parseSipMessage, type SipMessage, sipMessageText } from "./message.ts";
import { buildResponse, type SipPeer, SipTransport } from "./transport.ts";

const encoder = new TextEncoder();

/** An OPTIONS request's text; `via` is the top Via. */
function optionsText(
  via: string,
  cseq = "1 OPTIONS",
  callId = "c1@test",
  maxForwards = "70",
): string {
  return [
    "OPTIONS sip:server@127.0.0.1 SIP/2.0",
    `Via: ${via}`,
    `Max-Forwards: ${maxForwards}`,
    "From: <sip:alice@127.0.0.1>;tag=a1",
    "To: <sip:server@127.0.0.1>",
    `Call-ID: ${callId}`,
    `CSeq: ${cseq}`,
    "Content-Length: 0",
    "",
    "",
  ].join("\r\n");
}

/** A raw UDP socket on 127.0.0.1 playing the far end, with its datagrams queued. */
class RawUdp {
  readonly received: Uint8Array[] = [];
  #waiters: (() => void)[] = [];
  private constructor(readonly socket: dgram.Socket, readonly port: number) {
    socket.on("message", (data: Uint8Array) => {
      this.received.push(new Uint8Array(data));
      for (const wake of this.#waiters.splice(0)) wake();
    });
  }

  static async open(): Promise<RawUdp> {
    const socket = dgram.createSocket("udp4");
    await new Promise<void>((resolve) => socket.bind(0, "127.0.0.1", () => resolve()));
    return new RawUdp(socket, socket.address().port);
  }

  send(text: string | Uint8Array, port: number): void {
    this.socket.send(typeof text === "string" ? encoder.encode(text) : text, port, "127.0.0.1");
  }

  /** Resolves when `count` datagrams arrived in all, or rejects after `timeoutMs`. */
  async waitFor(count: number, timeoutMs = 2000): Promise<void> {
    const deadline = performance.now() + timeoutMs;
    while (this.received.length < count) {
      const left = deadline - performance.now();
      if (left <= 0) throw new Error(`got ${this.received.length} of ${count} datagrams`);
      let timer: ReturnType<typeof setTimeout> | undefined;
      await new Promise<void>((resolve) => {
        this.#waiters.push(resolve);
        timer = setTimeout(resolve, left);
      });
      clearTimeout(timer);
    }
  }

  close(): Promise<void> {
    return new Promise((resolve) => this.socket.close(() => resolve()));
  }
}

/** A transport on 127.0.0.1 whose received messages are queued. */
async function openTransport(tcpIdleMs?: number, maxTcpConnections?: number) {
  const transport = await SipTransport.open({
    hostname: "127.0.0.1",
    port: 0,
    log: silentLogger,
    tcpIdleMs,
    maxTcpConnections,
  });
  const messages: { message: SipMessage; from: SipPeer }[] = [];
  transport.onMessage = (message, from) => messages.push({ message, from });
  return { transport, messages };
}

/** Polls `check` until it holds or `timeoutMs` passes. */
async function until(check: () => boolean, timeoutMs = 2000): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!check()) {
    if (performance.now() > deadline) throw new Error("condition not met in time");
    await new Promise((r) => setTimeout(r, 5));
  }
}

Deno.test("UDP: a request gets received and rport stamped on its top Via; the answer goes to the source port", async () => {
  const { transport, messages } = await openTransport();
  const far = await RawUdp.open();
  try {
    // The sent-by names another host and port: received and rport carry the real source.
    far.send(optionsText("SIP/2.0/UDP 192.0.2.7:5999;branch=z9hG4bKabc;rport"), transport.port);
    await until(() => messages.length === 1);
    const { message, from } = messages[0];
    assert.deepEqual(from, { transport: "UDP", host: "127.0.0.1", port: far.port });
    assert(message.kind === "request");
    const via = parseVia(message.headers.get("Via")!);
    assert.deepEqual(via.params.get("received"), "127.0.0.1");
    assert.deepEqual(via.params.get("rport"), String(far.port));

    await transport.send(buildResponse(message, 200, "OK", { toTag: "t9" }), from);
    await far.waitFor(1);
    const answer = parseSipMessage(far.received[0]);
    assert(answer.kind === "response");
    assert.deepEqual(answer.status, 200);
    assert.match(answer.headers.get("To")!, /;tag=t9$/);
    assert.deepEqual(transport.stats.received, 1);
    assert.deepEqual(transport.stats.sent, 1);
  } finally {
    await far.close();
    await transport.close();
  }
});

Deno.test("UDP: received is left out when the sent-by is the source and rport was not asked", async () => {
  const { transport, messages } = await openTransport();
  const far = await RawUdp.open();
  try {
    far.send(optionsText(`SIP/2.0/UDP 127.0.0.1:${far.port};branch=z9hG4bKx`), transport.port);
    await until(() => messages.length === 1);
    const via = parseVia(messages[0].message.headers.get("Via")!);
    assert.deepEqual(via.params.has("received"), false);
    assert.deepEqual(via.params.has("rport"), false);
  } finally {
    await far.close();
    await transport.close();
  }
});

Deno.test("UDP: malformed datagrams are answered 400 or dropped, counted, and the loop goes on", async () => {
  const { transport, messages } = await openTransport();
  const far = await RawUdp.open();
  try {
    const via = `SIP/2.0/UDP 127.0.0.1:${far.port};branch=z9hG4bKbad;rport`;
    // Garbage, a request with a broken Max-Forwards (answerable), 65,000 bytes of junk, a
    // response without Via: none reaches the handler.
    far.send(encoder.encode("\x00\x01garbage\r\n\r\n"), transport.port);
    far.send(optionsText(via, "7 OPTIONS", "bad@test", "many"), transport.port);
    far.send(new Uint8Array(65_000).fill(0x41), transport.port);
    far.send("SIP/2.0 200 OK\r\nCSeq: 1 OPTIONS\r\nCall-ID: x\r\n\r\n", transport.port);
    // A CRLF keep-alive is neither a message nor malformed.
    far.send("\r\n\r\n", transport.port);
    far.send(optionsText(via, "2 OPTIONS", "good@test"), transport.port);
    await until(() => messages.length === 1);
    assert.deepEqual(messages[0].message.headers.get("Call-ID"), "good@test");
    await far.waitFor(1);
    const answer = parseSipMessage(far.received[0]);
    assert(answer.kind === "response");
    assert.deepEqual(answer.status, 400);
    assert.deepEqual(answer.headers.get("CSeq"), "7 OPTIONS");
    assert.deepEqual(answer.headers.get("Call-ID"), "bad@test");
    assert.match(answer.headers.get("Warning")!, /Max-Forwards/);
    await until(() => transport.stats.malformed === 4);
    assert.deepEqual(transport.stats.received, 1);
  } finally {
    await far.close();
    await transport.close();
  }
});

Deno.test("TCP: two messages in one chunk and one message in many chunks are framed", async () => {
  const { transport, messages } = await openTransport();
  const conn = await Deno.connect({ hostname: "127.0.0.1", port: transport.port });
  try {
    const { port } = conn.localAddr as Deno.NetAddr;
    const via = (branch: string) => `SIP/2.0/TCP 127.0.0.1:${port};branch=${branch}`;
    const two = optionsText(via("z9hG4bK1"), "1 OPTIONS") +
      optionsText(via("z9hG4bK2"), "2 OPTIONS");
    await conn.write(encoder.encode(two));
    await until(() => messages.length === 2);
    const slow = encoder.encode(optionsText(via("z9hG4bK3"), "3 OPTIONS"));
    for (let at = 0; at < slow.length; at += 7) {
      await conn.write(slow.subarray(at, at + 7));
      await new Promise((r) => setTimeout(r, 1));
    }
    await until(() => messages.length === 3);
    assert.deepEqual(messages.map((m) => m.message.headers.get("CSeq")), [
      "1 OPTIONS",
      "2 OPTIONS",
      "3 OPTIONS",
    ]);
    assert.deepEqual(transport.stats.tcpConnections, 1);

    // The answer goes back over the connection the request came on.
    const { message, from } = messages[2];
    assert(message.kind === "request");
    await transport.send(buildResponse(message, 200, "OK"), from);
    const buf = new Uint8Array(4096);
    const n = await conn.read(buf);
    const answer = parseSipMessage(buf.subarray(0, n!));
    assert(answer.kind === "response");
    assert.deepEqual(answer.headers.get("CSeq"), "3 OPTIONS");
  } finally {
    conn.close();
    await transport.close();
  }
});

Deno.test("TCP: a framing error closes the connection and is counted; others go on", async () => {
  const { transport, messages } = await openTransport();
  const bad = await Deno.connect({ hostname: "127.0.0.1", port: transport.port });
  try {
    await bad.write(encoder.encode("NOT SIP AT ALL\r\n\r\n"));
    // The server closes: the read ends.
    assert.deepEqual(await bad.read(new Uint8Array(100)), null);
    assert.deepEqual(transport.stats.malformed, 1);
    await until(() => transport.stats.tcpConnections === 0);
  } finally {
    bad.close();
  }
  const good = await Deno.connect({ hostname: "127.0.0.1", port: transport.port });
  try {
    const { port } = good.localAddr as Deno.NetAddr;
    await good.write(encoder.encode(optionsText(`SIP/2.0/TCP 127.0.0.1:${port};branch=z9hG4bKg`)));
    await until(() => messages.length === 1);
  } finally {
    good.close();
    await transport.close();
  }
});

Deno.test("TCP: send opens one connection, reuses it both ways, and an idle one is closed", async () => {
  const a = await openTransport(300);
  const b = await openTransport();
  try {
    const to: SipPeer = { transport: "TCP", host: "127.0.0.1", port: b.transport.port };
    const request = parseSipMessage(encoder.encode(
      optionsText(`SIP/2.0/TCP 127.0.0.1:${a.transport.port};branch=z9hG4bKt`),
    ));
    await a.transport.send(request, to);
    await a.transport.send(request, to);
    await until(() => b.messages.length === 2);
    assert.deepEqual(a.transport.stats.tcpConnections, 1);
    assert.deepEqual(b.transport.stats.tcpConnections, 1);
    // b answers over the connection a opened.
    const { message, from } = b.messages[0];
    assert(message.kind === "request");
    await b.transport.send(buildResponse(message, 200, "OK"), from);
    await until(() => a.messages.length === 1);
    assert.deepEqual(a.messages[0].from.port, b.transport.port);
    assert.deepEqual(b.transport.stats.tcpConnections, 1);
    // Past 300 ms without traffic a closes it, and b sees the end.
    await until(() => a.transport.stats.tcpConnections === 0, 3000);
    await until(() => b.transport.stats.tcpConnections === 0);
    assert.deepEqual(sipMessageText(message).startsWith("OPTIONS"), true);
  } finally {
    await a.transport.close();
    await b.transport.close();
  }
});

Deno.test("TCP: a send to a port nobody listens on rejects with SipTransportError", async () => {
  const { transport } = await openTransport();
  const probe = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (probe.addr as Deno.NetAddr).port;
  probe.close();
  try {
    const request = parseSipMessage(encoder.encode(
      optionsText(`SIP/2.0/TCP 127.0.0.1:${transport.port};branch=z9hG4bKn`),
    ));
    let error: unknown;
    await transport.send(request, { transport: "TCP", host: "127.0.0.1", port }).catch((e) =>
      error = e
    );
    assert.deepEqual((error as Error)?.name, "SipTransportError");
    assert.deepEqual(transport.stats.tcpConnections, 0);
  } finally {
    await transport.close();
  }
});

Deno.test("TCP: connections beyond the cap are refused (closed at once), the others served", async () => {
  const { transport, messages } = await openTransport(undefined, 1);
  const first = await Deno.connect({ hostname: "127.0.0.1", port: transport.port });
  const second = await Deno.connect({ hostname: "127.0.0.1", port: transport.port });
  try {
    assert.deepEqual(await second.read(new Uint8Array(100)), null);
    assert.deepEqual(transport.stats.tcpConnections, 1);
    const { port } = first.localAddr as Deno.NetAddr;
    await first.write(encoder.encode(optionsText(`SIP/2.0/TCP 127.0.0.1:${port};branch=z9hG4bKc`)));
    await until(() => messages.length === 1);
  } finally {
    first.close();
    second.close();
    await transport.close();
  }
});

Deno.test("UDP: 2,000 mutated requests never end the receive loop", async () => {
  const { transport, messages } = await openTransport();
  const far = await RawUdp.open();
  try {
    const base = encoder.encode(
      optionsText(`SIP/2.0/UDP 127.0.0.1:${far.port};branch=z9hG4bKfuzz;rport`),
    );
    let state = 7;
    const random = () => {
      state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
      return state / 2 ** 32;
    };
    for (let i = 0; i < 2000; i++) {
      const data = base.slice(0, 1 + Math.floor(random() * base.length));
      for (let flips = 1 + Math.floor(random() * 4); flips > 0; flips--) {
        data[Math.floor(random() * data.length)] = Math.floor(random() * 256);
      }
      far.send(data, transport.port);
      if (i % 100 === 0) await new Promise((r) => setTimeout(r, 1));
    }
    // A pause lets the burst drain, so the kernel does not drop the last one.
    await new Promise((r) => setTimeout(r, 100));
    far.send(
      optionsText(`SIP/2.0/UDP 127.0.0.1:${far.port};branch=z9hG4bKok`, "1 OPTIONS", "last@test"),
      transport.port,
    );
    await until(() => messages.some((m) => m.message.headers.get("Call-ID") === "last@test"), 5000);
    assert.ok(transport.stats.malformed > 0);
  } finally {
    await far.close();
    await transport.close();
  }
});

Deno.test("TCP: a response whose connection closed goes to the Via's received address and sent-by port", async () => {
  const { transport, messages } = await openTransport();
  // The far end's listener, named as sent-by; its request comes from another connection.
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const sentByPort = (listener.addr as Deno.NetAddr).port;
  const client = await Deno.connect({ hostname: "127.0.0.1", port: transport.port });
  let accepted: Deno.Conn | undefined;
  try {
    await client.write(
      encoder.encode(optionsText(`SIP/2.0/TCP 127.0.0.1:${sentByPort};branch=z9hG4bKgone`)),
    );
    await until(() => messages.length === 1);
    client.close();
    await until(() => transport.stats.tcpConnections === 0);
    const { message, from } = messages[0];
    assert.ok(message.kind === "request");
    const sent = transport.send(buildResponse(message, 200, "OK"), from);
    accepted = await listener.accept();
    await sent;
    const buf = new Uint8Array(4096);
    const n = await accepted.read(buf);
    const answer = parseSipMessage(buf.subarray(0, n!));
    assert.ok(answer.kind === "response");
    assert.deepEqual(answer.status, 200);
  } finally {
    accepted?.close();
    listener.close();
    await transport.close();
  }
});
