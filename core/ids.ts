/** Identifiers the server hands out: its node id and unguessable tokens. */

const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

/** Largest byte value kept: 248 = 4 * 62, so every character is equally likely. */
const unbiasedByteLimit = 248;

/** `length` characters from [A-Za-z0-9], drawn from the system's cryptographic random source. */
export function randomToken(length: number): string {
  const bytes = crypto.getRandomValues(new Uint8Array(length + 8));
  let out = "";
  let i = 0;
  while (out.length < length) {
    if (i === bytes.length) {
      crypto.getRandomValues(bytes);
      i = 0;
    }
    const byte = bytes[i++];
    if (byte < unbiasedByteLimit) out += alphabet[byte % alphabet.length];
  }
  return out;
}

/** Length of the random part of a node id, as in WCS. */
const nodeIdRandomChars = 32;

/** A node id of the WCS form `<32 random chars>@<address>`. */
export function nodeIdFor(address: string): string {
  return `${randomToken(nodeIdRandomChars)}@${address}`;
}
