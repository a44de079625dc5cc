/**
 * Targets that misbehave on purpose, for the runner's own test: one crashes on inputs with
 * a 0xff byte, one hangs on inputs starting with 0x00, one is slow on inputs longer than 64
 * bytes. Their seeds are made here (no corpus folder).
 */
import { ParseError } from "../../core/errors.ts";
import type { FuzzTarget } from "../targets.ts";

const seeds = () => [new Uint8Array(48).fill(7), Uint8Array.of(1, 2, 3, 4)];

/** The misbehaving targets. */
export const targets: readonly FuzzTarget[] = [
  {
    name: "crashes",
    seeds,
    maxBytes: 256,
    run(input) {
      if (input.includes(0xff)) throw new TypeError("0xff seen");
      if (input.length < 4) throw new ParseError("short");
    },
  },
  {
    name: "hangs",
    seeds,
    maxBytes: 256,
    run(input) {
      if (input[0] !== 0) return;
      for (;;) {
        // spins until the runner ends the Worker
      }
    },
  },
  {
    name: "slow",
    seeds,
    maxBytes: 256,
    run(input) {
      if (input.length <= 64) return;
      const until = performance.now() + 60;
      while (performance.now() < until) {
        // busy, like a parser stuck on a pathological input
      }
    },
  },
];
