/**
 * The user agent against baresip (the peers recipe in /work/shared/peers/): we call baresip,
 * which answers by itself, and end the call with BYE; baresip dials sip:alice@<us> and our
 * onIncomingCall answers, then baresip hangs up. The SDP is a fixed PCMU offer whose port is
 * a dummy UDP socket (media is not this layer's). baresip must be installed: without it these
 * tests fail.
 */
import assert from "node:assert/strict";
import dgram from "node:dgram";
import { silentLogger } from "../../../core/log.ts";
import { type SipCall, type SipCallEnd, SipUserAgent } from "./user_agent.ts";

const peersDir = "/work/shared/peers";

function pcmuOffer(port: number): string {
  return [
    "v=0",
    "o=- 1 1 IN IP4 127.0.0.1",
    "s=-",
    "c=IN IP4 127.0.0.1",
    "t=0 0",
    `m=audio ${port} RTP/AVP 0 101`,
    "a=rtpmap:0 PCMU/8000",
    "a=rtpmap:101 telephone-event/8000",
    "a=fmtp:101 0-15",
    "a=sendrecv",
    "",
  ].join("\r\n");
}

async function run(cmd: string, args: string[], env?: Record<string, string>) {
  const out = await new Deno.Command(cmd, { args, env, stdin: "null" }).output();
  return {
    code: out.code,
    stdout: new TextDecoder().decode(out.stdout),
    stderr: new TextDecoder().decode(out.stderr),
  };
}

/** baresip on a free port range, with its control port; stop() ends it. */
async function startBaresip(mode: "auto" | "manual") {
  const dir = await Deno.makeTempDir({ prefix: "baresip-" });
  const env = { PEERS_DIR: dir };
  let lastError = "";
  for (let attempt = 0; attempt < 5; attempt++) {
    const port = 20000 + 2 * Math.floor(Math.random() * 10000);
    const started = await run(
      `${peersDir}/start-baresip.sh`,
      [`${port}`, `${port + 2}`, mode],
      env,
    );
    if (started.code !== 0) {
      lastError = started.stderr;
      continue;
    }
    const pid = started.stdout.trim().split("\n").pop()!;
    return {
      port,
      log: () => Deno.readTextFile(`${dir}/baresip-${port}/baresip.log`),
      ctl: async (...args: string[]) => {
        const r = await run("python3", [`${peersDir}/baresip-ctl.py`, `${port + 2}`, ...args]);
        assert.equal(r.code, 0, `baresip-ctl ${args.join(" ")}: ${r.stdout}${r.stderr}`);
        return r.stdout;
      },
      stop: async () => {
        await run(`${peersDir}/stop-peer.sh`, [pid]);
        await Deno.remove(dir, { recursive: true });
      },
    };
  }
  await Deno.remove(dir, { recursive: true });
  throw new Error(`baresip did not start: ${lastError}`);
}

/** A UDP socket standing in for our RTP port. */
async function mediaSocket() {
  const socket = dgram.createSocket("udp4");
  socket.on("message", () => {});
  await new Promise<void>((resolve) => socket.bind(0, "127.0.0.1", resolve));
  return {
    port: socket.address().port,
    close: () => new Promise<void>((resolve) => socket.close(() => resolve())),
  };
}

async function until(what: string, check: () => Promise<boolean>, timeoutMs = 10_000) {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

Deno.test("we call baresip (auto-answer): established, then our BYE ends it at baresip too", async () => {
  const baresip = await startBaresip("auto");
  const media = await mediaSocket();
  const ua = await SipUserAgent.start({ hostname: "127.0.0.1", port: 0, log: silentLogger });
  try {
    const call = ua.invite({
      account: { login: "alice", domain: "127.0.0.1", port: baresip.port, visibleName: "Alice" },
      callee: "baresip",
      sdp: pcmuOffer(media.port),
    });
    const answer = await new Promise<string>((resolve, reject) => {
      call.onEstablished = resolve;
      call.onEnded = (end) => reject(new Error(`ended: ${JSON.stringify(end)}`));
    });
    assert.equal(call.state, "ESTABLISHED");
    assert.match(answer, /^m=audio \d+ RTP\/AVP 0\b/m);
    await until(
      "baresip's established call",
      async () => /ESTABLISHED/.test(await baresip.ctl("listcalls")),
    );
    const ended = new Promise<SipCallEnd>((resolve) => call.onEnded = resolve);
    await call.hangup();
    assert.equal((await ended).by, "local");
    assert.equal(call.lastStatus, 200, "baresip answered our BYE 200");
    await until(
      "baresip without calls",
      async () => /Active calls \(0\)/.test(await baresip.ctl("listcalls")),
    );
  } finally {
    await ua.close();
    await media.close();
    await baresip.stop();
  }
});

Deno.test("baresip dials sip:alice@<us>: our onIncomingCall answers, baresip's BYE ends it", async () => {
  const baresip = await startBaresip("auto");
  const media = await mediaSocket();
  const ua = await SipUserAgent.start({ hostname: "127.0.0.1", port: 0, log: silentLogger });
  try {
    const incoming = new Promise<SipCall>((resolve) => ua.onIncomingCall = resolve);
    await baresip.ctl("dial", `sip:alice@127.0.0.1:${ua.port}`);
    const call = await incoming;
    assert.equal(call.incoming, true);
    assert.equal(call.callee, "alice");
    assert.equal(call.caller, "baresip");
    assert.match(call.remoteSdp ?? "", /a=rtpmap:0 PCMU\/8000/);
    const up = new Promise<string>((resolve) => call.onEstablished = resolve);
    await call.ring();
    await call.answer(pcmuOffer(media.port));
    assert.match(await up, /m=audio/);
    assert.equal(call.state, "ESTABLISHED");
    await until(
      "baresip's established call",
      async () => /ESTABLISHED/.test(await baresip.ctl("listcalls")),
    );
    const ended = new Promise<SipCallEnd>((resolve) => call.onEnded = resolve);
    await baresip.ctl("hangup");
    assert.deepEqual(await ended, { by: "remote", status: 200, reason: "BYE" });
    assert.equal(ua.calls.size, 0);
  } finally {
    await ua.close();
    await media.close();
    await baresip.stop();
  }
});
