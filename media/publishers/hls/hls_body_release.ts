/**
 * Word from the segmenters that a body they served (a segment, a part) left the window: a
 * transport holding a copy of it outside the JS heap (the memfds of hls_ffi_transport.ts)
 * lets that copy go. Costs a Set check when nothing listens.
 */

type Listener = (body: Uint8Array) => void;

const listeners = new Set<Listener>();

/** Calls `listener` with each released body until the returned function is called. */
export function onBodyReleased(listener: Listener): () => void {
  listeners.add(listener);
  return () => listeners.delete(listener);
}

/** `body` will not be served again. */
export function bodyReleased(body: Uint8Array): void {
  if (listeners.size === 0) return;
  for (const listener of listeners) listener(body);
}
