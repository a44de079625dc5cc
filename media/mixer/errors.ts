import { MediaServerError } from "../../core/errors.ts";

/**
 * A media kernel failed: invalid frame geometry, a wasm trap, or a Worker that died or was
 * closed while the job was pending. The Worker that ran the job is replaced.
 */
export class KernelError extends MediaServerError {
  constructor(message: string, options?: ErrorOptions) {
    super(500, "kernel error", message, options);
  }
}
