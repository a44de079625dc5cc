/**
 * SRTP fan-out send cost (issue #19, fastpath.md): packets/s per core of werift's path
 * (SrtpSession.encrypt + node:dgram send) against the FFI send path (libcrypto protect +
 * sendmmsg, without and with UDP GSO, on the main thread) and the SendEngine's Workers, in
 * one run: 1,000 subscribers, 5-packet frames. Receivers are bound FFI sockets that are never
 * read (fastpath.md's "sink"), all on 127.0.0.1. "Per core" is packets over the CPU time of
 * the process (all threads) plus the kernel's ksoftirqd threads: on loopback the delivery of a
 * datagram may run there instead of in the sender's system call, and another process's traffic
 * in the same seconds is charged too (so the figure is a lower bound on a shared machine).
 * Not part of the test suite.
 * Usage: deno run -A bench/srtp_send.ts [seconds per row, default 2] [payload bytes, default 1200]
 */
import process from "node:process";
import dgram from "node:dgram";
import { randomBytes } from "node:crypto";
import { Buffer } from "node:buffer";
import { RtpHeader, SrtpSession } from "werift";
import { Fanout } from "../media/send_engine/fanout.ts";
import { BatchWriter } from "../media/send_engine/send_batch.ts";
import { SendEngine } from "../media/send_engine/send_engine.ts";
import { UdpBatchSender } from "../media/send_engine/udp_batch_sender.ts";
import type { SrtpProfile } from "../media/rtp/srtp/srtp_profile.ts";

const seconds = Number(Deno.args[0] ?? 2);
const payloadBytes = Number(Deno.args[1] ?? 1200);
const subscribers = 1000;
const framePackets = 5;
const sinkCount = 8;
const weriftInflight = 64;

/** ksoftirqd threads (per CPU) whose time counts with the process's. */
const softirqPids = [...Deno.readDirSync("/proc")]
  .filter((e) => /^\d+$/.test(e.name))
  .filter((e) => {
    try {
      return Deno.readTextFileSync(`/proc/${e.name}/comm`).startsWith("ksoftirqd/");
    } catch {
      return false;
    }
  })
  .map((e) => e.name);

/** CPU seconds of ksoftirqd so far (clock ticks of 10 ms). */
function softirqSec(): number {
  let ticks = 0;
  for (const pid of softirqPids) {
    const fields = Deno.readTextFileSync(`/proc/${pid}/stat`).split(") ")[1].split(" ");
    ticks += Number(fields[11]) + Number(fields[12]);
  }
  return ticks / 100;
}

/** CPU seconds of this process (all threads) plus ksoftirqd, since `from`. */
function cpuSince(from: { process: NodeJS.CpuUsage; softirq: number }): number {
  const cpu = process.cpuUsage(from.process);
  return (cpu.user + cpu.system) / 1e6 + softirqSec() - from.softirq;
}

function cpuNow() {
  return { process: process.cpuUsage(), softirq: softirqSec() };
}

interface Row {
  name: string;
  packets: number;
  dropped: number;
  cpuSec: number;
  wallSec: number;
}

/** Runs `step` (which returns packets sent) until `seconds` pass; CPU of the whole process. */
async function measure(
  name: string,
  step: () => number | Promise<number>,
  dropped: () => number | Promise<number> = () => 0,
): Promise<Row> {
  const cpu0 = cpuNow();
  const start = performance.now();
  let packets = 0;
  while (performance.now() - start < seconds * 1000) packets += await step();
  const wallSec = (performance.now() - start) / 1000;
  const cpuSec = cpuSince(cpu0);
  return { name, packets, dropped: await dropped(), cpuSec, wallSec };
}

function print(row: Row): void {
  const perCore = Math.round(row.packets / row.cpuSec);
  console.log(
    `${row.name.padEnd(58)} ${String(perCore).padStart(8)} pkt/s per core  ` +
      `(wall ${Math.round(row.packets / row.wallSec)} pkt/s, ${
        (row.cpuSec / row.wallSec).toFixed(2)
      } cores, ` +
      `${(1e6 * row.cpuSec / row.packets).toFixed(2)} us/pkt, dropped ${row.dropped})`,
  );
}

/** One publisher frame: `framePackets` RTP packets of `payloadBytes`. */
function frame(sequence: number): Uint8Array[] {
  return Array.from({ length: framePackets }, (_, i) => {
    const packet = new Uint8Array(12 + payloadBytes);
    const view = new DataView(packet.buffer);
    packet[0] = 0x80;
    packet[1] = 96;
    view.setUint16(2, (sequence + i) & 0xffff);
    view.setUint32(4, sequence * 3000);
    view.setUint32(8, 0x1234);
    packet.set(randomBytes(payloadBytes), 12);
    return packet;
  });
}

function keysOf(profile: SrtpProfile) {
  return {
    masterKey: randomBytes(16),
    masterSalt: randomBytes(profile === "AEAD_AES_128_GCM" ? 12 : 14),
  };
}

const weriftIds: Record<string, number> = { AES_CM_128_HMAC_SHA1_80: 1, AEAD_AES_128_GCM: 7 };

async function weriftRow(profile: SrtpProfile, sinkPorts: number[]): Promise<Row> {
  const sessions = Array.from({ length: subscribers }, () => {
    const k = keysOf(profile);
    return new SrtpSession({
      profile: weriftIds[profile],
      keys: {
        localMasterKey: k.masterKey,
        localMasterSalt: k.masterSalt,
        remoteMasterKey: k.masterKey,
        remoteMasterSalt: k.masterSalt,
      },
    });
  });
  const socket = dgram.createSocket("udp4");
  await new Promise<void>((resolve) => socket.bind(0, "127.0.0.1", resolve));
  const header = new RtpHeader({ ssrc: 0x1234, payloadType: 96 });
  let inflight = 0;
  let wake: (() => void) | undefined;
  const settled = () => {
    inflight--;
    if (wake && inflight < weriftInflight / 2) {
      wake();
      wake = undefined;
    }
  };
  let sequence = 0;
  const packets = frame(0).map((p) => Buffer.from(p.subarray(12)));
  const row = await measure(`werift: SrtpSession.encrypt + node:dgram (${profile})`, async () => {
    let sent = 0;
    for (let s = 0; s < 50; s++) {
      const session = sessions[(sequence + s) % subscribers];
      for (const payload of packets) {
        header.sequenceNumber = sequence++ & 0xffff;
        const srtp = session.encrypt(payload, header);
        inflight++;
        socket.send(srtp, sinkPorts[s % sinkCount], "127.0.0.1", settled);
        sent++;
        if (inflight >= weriftInflight) await new Promise<void>((resolve) => wake = resolve);
      }
    }
    return sent;
  });
  while (inflight > 0) await new Promise((resolve) => setTimeout(resolve, 1));
  await new Promise<void>((resolve) => socket.close(() => resolve()));
  return row;
}

function fanoutRow(profile: SrtpProfile, gso: boolean, sinkPorts: number[]): Row {
  const fanout = new Fanout({ bindHost: "127.0.0.1", gso });
  for (let s = 0; s < subscribers; s++) {
    fanout.add({
      handle: s + 1,
      host: "127.0.0.1",
      port: sinkPorts[s % sinkCount],
      profile,
      ...keysOf(profile),
      groups: [{ group: 1, ssrc: 0x5000 + s }],
    });
  }
  let sequence = 0;
  const writer = new BatchWriter();
  return measureSync(
    `ffi: protect + sendmmsg${gso ? " + GSO" : ""}, main thread (${profile})`,
    () => {
      for (const packet of frame(sequence)) writer.append(1, packet);
      sequence += framePackets;
      fanout.send(new Uint8Array(writer.take()));
      return subscribers * framePackets;
    },
    () => {
      const dropped = fanout.stats().reduce((sum, v, i) => (i % 3 === 2 ? sum + v : sum), 0);
      fanout.close();
      return dropped;
    },
  );
}

function measureSync(name: string, step: () => number, dropped: () => number): Row {
  const cpu0 = cpuNow();
  const start = performance.now();
  let packets = 0;
  while (performance.now() - start < seconds * 1000) packets += step();
  const wallSec = (performance.now() - start) / 1000;
  const cpuSec = cpuSince(cpu0);
  return { name, packets, dropped: dropped(), cpuSec, wallSec };
}

async function engineRow(profile: SrtpProfile, workers: number, sinkPorts: number[]): Promise<Row> {
  const engine = await SendEngine.start({ workers, bindHost: "127.0.0.1" });
  for (let s = 0; s < subscribers; s++) {
    engine.addSubscriber({
      id: `s${s}`,
      host: "127.0.0.1",
      port: sinkPorts[s % sinkCount],
      profile,
      keys: keysOf(profile),
      groups: [{ group: "video", ssrc: 0x5000 + s }],
    });
  }
  await engine.stats(); // every Worker has its subscribers
  let sequence = 0;
  const frames = Array.from({ length: 16 }, (_, i) => frame(i * framePackets));
  const total = async () => {
    let sent = 0;
    let dropped = 0;
    for (const s of (await engine.stats()).values()) {
      sent += s.sent;
      dropped += s.dropped;
    }
    return { sent, dropped };
  };
  const cpu0 = cpuNow();
  const start = performance.now();
  while (performance.now() - start < seconds * 1000) {
    // 8 frames a turn, then wait until the Workers have sent them (backpressure).
    for (let f = 0; f < 8; f++) {
      for (const packet of frames[sequence++ % frames.length]) engine.publish("video", packet);
      engine.flush();
    }
    await engine.stats();
  }
  const wallSec = (performance.now() - start) / 1000;
  const cpuSec = cpuSince(cpu0);
  const { sent, dropped } = await total();
  await engine.close();
  return {
    name: `SendEngine, ${workers} Worker(s) (${profile})`,
    packets: sent,
    dropped,
    cpuSec,
    wallSec,
  };
}

const sinkData = new Uint8Array(4096);
const sinks = Array.from(
  { length: sinkCount },
  () => UdpBatchSender.open({ data: sinkData, bindHost: "127.0.0.1" }),
);
const sinkPorts = sinks.map((s) => s.port);
console.log(
  `srtp_send: ${subscribers} subscribers, ${payloadBytes} B payload, ${framePackets}-packet frames, ` +
    `${seconds} s per row, ${navigator.hardwareConcurrency} cores, sink receivers`,
);
const rows: Row[] = [];
try {
  for (const profile of ["AES_CM_128_HMAC_SHA1_80", "AEAD_AES_128_GCM"] as const) {
    const werift = await weriftRow(profile, sinkPorts);
    print(werift);
    const plain = fanoutRow(profile, false, sinkPorts);
    print(plain);
    const gso = fanoutRow(profile, true, sinkPorts);
    print(gso);
    for (const workers of [1, 2]) {
      const row = await engineRow(profile, workers, sinkPorts);
      print(row);
      rows.push(row);
    }
    const perCore = (r: Row) => r.packets / r.cpuSec;
    console.log(
      `${profile}: ffi ${(perCore(plain) / perCore(werift)).toFixed(1)}x werift, ` +
        `ffi+GSO ${(perCore(gso) / perCore(werift)).toFixed(1)}x werift (per core)`,
    );
  }
} finally {
  for (const sink of sinks) sink.close();
}
