import assert from "node:assert/strict";
import dgram from "node:dgram";
import { bindDatagramSocket } from "./datagram_socket.ts";

Deno.test("bindDatagramSocket delivers datagrams with their sender, refuses a taken port, closes", async () => {
  const socket = (await bindDatagramSocket("127.0.0.1", 0)) ??
    assert.fail("bound on an ephemeral port");
  await socket.close();
  // A fixed port: found free, then taken by a second bind.
  let port = 0;
  let first;
  for (port = 47300 + Math.floor(Math.random() * 500); !first; port++) {
    first = await bindDatagramSocket("127.0.0.1", port);
  }
  port--;
  assert.equal(await bindDatagramSocket("127.0.0.1", port), undefined, "taken");
  const received: { data: number[]; address: string; port: number }[] = [];
  const got = Promise.withResolvers<void>();
  first.start((data, address, from) => {
    received.push({ data: [...data], address, port: from });
    if (received.length === 2) got.resolve();
  });
  const sender = dgram.createSocket("udp4");
  await new Promise<void>((r) => sender.bind(0, "127.0.0.1", () => r()));
  for (const bytes of [[1, 2, 3], [4]]) {
    await new Promise<void>((r) =>
      sender.send(new Uint8Array(bytes), port, "127.0.0.1", () => r())
    );
  }
  await got.promise;
  const senderPort = sender.address().port;
  assert.deepEqual(received, [
    { data: [1, 2, 3], address: "127.0.0.1", port: senderPort },
    { data: [4], address: "127.0.0.1", port: senderPort },
  ]);
  await new Promise<void>((r) => sender.close(() => r()));
  await first.close();
  await first.close();
  // Closed: the port is free again.
  const again = await bindDatagramSocket("127.0.0.1", port);
  assert.ok(again, `port ${port} free after close (${first.kind})`);
  await again.close();
});
