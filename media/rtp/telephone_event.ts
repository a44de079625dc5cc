/**
 * DTMF as RTP events (RFC 4733, formerly RFC 2833): the 4-byte payload (event, end bit,
 * volume, duration), the packets a sender sends for one key (a start packet with the marker
 * bit, updates while the key is held, the end packet three times, all with the timestamp of
 * the event's start), and a receiver that reports each key once however many of those
 * packets arrive.
 */
import { TruncatedError } from "../../core/errors.ts";
import type { RtpPacket } from "./packet.ts";

/** Clock of telephone-event as offered with G.711 (`telephone-event/8000`), in Hz. */
export const telephoneEventClockRate = 8000;
/** Interval between the packets of a held key, in milliseconds (RFC 4733 §2.5.1.2 suggests 50). */
export const eventUpdateIntervalMs = 50;
/** Times the end packet is sent (RFC 4733 §2.5.1.4). */
export const eventEndRepeats = 3;
/** Interval between the repeated end packets, in milliseconds. */
export const eventEndRepeatIntervalMs = 20;
/** Default volume of a sent event: -10 dBm0 (RFC 4733 §2.3.4, 0 to 63, lower is louder). */
export const defaultEventVolume = 10;
/** Events a receiver remembers to recognise their late packets. */
const recentEvents = 8;
/** DTMF keys by event code (RFC 4733 §3.2: 0-9, * = 10, # = 11, A-D = 12-15). */
const eventKeys = "0123456789*#ABCD";

/** The fields of one telephone-event payload. */
export interface TelephoneEvent {
  /** Event code (0-255); DTMF keys are 0-15. */
  event: number;
  /** True in the packets that end the event. */
  end: boolean;
  /** Power level, 0 to 63 (-dBm0). */
  volume: number;
  /** Time since the event began, in clock units (16 bits). */
  duration: number;
}

/** The event code of a DTMF key (0-9, *, #, A-D, case-insensitive), if it is one. */
export function dtmfEventCode(key: string): number | undefined {
  const code = eventKeys.indexOf(key.toUpperCase());
  return key.length === 1 && code >= 0 ? code : undefined;
}

/** The DTMF key of an event code, if it is one. */
export function dtmfEventKey(code: number): string | undefined {
  return eventKeys[code];
}

/** The 4-byte payload of an event. */
export function encodeTelephoneEvent(e: TelephoneEvent): Uint8Array {
  return Uint8Array.of(
    e.event & 0xff,
    (e.end ? 0x80 : 0) | (e.volume & 0x3f),
    (e.duration >> 8) & 0xff,
    e.duration & 0xff,
  );
}

/** Reads an event payload (its first 4 bytes); a shorter one is a TruncatedError. */
export function decodeTelephoneEvent(payload: Uint8Array): TelephoneEvent {
  if (payload.length < 4) throw new TruncatedError("telephone-event payload shorter than 4 bytes");
  return {
    event: payload[0],
    end: (payload[1] & 0x80) !== 0,
    volume: payload[1] & 0x3f,
    duration: (payload[2] << 8) | payload[3],
  };
}

/** One packet of a sent event; every packet of the event has the event's RTP timestamp. */
export interface ScheduledEventPacket {
  /** When to send it, in milliseconds from the event's start. */
  atMs: number;
  /** Marker bit: set on the first packet only. */
  marker: boolean;
  payload: Uint8Array;
}

/**
 * The packets of one key held for `durationMs`: one every `eventUpdateIntervalMs` from the
 * start, each with the duration covered up to the next one, then the end packet
 * `eventEndRepeats` times; durations count in `clockRate` units (the telephone-event's
 * rtpmap clock). A RangeError for a character that is not a DTMF key.
 */
export function telephoneEventSchedule(
  key: string,
  durationMs: number,
  volume = defaultEventVolume,
  clockRate = telephoneEventClockRate,
): ScheduledEventPacket[] {
  const event = dtmfEventCode(key);
  if (event === undefined) throw new RangeError(`not a DTMF key: ${JSON.stringify(key)}`);
  const perMs = clockRate / 1000;
  const total = Math.min(0xffff, Math.round(durationMs * perMs));
  const packets: ScheduledEventPacket[] = [];
  for (let atMs = 0; atMs < durationMs; atMs += eventUpdateIntervalMs) {
    const duration = Math.min(total, Math.round((atMs + eventUpdateIntervalMs) * perMs));
    packets.push({
      atMs,
      marker: atMs === 0,
      payload: encodeTelephoneEvent({ event, end: false, volume, duration }),
    });
  }
  for (let i = 0; i < eventEndRepeats; i++) {
    packets.push({
      atMs: durationMs + i * eventEndRepeatIntervalMs,
      marker: false,
      payload: encodeTelephoneEvent({ event, end: true, volume, duration: total }),
    });
  }
  return packets;
}

/**
 * Reports each received key once: an event is known by its SSRC and RTP timestamp, so the
 * updates and repeated end packets of a key are one event, any one of its packets is
 * enough (lost start or end packets lose nothing), and a key pressed twice is two events.
 */
export class TelephoneEventReceiver {
  /** Events received that were not DTMF keys (flash, tones). */
  ignored = 0;
  #onKey: (key: string) => void;
  /** The latest events as "ssrc:timestamp", oldest first: a late packet of one is no news. */
  #recent: string[] = [];

  /** `onKey` receives each key once. */
  constructor(onKey: (key: string) => void) {
    this.#onKey = onKey;
  }

  /** Offers a telephone-event packet; a payload too short is a TruncatedError. */
  push(packet: RtpPacket): void {
    const event = decodeTelephoneEvent(packet.payload);
    const id = `${packet.ssrc}:${packet.timestamp}`;
    if (this.#recent.includes(id)) return;
    this.#recent.push(id);
    if (this.#recent.length > recentEvents) this.#recent.shift();
    const key = dtmfEventKey(event.event);
    if (key === undefined) this.ignored++;
    else this.#onKey(key);
  }
}
