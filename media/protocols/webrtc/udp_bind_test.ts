import assert from "node:assert/strict";
import { createSocket, type Socket } from "node:dgram";
import { UdpTransport } from "werift";
import { bindRetrying, installUdpBindRetry } from "./udp_bind.ts";

function bound(socket: Socket, port = 0): Promise<number> {
  return new Promise((resolve) =>
    socket.bind({ port, address: "127.0.0.1" }, () => resolve(socket.address().port))
  );
}

function closed(socket: Socket): Promise<void> {
  return new Promise((resolve) => socket.close(() => resolve()));
}

Deno.test("bindRetrying binds once the port's holder lets go, and receives on it", async () => {
  const holder = createSocket("udp4");
  const port = await bound(holder);
  const socket = createSocket("udp4");
  const received = new Promise<string>((resolve) => socket.on("message", (m) => resolve(`${m}`)));
  // The holder closes 50 ms into the retries, as werift's probe socket does late.
  const release = setTimeout(() => holder.close(), 50);
  await bindRetrying(socket, port, "127.0.0.1");
  clearTimeout(release);
  assert.equal(socket.address().port, port);
  const sender = createSocket("udp4");
  sender.send("hello", port, "127.0.0.1");
  assert.equal(await received, "hello");
  await Promise.all([closed(sender), closed(socket)]);
});

Deno.test("bindRetrying gives up with EADDRINUSE when the port stays taken", async () => {
  const holder = createSocket("udp4");
  const port = await bound(holder);
  const socket = createSocket("udp4");
  await assert.rejects(bindRetrying(socket, port, "127.0.0.1", 100), /EADDRINUSE/);
  await Promise.all([closed(holder), closed(socket)]);
});

Deno.test("werift's UdpTransport binds a port of its range with the retry installed", async () => {
  installUdpBindRetry();
  const finder = createSocket("udp4");
  const port = await bound(finder);
  await closed(finder);
  const transport = await (UdpTransport as unknown as {
    init(type: string, options: unknown): Promise<{ socket: Socket; close(): Promise<void> }>;
  }).init("udp4", { portRange: [port, port], interfaceAddresses: { udp4: "127.0.0.1" } });
  assert.deepEqual(transport.socket.address(), { address: "127.0.0.1", port, family: "IPv4" });
  await transport.close();
});
