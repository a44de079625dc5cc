/**
 * Waiting for a promise at most a while: closing a user agent sends BYEs and un-REGISTERs
 * whose transactions may take 64*T1 (32 s) against a silent peer; close does not wait that.
 */

/** Resolves when `promise` settles or after `ms`, whichever comes first; never rejects. */
export async function settledWithin(promise: Promise<unknown>, ms: number): Promise<void> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    await Promise.race([
      promise.then(() => {}, () => {}),
      new Promise<void>((resolve) => timer = setTimeout(resolve, ms)),
    ]);
  } finally {
    clearTimeout(timer);
  }
}
