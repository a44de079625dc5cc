/**
 * How far behind the newest forwarded packet of a layer a late (reordered) packet is still
 * taken, in packets. Shared by the werift-path simulcast switch and the send engine's group
 * moves so both forget a switch at the same distance, well before 16-bit sequence numbers wrap.
 */
export const lateWindowPackets = 0x1000;
