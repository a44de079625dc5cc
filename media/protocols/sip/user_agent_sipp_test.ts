/**
 * The user agent against SIPp: a registrar scenario that challenges with digest
 * (testdata/register_digest_uas.xml) registers us, refuses a wrong password and takes the
 * unregistration; SIPp's built-in `uas` answers our INVITE and exits 0 after our BYE.
 * SIPp must be installed (apt-get install sip-tester): without it these tests fail.
 */
import assert from "node:assert/strict";
import dgram from "node:dgram";
import { fileURLToPath } from "node:url";
import { silentLogger } from "../../../core/log.ts";
import {
  type SipCall,
  type SipCallEnd,
  type SipRegistration,
  type SipRegistrationStatus,
  SipUserAgent,
} from "./user_agent.ts";

const registrarScenario = fileURLToPath(
  new URL("./testdata/register_digest_uas.xml", import.meta.url),
);
const sippWaitMs = 15_000;

/** A UDP port free on 127.0.0.1 now. */
async function freeUdpPort(): Promise<number> {
  const socket = dgram.createSocket("udp4");
  await new Promise<void>((resolve) => socket.bind(0, "127.0.0.1", resolve));
  const { port } = socket.address();
  await new Promise<void>((resolve) => socket.close(() => resolve()));
  return port;
}

/** SIPp running one call as a UAS on 127.0.0.1:port. */
async function startSipp(args: string[]) {
  const port = await freeUdpPort();
  const controlPort = await freeUdpPort();
  const child = new Deno.Command("sipp", {
    args: [
      ...args,
      "-i",
      "127.0.0.1",
      "-mi",
      "127.0.0.1",
      "-p",
      `${port}`,
      "-cp",
      `${controlPort}`,
      "-m",
      "1",
      "-nostdin",
      "-timeout",
      "30s",
    ],
    stdin: "null",
    stdout: "null",
    stderr: "piped",
  }).spawn();
  const stderr = new Response(child.stderr).text();
  let exited = false;
  const status = child.status.then((s) => (exited = true, s));
  // Wait until SIPp holds its port (a bind of ours then fails), without sending it anything.
  for (let i = 0; i < 50 && !exited; i++) {
    const probe = dgram.createSocket("udp4");
    const busy = await new Promise<boolean>((resolve) => {
      probe.once("error", () => resolve(true));
      probe.bind(port, "127.0.0.1", () => resolve(false));
    });
    await new Promise<void>((resolve) => probe.close(() => resolve()));
    if (busy) break;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  if (exited) throw new Error(`sipp exited at start: ${await stderr}`);
  return {
    port,
    /** Exit status, within sippWaitMs. */
    async exit(): Promise<Deno.CommandStatus> {
      let timer: ReturnType<typeof setTimeout> | undefined;
      try {
        return await Promise.race([
          status,
          new Promise<never>((_, reject) =>
            timer = setTimeout(() => reject(new Error("sipp did not exit")), sippWaitMs)
          ),
        ]);
      } finally {
        clearTimeout(timer);
      }
    },
    async stop(): Promise<string> {
      if (!exited) {
        try {
          child.kill("SIGKILL");
        } catch {
          // exited meanwhile
        }
      }
      await status;
      return await stderr;
    },
  };
}

/** sipp as the digest registrar of alice, whose password is `password`. */
function startRegistrar(password: string) {
  return startSipp(["-sf", registrarScenario, "-key", "user", "alice", "-key", "pass", password]);
}

function startAgent(): Promise<SipUserAgent> {
  return SipUserAgent.start({ hostname: "127.0.0.1", port: 0, log: silentLogger });
}

Deno.test("REGISTER answers sipp's digest challenge, is registered, and unregisters on close", async () => {
  const sipp = await startRegistrar("s3cret");
  const ua = await startAgent();
  try {
    let registration!: SipRegistration;
    const first = new Promise<SipRegistrationStatus>((resolve) =>
      registration = ua.register(
        { login: "alice", password: "s3cret", domain: "127.0.0.1", port: sipp.port },
        resolve,
      )
    );
    assert.deepEqual(await first, { registered: true, status: 200, reason: "OK" });
    assert.equal(registration.registered, true);
    await registration.close();
    assert.equal(registration.registered, false);
    const status = await sipp.exit(); // exits 0 once the unregistration was answered
    assert.equal(status.code, 0, "sipp ran the whole registrar scenario");
  } finally {
    await ua.close();
    const stderr = await sipp.stop();
    if (stderr.trim()) console.error(stderr);
  }
});

Deno.test("REGISTER with a wrong password is reported refused (403), not registered", async () => {
  const sipp = await startRegistrar("right");
  const ua = await startAgent();
  try {
    const status = await new Promise<SipRegistrationStatus>((resolve) =>
      ua.register(
        { login: "alice", password: "wrong", domain: "127.0.0.1", port: sipp.port },
        resolve,
      )
    );
    assert.deepEqual(status, { registered: false, status: 403, reason: "Forbidden" });
  } finally {
    await ua.close();
    await sipp.stop();
  }
});

Deno.test("sipp uas answers our INVITE: 180, 200, ESTABLISHED; our BYE lets sipp exit 0", async () => {
  const sipp = await startSipp(["-sn", "uas"]);
  const ua = await startAgent();
  try {
    const call: SipCall = ua.invite({
      account: { login: "alice", domain: "127.0.0.1", port: sipp.port },
      callee: "service",
      sdp: "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n" +
        "m=audio 40000 RTP/AVP 0\r\na=rtpmap:0 PCMU/8000\r\n",
    });
    const progress: number[] = [];
    call.onProgress = (status) => progress.push(status);
    const sdp = await new Promise<string>((resolve, reject) => {
      call.onEstablished = resolve;
      call.onEnded = (end) => reject(new Error(`ended: ${JSON.stringify(end)}`));
    });
    assert.deepEqual(progress, [180]);
    assert.equal(call.state, "ESTABLISHED");
    assert.match(sdp, /m=audio \d+ RTP\/AVP 0/);
    const ended = new Promise<SipCallEnd>((resolve) => call.onEnded = resolve);
    await call.hangup();
    assert.equal((await ended).by, "local");
    assert.equal((await sipp.exit()).code, 0);
  } finally {
    await ua.close();
    await sipp.stop();
  }
});
