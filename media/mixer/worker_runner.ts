/**
 * Runs kernel jobs in a fixed set of Workers (kernel_worker.ts). Jobs go to the Worker the
 * caller names, their buffers are transferred, and results resolve in submission order even
 * when Workers finish out of order. A failed job rejects with a KernelError and its Worker is
 * replaced (its wasm state may be broken); closing the runner terminates every Worker.
 */

import { KernelError } from "./errors.ts";
import type { ComposeResult, JobReply, JobRequest, KernelJob } from "./kernel_jobs.ts";

/** Options of a WorkerRunner. */
export interface WorkerRunnerOptions {
  /** Workers to start (default 1). */
  workers?: number;
}

interface Pending {
  id: number;
  worker: number;
  done: boolean;
  result?: ComposeResult | null;
  error?: KernelError;
  resolve(result: ComposeResult | null): void;
  reject(error: KernelError): void;
}

const workerUrl = new URL("./kernel_worker.ts", import.meta.url);

/** A pool of kernel Workers owned by one composer or mixer. */
export class WorkerRunner {
  static #live = 0;
  /** The Workers; a replaced one is started again by the next job sent to it. */
  readonly #workers: (Worker | undefined)[] = [];
  readonly #generations: number[] = [];
  /** Jobs not yet handed back to callers, in submission order. */
  readonly #order: Pending[] = [];
  readonly #pending = new Map<number, Pending>();
  #nextId = 1;
  #closed = false;

  /** Starts the Workers. */
  constructor(options: WorkerRunnerOptions = {}) {
    const count = options.workers ?? 1;
    if (!Number.isInteger(count) || count < 1) {
      throw new RangeError(`worker count ${count} is not a positive integer`);
    }
    for (let i = 0; i < count; i++) {
      this.#generations.push(0);
      this.#workers.push(this.#spawn(i));
    }
  }

  /** Workers started by all runners of this thread and not yet terminated (a gauge). */
  static get liveWorkers(): number {
    return WorkerRunner.#live;
  }

  /** Number of Workers. */
  get size(): number {
    return this.#workers.length;
  }

  /**
   * How many times Worker `index` was replaced. A new Worker starts with empty caches, so
   * callers that cache state in a Worker resend it when this changes.
   */
  generation(index: number): number {
    return this.#generations[index];
  }

  #spawn(index: number): Worker {
    const worker = new Worker(workerUrl, { type: "module" });
    WorkerRunner.#live++;
    worker.onmessage = (event: MessageEvent<JobReply>) => {
      const reply = event.data;
      const pending = this.#pending.get(reply.id);
      if (!pending) return;
      if ("error" in reply) {
        this.#settle(pending, undefined, new KernelError(reply.error));
        this.#replace(index, `worker replaced after a failed job: ${reply.error}`);
      } else {
        this.#settle(pending, reply.result);
      }
    };
    worker.onerror = (event: ErrorEvent) => {
      event.preventDefault();
      this.#replace(index, `worker failed: ${event.message}`);
    };
    return worker;
  }

  /**
   * Terminates Worker `index` and fails its other jobs with `reason`. Its successor starts
   * with the next job, so a Worker that cannot start is not restarted in a loop.
   */
  #replace(index: number, reason: string): void {
    if (this.#closed) return;
    this.#terminate(index);
    this.#failWorker(index, reason);
    this.#generations[index]++;
  }

  #terminate(index: number): void {
    const worker = this.#workers[index];
    if (!worker) return;
    worker.terminate();
    this.#workers[index] = undefined;
    WorkerRunner.#live--;
  }

  #failWorker(index: number, reason: string): void {
    for (const pending of [...this.#pending.values()]) {
      if (pending.worker === index) this.#settle(pending, undefined, new KernelError(reason));
    }
  }

  #settle(pending: Pending, result?: ComposeResult | null, error?: KernelError): void {
    this.#pending.delete(pending.id);
    pending.done = true;
    pending.result = result;
    pending.error = error;
    while (this.#order.length > 0 && this.#order[0].done) {
      const head = this.#order.shift()!;
      if (head.error) head.reject(head.error);
      else head.resolve(head.result ?? null);
    }
  }

  /**
   * Runs `job` on Worker `worker` (default 0), transferring `transfer`. Resolves after every
   * job submitted before it has settled.
   */
  run(job: KernelJob, transfer: Transferable[] = [], worker = 0): Promise<ComposeResult | null> {
    if (this.#closed) return Promise.reject(new KernelError("the worker runner is closed"));
    if (!(worker >= 0 && worker < this.#workers.length)) {
      return Promise.reject(new RangeError(`no worker ${worker}`));
    }
    return new Promise((resolve, reject) => {
      const pending: Pending = { id: this.#nextId++, worker, done: false, resolve, reject };
      this.#order.push(pending);
      this.#pending.set(pending.id, pending);
      const request: JobRequest = { id: pending.id, job };
      (this.#workers[worker] ??= this.#spawn(worker)).postMessage(request, transfer);
    });
  }

  /** Terminates every Worker; pending jobs reject with a KernelError. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    for (let i = 0; i < this.#workers.length; i++) {
      this.#terminate(i);
      this.#failWorker(i, "the worker runner is closed");
    }
  }

  /** Same as `close`, for `using`. */
  [Symbol.dispose](): void {
    this.close();
  }
}
