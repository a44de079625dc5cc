/// <reference lib="deno.worker" />
/**
 * A Worker of the WebRTC bench's receivers: it owns the UDP sockets of a set of werift
 * subscribers (the sockets werift's ICE bound and selected), waits on them with epoll and
 * reads them with recvmmsg over FFI. SRTP packets are authenticated and decrypted here with
 * the subscriber's keys (the server's own FfiSrtpUnprotector) and counted; everything else (STUN,
 * DTLS, SRTCP) goes back to the main thread, where werift keeps ICE, DTLS and RTCP.
 */
import { addressOf } from "../../media/rtp/srtp/libcrypto.ts";
import { rtpHeaderLength } from "../../media/rtp/srtp/rtp_header_length.ts";
import { libcUdp, linux } from "../../media/send_engine/libc_udp.ts";
import { readSockaddr } from "../../media/send_engine/sockaddr.ts";
import { FfiSrtpUnprotector } from "../../media/rtp/srtp/srtp_unprotect_ffi.ts";
import type { ReceiverReply, ReceiverRequest } from "./srtp_receiver_messages.ts";

const epollSymbols = {
  epoll_create1: { parameters: ["i32"], result: "i32" },
  // (epfd, op, fd, struct epoll_event *)
  epoll_ctl: { parameters: ["i32", "i32", "i32", "u64"], result: "i32" },
  // (epfd, events, maxevents, timeout ms) on a thread of its own
  epoll_wait: { parameters: ["i32", "u64", "i32", "i32"], result: "i32", nonblocking: true },
} as const;
const epollCtlAdd = 1;
const epollCtlDel = 2;
const epollIn = 1;
/** struct epoll_event is packed on x86-64: u32 events, u64 data. */
const epollEventBytes = 12;
const maxEvents = 512;
/** Longest wait of one epoll_wait, in ms: how long a stop may take. */
const waitTimeoutMs = 100;

const batchDatagrams = 16;
const slotBytes = 2048;
const mmsghdrBytes = 64;
const iovecBytes = 16;
const nameSlotBytes = 32;
const iovOffset = batchDatagrams * mmsghdrBytes;
const nameOffset = iovOffset + batchDatagrams * iovecBytes;
/** Latency samples kept between two stats requests at most. */
const maxLatencySamples = 20_000;

/** One subscriber's socket. */
interface Receiver {
  unprotector?: FfiSrtpUnprotector;
  /** Last sequence number of each SSRC. */
  last: Map<number, number>;
  /** Packets that passed authentication, and their number at the previous stats. */
  received: number;
  receivedAtStats: number;
}

const { libc, error } = libcUdp();
if (!libc) throw new Error(error);
const epoll = Deno.dlopen("libc.so.6", epollSymbols).symbols;
const epfd = epoll.epoll_create1(linux.SOCK_CLOEXEC);
const events = new Uint8Array(Math.max(4096, maxEvents * epollEventBytes));
const eventsView = new DataView(events.buffer);
const eventsAddress = addressOf(events);
/** epoll_ctl's event, apart from `events`: a message may come while epoll_wait fills that. */
const ctlEvent = new Uint8Array(4096);
const ctlEventView = new DataView(ctlEvent.buffer);
const ctlEventAddress = addressOf(ctlEvent);
const control = new Uint8Array(Math.max(4096, nameOffset + batchDatagrams * nameSlotBytes));
const controlView = new DataView(control.buffer);
const controlAddress = addressOf(control);
const data = new Uint8Array(batchDatagrams * slotBytes);
const dataView = new DataView(data.buffer);
const dataAddress = addressOf(data);
for (let i = 0; i < batchDatagrams; i++) {
  const msg = i * mmsghdrBytes;
  controlView.setBigUint64(msg, controlAddress + BigInt(nameOffset + i * nameSlotBytes), true);
  controlView.setBigUint64(msg + 16, controlAddress + BigInt(iovOffset + i * iovecBytes), true);
  controlView.setUint32(msg + 24, 1, true);
  const iov = iovOffset + i * iovecBytes;
  controlView.setBigUint64(iov, dataAddress + BigInt(i * slotBytes), true);
  controlView.setUint32(iov + 8, slotBytes, true);
}

const receivers = new Map<number, Receiver>();
let stampOffset = 16;
let received = 0;
let failed = 0;
let gaps = 0;
let waiting = 0;
let latencies: number[] = [];
let stopping = false;

function post(reply: ReceiverReply, transfer: Transferable[] = []): void {
  self.postMessage(reply, transfer);
}

/** Sets the epoll registration of `fd`. */
function setInterest(op: number, fd: number): void {
  ctlEventView.setUint32(0, epollIn, true);
  ctlEventView.setBigUint64(4, BigInt(fd), true);
  epoll.epoll_ctl(epfd, op, fd, ctlEventAddress);
}

/** Handles datagram `i` of the batch read from `fd`. */
function handle(fd: number, receiver: Receiver, i: number): void {
  const msg = i * mmsghdrBytes;
  const length = controlView.getUint32(msg + 56, true);
  const offset = i * slotBytes;
  const b0 = data[offset];
  const b1 = data[offset + 1];
  const rtp = b0 >= 128 && b0 < 192 && (b1 < 192 || b1 > 223);
  if (!rtp) {
    const name = readSockaddr(control.subarray(nameOffset + i * nameSlotBytes));
    if (!name) return;
    const copy = data.slice(offset, offset + length);
    post({ type: "datagram", fd, data: copy, address: name.address, port: name.port }, [
      copy.buffer,
    ]);
    return;
  }
  const unprotector = receiver.unprotector;
  if (!unprotector) {
    waiting++;
    return;
  }
  const packet = data.subarray(offset, offset + length);
  const rtpLength = unprotector.unprotect(packet);
  if (rtpLength < 0) {
    failed++;
    return;
  }
  received++;
  receiver.received++;
  const sequence = (packet[2] << 8) | packet[3];
  const ssrc = dataView.getUint32(offset + 8);
  const last = receiver.last.get(ssrc);
  if (last !== undefined) {
    const step = (sequence - last) & 0xffff;
    if (step === 0 || step >= 0x8000) {
      // A duplicate or a late packet: a late one fills a gap counted before.
      if (step !== 0 && gaps > 0) gaps--;
      return;
    }
    gaps += step - 1;
  }
  receiver.last.set(ssrc, sequence);
  if ((sequence & 7) !== 0 || latencies.length >= maxLatencySamples) return;
  const header = rtpHeaderLength(packet, rtpLength);
  if (header + stampOffset + 8 > rtpLength) return;
  const sent = dataView.getFloat64(offset + header + stampOffset, true);
  latencies.push(performance.timeOrigin + performance.now() - sent);
}

/** Reads what `fd` holds (a batch at a time). */
function drain(fd: number): void {
  const receiver = receivers.get(fd);
  if (!receiver) return;
  for (;;) {
    for (let i = 0; i < batchDatagrams; i++) {
      controlView.setUint32(i * mmsghdrBytes + 8, nameSlotBytes, true);
    }
    const count = libc!.recvmmsg(fd, controlAddress, batchDatagrams, linux.MSG_DONTWAIT, 0n);
    if (count <= 0) return;
    for (let i = 0; i < count; i++) handle(fd, receiver, i);
    if (count < batchDatagrams) return;
  }
}

async function loop(): Promise<void> {
  while (!stopping) {
    const ready = await epoll.epoll_wait(epfd, eventsAddress, maxEvents, waitTimeoutMs);
    for (let i = 0; i < ready; i++) {
      drain(Number(eventsView.getBigUint64(i * epollEventBytes + 4, true)));
    }
  }
  libc!.close(epfd);
  for (const receiver of receivers.values()) receiver.unprotector?.close();
  post({ type: "stopped" });
  self.close();
}

self.onmessage = (event: MessageEvent<ReceiverRequest>) => {
  const request = event.data;
  switch (request.type) {
    case "init":
      stampOffset = request.stampOffset;
      break;
    case "add":
      receivers.set(request.fd, { last: new Map(), received: 0, receivedAtStats: 0 });
      setInterest(epollCtlAdd, request.fd);
      break;
    case "keys": {
      const receiver = receivers.get(request.fd);
      if (receiver) {
        receiver.unprotector = new FfiSrtpUnprotector({
          profile: request.profile,
          masterKey: request.masterKey,
          masterSalt: request.masterSalt,
        });
      }
      break;
    }
    case "remove":
      receivers.get(request.fd)?.unprotector?.close();
      receivers.delete(request.fd);
      setInterest(epollCtlDel, request.fd);
      break;
    case "stats": {
      let silent = 0;
      for (const receiver of receivers.values()) {
        if (receiver.unprotector && receiver.received === receiver.receivedAtStats) silent++;
        receiver.receivedAtStats = receiver.received;
      }
      post({ type: "stats", id: request.id, received, failed, gaps, waiting, silent, latencies });
      latencies = [];
      break;
    }
    case "stop":
      stopping = true;
      break;
  }
};

loop();
