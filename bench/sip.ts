/**
 * SIP calls (`/call/startup`) against SIPp, in one run (~1.5 minutes):
 * 1. Setup rate: N PCMU calls (`--calls N`, default 2000), at most `--concurrency C` (default
 *    50) at once, each placed by `/call/startup`, waited for until ESTABLISHED, then hung up
 *    by `/call/terminate` (INVITE, 180, 200, ACK, BYE, 200) against a sipp UAS (`-sn uas`,
 *    answering at once). Calls/s and CPU of the server per call, next to sipp as the UAC
 *    (`-sn uac`, the same calls against its own sipp UAS at the same concurrency, rate left
 *    unbounded: sipp's own limit), its CPU per call from /proc and its rate from its own
 *    statistics file. The ratios are ours over sipp's.
 * 2. RTP: `--rtp-calls M` (default 100) calls at once to a sipp UAS that echoes RTP
 *    (tests/peers/sipp/uas_echo.xml, `-rtp_echo`), a long tone played into each
 *    (`/call/inject_sound`); over a 10 s window, the jitter each call measures of the echoed
 *    audio (RFC 3550 interarrival jitter, its median and p95 over the calls), the loss
 *    (packets missing in the received sequence numbers), the server's CPU and RSS. The
 *    peer: a sipp UAC streaming the same tone in as many calls (`rtp_stream`) to another
 *    echoing sipp UAS, its CPU over a window of the same length.
 * 3. Gateway WebRTC↔SIP added latency: a werift peer standing for the Web SDK calls an
 *    echoing sipp through the gateway and times tone bursts there and back (p50/p95).
 * After phase 1, the server's memory right after and once it holds nothing of the ended calls.
 * The server runs in its own process (this file with `--serve`), so its CPU and memory are
 * its own; the REST client and the sipps run beside it on the same cores.
 * Run: deno run -A bench/sip.ts [--calls N] [--concurrency C] [--rtp-calls M]
 *      [--only setup|rtp|latency]...
 */
import { parseArgs } from "node:util";
import { configSchema } from "../config.ts";
import type { Call } from "../core/call.ts";
import { endedCallListedMs } from "../core/call_registry.ts";
import { silentLogger } from "../core/log.ts";
import { run as runCommand } from "../media/formats/test_fixtures.ts";
import { startupBody } from "../tests/helpers/call_checks.ts";
import {
  cpuShareBetween,
  descendants,
  rssMiB,
  sampleTree,
  type TreeSample,
} from "./support/process_tree.ts";
import { freeUdpRange } from "../tests/helpers/process.ts";
import { type Sipp, startSipp } from "../tests/helpers/sipp.ts";
import { startTestServer, testConfig } from "../tests/helpers/test_server.ts";
import { sdkConnectionObject, WcsClient } from "../tests/helpers/wcs_client.ts";
import { BurstPhone, opusBursts } from "./support/burst_phone.ts";
import { lines } from "./support/lines.ts";

/** Time the calls of phase 2 run before the window opens, in milliseconds. */
const rtpWarmupMs = 3000;
/** Time sipp's UAC takes to have all phase 2 calls up (placed in 1 s, answered in 0.2 s), ms. */
const callsUpMs = 1500;
/** Measuring window of phase 2, in milliseconds. */
const rtpWindowMs = 10_000;
/** Length of the tone played into each call, in seconds (longer than warm-up + window). */
const toneSeconds = 30;
/** Length of each tone burst of phase 3, in milliseconds. */
const burstMs = 200;
/** Time phase 3's bursts flow before they are timed, in milliseconds. */
const latencyWarmupMs = 3000;
/** Phase 3's timed stretch, in milliseconds. */
const latencyWindowMs = 10_000;
/** Longest wait for a call to be answered, in milliseconds. */
const answerTimeoutMs = 10_000;
/** Calls placed (and hung up) before phase 1's window, so the JIT is warm. */
const warmupCalls = 20;
/**
 * sipp's UAC places this many times our calls in phase 1: it is so fast that our count would
 * be over in about 0.1 s, too short for a steady rate and CPU figure.
 */
const sippCallsPerOurs = 10;
/** Clock ticks per second of /proc/<pid>/stat (USER_HZ on Linux). */
const clockTicksPerSecond = 100;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** One call's status and media counters, as the server process reports them. */
interface CallStats {
  status: string;
  packetsReceived: number;
  packetsSent: number;
  packetsLost: number;
  jitterMs: number;
}

/**
 * Child mode: the server, answering lines on stdin: `wait <callId>` (answered with the
 * call's status once it is ESTABLISHED or over, UNKNOWN for an unknown call), `stats
 * <callId>...` (each call's status and media counters, null for an unknown call) and
 * `memory` (`Deno.memoryUsage()` after a full garbage collection).
 */
async function serve(callsAtOnce: number): Promise<void> {
  const config = testConfig({ limits: { calls: callsAtOnce } });
  await Deno.mkdir(config.folders.media, { recursive: true });
  const server = await startTestServer(config, silentLogger);
  const answer = (o: unknown) => console.log(JSON.stringify(o));
  answer({ rest: server.restUrl, ws: server.wsUrl, media: config.folders.media });
  for await (const line of lines(Deno.stdin.readable)) {
    const [command, ...ids] = line.split(" ");
    if (command === "wait") {
      const id = ids[0];
      let call: Call;
      try {
        call = server.services.calls.get(id);
      } catch {
        answer({ id, status: "UNKNOWN" });
        continue;
      }
      const settled = () => call.status === "ESTABLISHED" || call.ended;
      if (settled()) answer({ id, status: call.status });
      else {
        const off = call.onStatus(() => {
          if (!settled()) return;
          off();
          answer({ id, status: call.status });
        });
      }
    } else if (command === "memory") {
      // A full collection first, so the heap is what is still referenced.
      (globalThis as { gc?: () => void }).gc?.();
      answer({ memory: Deno.memoryUsage() });
    } else if (command === "stats") {
      answer({
        stats: ids.map((id) => {
          try {
            const call = server.services.calls.get(id);
            const s = call.media.stats;
            return {
              status: call.status,
              packetsReceived: s.packetsReceived,
              packetsSent: s.packetsSent,
              packetsLost: s.packetsLost,
              jitterMs: s.jitterMs,
            } satisfies CallStats;
          } catch {
            return null;
          }
        }),
      });
    }
  }
  await server.stop();
}

/** The server child: REST, its media folder, and the `wait`/`stats` channel. */
async function startChild(callsAtOnce: number) {
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      ...["run", "-A", "--v8-flags=--expose-gc", new URL(import.meta.url).pathname],
      ...["--serve", String(callsAtOnce)],
    ],
    stdin: "piped",
    stdout: "piped",
    stderr: "inherit",
  }).spawn();
  const reader = lines(child.stdout);
  const first = JSON.parse((await reader.next()).value ?? "null") as {
    rest: string;
    ws: string;
    media: string;
  } | null;
  if (!first) throw new Error("the server child did not start");
  const waiting = new Map<string, (status: string) => void>();
  const statsWaiting: ((s: (CallStats | null)[]) => void)[] = [];
  const memoryWaiting: ((m: Deno.MemoryUsage) => void)[] = [];
  const reading = (async () => {
    for await (const line of reader) {
      const message = JSON.parse(line);
      if (message.id) {
        waiting.get(message.id)?.(message.status);
        waiting.delete(message.id);
      } else if (message.stats) statsWaiting.shift()?.(message.stats);
      else if (message.memory) memoryWaiting.shift()?.(message.memory);
    }
  })();
  const writer = child.stdin.getWriter();
  const send = (line: string) => writer.write(new TextEncoder().encode(`${line}\n`));
  return {
    pid: child.pid,
    media: first.media,
    ws: first.ws,
    /** POSTs to the REST API; throws unless it answers 200. */
    async post(path: string, body: unknown): Promise<void> {
      const res = await fetch(`${first.rest}/rest-api${path}`, {
        method: "POST",
        body: JSON.stringify(body),
        headers: { "Content-Type": "application/json" },
      });
      const text = await res.text();
      if (res.status !== 200) throw new Error(`${path} answered ${res.status}: ${text}`);
    },
    /** Resolves with the call's status once it is ESTABLISHED or over (or "TIMEOUT"). */
    async settled(callId: string): Promise<string> {
      const { promise, resolve } = Promise.withResolvers<string>();
      waiting.set(callId, resolve);
      await send(`wait ${callId}`);
      const timer = setTimeout(() => resolve("TIMEOUT"), answerTimeoutMs);
      const status = await promise;
      clearTimeout(timer);
      waiting.delete(callId);
      return status;
    },
    async stats(callIds: string[]): Promise<(CallStats | null)[]> {
      const { promise, resolve } = Promise.withResolvers<(CallStats | null)[]>();
      statsWaiting.push(resolve);
      await send(`stats ${callIds.join(" ")}`);
      return await promise;
    },
    /** The server process's `Deno.memoryUsage()` after a full garbage collection. */
    async memory(): Promise<Deno.MemoryUsage> {
      const { promise, resolve } = Promise.withResolvers<Deno.MemoryUsage>();
      memoryWaiting.push(resolve);
      await send("memory");
      return await promise;
    },
    async stop(): Promise<void> {
      await writer.close();
      await child.status;
      await reading;
    },
  };
}

type Server = Awaited<ReturnType<typeof startChild>>;

/** CPU ticks of a process and its descendants (ffmpeg children of the server). */
const treeTicks = (s: TreeSample) => [...s.ticks.values()].reduce((a, b) => a + b, 0);

/** Runs `task(i)` for i in [0, n) with at most `limit` running at once. */
async function pool(n: number, limit: number, task: (i: number) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(Array.from({ length: Math.min(limit, n) }, async () => {
    while (next < n) await task(next++);
  }));
}

/**
 * Starts a sipp UAC with `args` (after the addresses and ports picked here) in `dir`, under a
 * bash that waits for it: `pid` is bash's (sipp is its only child); `done` resolves with
 * sipp's exit code, its CPU time in seconds (exact: bash's `times` of its reaped children,
 * to the millisecond) and its error output.
 */
async function startSippUac(args: string[], dir: string) {
  const child = new Deno.Command("bash", {
    args: [
      "-c",
      'sipp "$@" >/dev/null; code=$?; times; exit $code',
      "bash",
      ...["-i", "127.0.0.1", "-mi", "127.0.0.1", "-nostdin", "-trace_err"],
      ...["-p", String(await freeUdpRange(1)), "-mp", String(await freeUdpRange(4))],
      ...["-cp", String(await freeUdpRange(1)), ...args],
    ],
    cwd: dir,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const done = child.output().then(({ code, stdout, stderr }) => {
    // `times`: the shell's user and system time, then its children's ("0m0.120s 0m0.040s").
    const children = new TextDecoder().decode(stdout).trim().split("\n").at(-1) ?? "";
    const seconds = [...children.matchAll(/(\d+)m([\d.]+)s/g)]
      .reduce((sum, [, min, sec]) => sum + Number(min) * 60 + Number(sec), 0);
    return { code, cpuSeconds: seconds, errors: new TextDecoder().decode(stderr).slice(-2000) };
  });
  return { pid: child.pid, done };
}

/** What a phase-1 side gives. */
interface SetupResult {
  /** Calls that reached ESTABLISHED and were hung up. */
  ok: number;
  failed: number;
  /** Completed calls per second. */
  rate: number;
  /** CPU per call, in milliseconds. */
  cpuMsPerCall: number;
  /** /call/startup to ESTABLISHED, p50 and p95, in milliseconds (ours). */
  setupP50Ms?: number;
  setupP95Ms?: number;
}

/** Time after which the server holds nothing of an ended call, in milliseconds. */
const forgottenMs = Math.max(endedCallListedMs, 64 * configSchema.parse({}).sip.t1Ms) + 2000;

/** Open file descriptors of `pid`. */
const openFds = (pid: number) => [...Deno.readDirSync(`/proc/${pid}/fd`)].length;

const mib = (bytes: number) => (bytes / 1048576).toFixed(0);

const percentile = (sorted: number[], p: number) =>
  sorted.length ? sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))] : NaN;

/** Our side of phase 1: `n` calls through `/call/startup`, `limit` at once. */
async function oursSetup(server: Server, uas: Sipp, n: number, limit: number, tag: string) {
  const setupMs: number[] = [];
  let failed = 0;
  const before = sampleTree(server.pid);
  await pool(n, limit, async (i) => {
    const callId = `${tag}${i}`;
    const t0 = performance.now();
    await server.post("/call/startup", startupBody(callId, uas.port, "bench"));
    const status = await server.settled(callId);
    if (status !== "ESTABLISHED") {
      failed++;
      return;
    }
    setupMs.push(performance.now() - t0);
    await server.post("/call/terminate", { callId });
  });
  const after = sampleTree(server.pid);
  const seconds = (after.atMs - before.atMs) / 1000;
  setupMs.sort((a, b) => a - b);
  return {
    ok: setupMs.length,
    failed,
    rate: setupMs.length / seconds,
    cpuMsPerCall: (treeTicks(after) - treeTicks(before)) * 1000 / clockTicksPerSecond / n,
    setupP50Ms: percentile(setupMs, 0.5),
    setupP95Ms: percentile(setupMs, 0.95),
  } satisfies SetupResult;
}

/** sipp's side of phase 1: its built-in UAC, `n` calls, `limit` at once, rate unbounded. */
async function sippSetup(n: number, limit: number): Promise<SetupResult> {
  const uas = await startSipp({ scenario: "uas" });
  const dir = await Deno.makeTempDir({ prefix: "bench-sip-" });
  const statFile = `${dir}/stat.csv`;
  try {
    const uac = await (await startSippUac([
      ...["-sn", "uac", "-m", String(n), "-l", String(limit), "-r", "100000", "-d", "0"],
      ...["-trace_stat", "-stf", statFile, "-fd", "1"],
      `127.0.0.1:${uas.port}`,
    ], dir)).done;
    const rows = (await Deno.readTextFile(statFile)).trim().split("\n").map((l) => l.split(";"));
    const column = (name: string) => Number(rows.at(-1)![rows[0].indexOf(name)]);
    const ok = column("SuccessfulCall(C)");
    const failed = column("FailedCall(C)");
    // Times are "date<TAB>time<TAB>epoch seconds" (ElapsedTime has no milliseconds).
    const epoch = (name: string) => Number(rows.at(-1)![rows[0].indexOf(name)].split("\t").at(-1));
    const seconds = epoch("CurrentTime") - epoch("StartTime");
    if (ok === 0) throw new Error(`sipp UAC failed (${uac.code}): ${uac.errors}`);
    return {
      ok,
      failed,
      rate: ok / seconds,
      cpuMsPerCall: uac.cpuSeconds * 1000 / n,
    };
  } finally {
    await uas.stop();
    await Deno.remove(dir, { recursive: true });
  }
}

/** Phase 1: setup rate and CPU per call, ours next to sipp's UAC. */
async function benchSetup(server: Server, n: number, limit: number): Promise<void> {
  console.log(`\nSetup rate: ${n} calls, ${limit} at once, INVITE→200→ACK→BYE→200 each`);
  const uas = await startSipp({ scenario: "uas" });
  const memBefore = await server.memory();
  const rssBefore = rssMiB(server.pid);
  const fdsBefore = openFds(server.pid);
  let ours: SetupResult;
  try {
    await oursSetup(server, uas, warmupCalls, limit, "w");
    ours = await oursSetup(server, uas, n, limit, "s");
  } finally {
    await uas.stop();
  }
  const memAfter = await server.memory();
  const rssAfter = rssMiB(server.pid);
  const fdsAfter = openFds(server.pid);
  // Ended calls stay listed (`/call/find_all`) 10 s and their SIP transactions 64*T1 (RFC
  // 3261 Timer D/M): what is held after both is kept for good.
  await sleep(forgottenMs);
  const memLater = await server.memory();
  const rssLater = rssMiB(server.pid);
  const fdsLater = openFds(server.pid);
  const sipp = await sippSetup(n * sippCallsPerOurs, limit);
  console.log(
    `ours: ${ours.rate.toFixed(0)} calls/s (${ours.ok} ok, ${ours.failed} failed), ` +
      `${ours.cpuMsPerCall.toFixed(3)} ms CPU per call (server process), /call/startup to ` +
      `ESTABLISHED p50 ${ours.setupP50Ms!.toFixed(1)} ms / p95 ${
        ours.setupP95Ms!.toFixed(1)
      } ms, ` +
      `server RSS ${rssBefore.toFixed(0)} MiB before, ${rssAfter.toFixed(0)} MiB after, ` +
      `${rssLater.toFixed(0)} MiB ${
        forgottenMs / 1000
      } s later (ended calls and transactions gone); JS heap ${mib(memBefore.heapUsed)} → ` +
      `${mib(memAfter.heapUsed)} → ${mib(memLater.heapUsed)} MiB, external ${
        mib(memBefore.external)
      } → ${mib(memAfter.external)} → ${
        mib(memLater.external)
      } MiB; open files ${fdsBefore} → ${fdsAfter} → ` +
      `${fdsLater}`,
  );
  console.log(
    `sipp UAC (-sn uac, ${n * sippCallsPerOurs} calls): ${
      sipp.rate.toFixed(0)
    } calls/s (${sipp.ok} ok, ${sipp.failed} ` +
      `failed), ${sipp.cpuMsPerCall.toFixed(3)} ms CPU per call`,
  );
  console.log(
    `ratio ours/sipp: setup rate ${(ours.rate / sipp.rate).toFixed(2)}, CPU per call ${
      (ours.cpuMsPerCall / sipp.cpuMsPerCall).toFixed(2)
    }`,
  );
}

/** A G.711 µ-law WAV tone of `toneSeconds` (sipp's `rtp_stream` plays it as it is). */
async function makeTone(path: string): Promise<void> {
  await runCommand("ffmpeg", [
    ...["-v", "error", "-y", "-f", "lavfi", "-i", `sine=frequency=440:duration=${toneSeconds}`],
    ...["-ar", "8000", "-ac", "1", "-c:a", "pcm_mulaw", path],
  ]);
}

/** Phase 2: `m` calls with RTP echoed by sipp, jitter and loss over a window. */
async function benchRtp(server: Server, m: number): Promise<number> {
  console.log(`\nRTP: ${m} calls at once, a ${toneSeconds} s PCMU tone each, echoed by sipp`);
  await makeTone(`${server.media}/tone.wav`);
  const uas = await startSipp({ scenario: "uas_echo.xml", rtpEcho: true });
  const ids = Array.from({ length: m }, (_, i) => `r${i}`);
  try {
    const heapIdle = (await server.memory()).heapUsed;
    const rssIdle = rssMiB(server.pid);
    await pool(m, 20, async (i) => {
      await server.post("/call/startup", startupBody(ids[i], uas.port, "echo"));
      const status = await server.settled(ids[i]);
      if (status !== "ESTABLISHED") throw new Error(`call ${ids[i]}: ${status}`);
    });
    const heapUp = (await server.memory()).heapUsed;
    await pool(
      m,
      10,
      (i) => server.post("/call/inject_sound", { callId: ids[i], fileName: "tone.wav" }),
    );
    await sleep(rtpWarmupMs);
    const statsBefore = await server.stats(ids);
    const before = sampleTree(server.pid);
    await sleep(rtpWindowMs);
    const after = sampleTree(server.pid);
    const statsAfter = await server.stats(ids);
    const seconds = (after.atMs - before.atMs) / 1000;
    const live = ids.map((_, i) => [statsBefore[i], statsAfter[i]] as const)
      .filter(([b, a]) => b && a && a.status === "ESTABLISHED") as [CallStats, CallStats][];
    const jitters = live.map(([, a]) => a.jitterMs).sort((x, y) => x - y);
    let received = 0, lost = 0, sent = 0;
    for (const [b, a] of live) {
      received += a.packetsReceived - b.packetsReceived;
      lost += a.packetsLost - b.packetsLost;
      sent += a.packetsSent - b.packetsSent;
    }
    const cpu = (treeTicks(after) - treeTicks(before)) / clockTicksPerSecond / seconds;
    console.log(
      `ours: ${live.length}/${m} calls ESTABLISHED through the window; jitter median ${
        percentile(jitters, 0.5).toFixed(2)
      } ms / p95 ${percentile(jitters, 0.95).toFixed(2)} ms / max ${
        (jitters.at(-1) ?? NaN).toFixed(2)
      } ms; loss ${(lost * 100 / Math.max(1, received + lost)).toFixed(3)}% (${lost} packets ` +
        `missing of the echoed sequence; ${sent} sent, ${received} received in the window, ${
          (sent / seconds / live.length).toFixed(1)
        } packets/s per call)`,
    );
    console.log(
      `ours: server CPU ${(cpu * 100).toFixed(1)}% of a core (${
        (cpu * 1000 / live.length).toFixed(2)
      } ms/s per call), RSS ${after.rootRssMiB.toFixed(0)} MiB (${
        rssIdle.toFixed(0)
      } MiB before the calls), JS heap ${((heapUp - heapIdle) / 1024 / m).toFixed(0)} KiB per ` +
        `call (after a full collection, calls up, sound not yet playing)`,
    );
    return cpu;
  } finally {
    await pool(m, 20, (i) => server.post("/call/terminate", { callId: ids[i] }).catch(() => {}));
    await uas.stop();
  }
}

/** Phase 2's peer: a sipp UAC streaming the tone in `m` calls to an echoing sipp UAS. */
async function sippRtp(m: number): Promise<number> {
  const dir = await Deno.makeTempDir({ prefix: "bench-sip-" });
  const uas = await startSipp({ scenario: "uas_echo.xml", rtpEcho: true });
  try {
    await makeTone(`${dir}/tone.wav`);
    const holdMs = callsUpMs + rtpWarmupMs + rtpWindowMs + 1000;
    const uac = await startSippUac([
      ...["-sf", new URL("./support/sipp_uac_stream.xml", import.meta.url).pathname, "-s", "echo"],
      ...["-m", String(m), "-l", String(m), "-r", String(m), "-d", String(holdMs)],
      `127.0.0.1:${uas.port}`,
    ], dir);
    await sleep(callsUpMs + rtpWarmupMs);
    const [pid] = descendants(uac.pid);
    const before = sampleTree(pid);
    await sleep(rtpWindowMs);
    const after = sampleTree(pid);
    const result = await uac.done;
    if (result.code !== 0) throw new Error(`sipp UAC failed (${result.code}): ${result.errors}`);
    const cpu = cpuShareBetween(before, after);
    console.log(
      `sipp UAC streaming the tone (rtp_stream) in ${m} calls: CPU ${(cpu * 100).toFixed(1)}% of ` +
        `a core (${(cpu * 1000 / m).toFixed(2)} ms/s per call), RSS ${
          after.rootRssMiB.toFixed(0)
        } MiB`,
    );
    return cpu;
  } finally {
    await uas.stop();
    await Deno.remove(dir, { recursive: true });
  }
}

/**
 * Phase 3: a werift peer standing for the Web SDK calls a sipp UAS that echoes RTP through
 * the gateway (`call` over the signaling WebSocket, as `session.createCall().call()` sends
 * it) and plays tone bursts; each burst goes WebRTC → SIP (Opus decoded, PCMU encoded),
 * comes back in the echo and goes SIP → WebRTC (PCMU decoded, Opus encoded). On 127.0.0.1
 * the network and the echo add next to nothing, so the delay from a burst sent to its
 * return is what the gateway adds both ways.
 */
async function benchLatency(server: Server): Promise<void> {
  console.log(
    `\nGateway WebRTC↔SIP added latency: one Web SDK call (werift peer, Opus) to an echoing ` +
      `sipp, a ${burstMs} ms tone burst every second`,
  );
  const frames = await opusBursts(10, burstMs);
  const uas = await startSipp({ scenario: "uas_echo.xml", rtpEcho: true });
  const { client } = await WcsClient.connect(
    server.ws,
    sdkConnectionObject({
      sipLogin: "alice",
      sipAuthenticationName: "alice",
      sipPassword: "",
      sipDomain: "127.0.0.1",
      sipOutboundProxy: "",
      sipPort: String(uas.port),
      sipRegisterRequired: false,
    }),
  );
  const phone = new BurstPhone();
  const callId = "latency";
  try {
    client.send("call", {
      callId,
      incoming: false,
      hasVideo: false,
      hasAudio: true,
      status: "PENDING",
      mediaProvider: "WebRTC",
      sdp: await phone.offer(),
      caller: "alice",
      callee: "echo",
      visibleName: "Alice",
    });
    const [, answer] = await client.next("setRemoteSDP", answerTimeoutMs) as [string, string];
    await phone.pc.setRemoteDescription({ type: "answer", sdp: answer });
    const [talk] = await client.next("talk", answerTimeoutMs) as [{ status: string }];
    if (talk.status !== "ESTABLISHED") throw new Error(`the call is ${talk.status}`);
    phone.speak(frames);
    const fromMs = performance.now() + latencyWarmupMs;
    await sleep(latencyWarmupMs + latencyWindowMs);
    const delays = phone.delays(fromMs).sort((a, b) => a - b);
    if (delays.length === 0) {
      console.log(`NOT MEASURED: none of the ${phone.sentSince(fromMs)} bursts came back`);
      return;
    }
    console.log(
      `ours: burst round trip (WebRTC → SIP → echo → WebRTC) p50 ${
        percentile(delays, 0.5).toFixed(0)
      } ms / p95 ${percentile(delays, 0.95).toFixed(0)} ms / min ${
        (delays[0] ?? NaN).toFixed(0)
      } ms over ${delays.length} of ${phone.sentSince(fromMs)} bursts: about ${
        (percentile(delays, 0.5) / 2).toFixed(0)
      } ms added per direction`,
    );
  } finally {
    client.send("hangup", { callId });
    await phone.close();
    await client.close();
    await uas.stop();
  }
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    args: Deno.args,
    options: {
      calls: { type: "string", default: "2000" },
      concurrency: { type: "string", default: "50" },
      "rtp-calls": { type: "string", default: "100" },
      only: { type: "string", multiple: true },
    },
  });
  const n = Number(values.calls);
  const limit = Number(values.concurrency);
  const m = Number(values["rtp-calls"]);
  if (![n, limit, m].every((x) => Number.isInteger(x) && x > 0)) {
    throw new Error("--calls, --concurrency and --rtp-calls take positive integers");
  }
  const load = (await Deno.readTextFile("/proc/loadavg")).split(" ").slice(0, 3).join(" ");
  console.log(`load average before: ${load} (${navigator.hardwareConcurrency} cores)`);
  const server = await startChild(Math.max(limit, m) * 2);
  try {
    const only = values.only ?? ["setup", "rtp", "latency"];
    if (only.includes("setup")) await benchSetup(server, n, limit);
    if (only.includes("rtp")) {
      const ours = await benchRtp(server, m);
      const sipp = await sippRtp(m);
      console.log(`ratio ours/sipp: CPU with RTP ${(ours / sipp).toFixed(2)}`);
    }
    if (only.includes("latency")) await benchLatency(server);
  } finally {
    await server.stop();
  }
}

if (Deno.args[0] === "--serve") await serve(Number(Deno.args[1]));
else await main();
