/** The `hls` group: HLS outputs of streams. */
import { z } from "zod";
import { hlsProfileDetails, hlsRecord, hlsSubscriber } from "../core/records.ts";
import { operation, requiredString } from "./operation.ts";

/** Operations of the hls group. */
export const hlsOperations = [
  operation({
    path: "/hls/startup",
    summary: "Start the HLS output of a stream.",
    body: z.object({ name: requiredString }),
    response: null,
    handle: ({ name }, { services }) => services.hls.startup(name),
  }),
  operation({
    path: "/hls/find_all",
    summary: "List HLS outputs, a page at a time.",
    body: z.strictObject({
      offset: z.int().min(0).optional(),
      size: z.int().min(1).max(10_000).optional(),
    }),
    response: z.array(hlsRecord),
    handle: ({ offset, size }, { services }) => services.hls.list(offset, size),
  }),
  operation({
    path: "/hls/terminate",
    summary: "Stop the HLS output of a stream.",
    body: z.object({ name: requiredString }),
    response: null,
    handle: ({ name }, { services }) => services.hls.terminate(name),
  }),
  operation({
    path: "/hls/profiles",
    summary: "Details of one profile of an HLS output.",
    body: z.object({ hlsId: requiredString, profileName: requiredString }),
    response: hlsProfileDetails,
    handle: ({ hlsId, profileName }, { services }) => services.hls.profiles(hlsId, profileName),
  }),
  operation({
    path: "/hls/subscribers",
    summary: "The viewers of an HLS output.",
    body: z.object({ hlsId: requiredString }),
    response: z.array(hlsSubscriber),
    handle: ({ hlsId }, { services }) => services.hls.subscribers(hlsId),
  }),
];
