/**
 * A stand-in for a player's TCP socket in fan-out tests: it records what it is given, and a
 * held one takes nothing (its writes stay pending) until released, as a stalled reader.
 */
export class HeldSocket {
  /** Everything written, in order. */
  written: Uint8Array[] = [];
  #held: (() => void)[] = [];
  /** `hold`: writes stay pending until `release`. */
  constructor(public hold: boolean) {}
  readonly remoteAddr = { transport: "tcp", hostname: "127.0.0.1", port: 1 };
  readonly localAddr = { transport: "tcp", hostname: "127.0.0.1", port: 2 };
  /** Records `bytes`; resolves at once, or on release when held. */
  write(bytes: Uint8Array): Promise<number> {
    this.written.push(bytes);
    if (!this.hold) return Promise.resolve(bytes.length);
    return new Promise((resolve) => this.#held.push(() => resolve(bytes.length)));
  }
  /** Completes the pending writes and takes the next ones at once. */
  release(): void {
    this.hold = false;
    for (const r of this.#held.splice(0)) r();
  }
  /** Nothing to close. */
  close(): void {}
}
