/** The `cdn` group: nodes, routes, state, access lists and transcoding profiles. */
import { z } from "zod";
import { cdnNode, cdnProfile } from "../core/records.ts";
import { noParams, operation, requiredString } from "./operation.ts";

const accessList = z.object({ keys: z.array(requiredString).min(1), name: requiredString });
const byNode = z.object({ nodeId: requiredString });
const cdnStates = z.enum(["NEW_STREAMS_ALLOWED", "GROUP_CONNECTIONS_ALLOWED"]);

/** Operations of the cdn group. */
export const cdnOperations = [
  operation({
    path: "/cdn/show_nodes",
    summary: "List the nodes of the CDN.",
    body: noParams,
    response: z.array(cdnNode),
  }),
  operation({
    path: "/cdn/show_routes",
    summary: "Routes of the CDN: route key to stream name.",
    body: noParams,
    response: z.record(z.string(), z.string()),
  }),
  operation({
    path: "/cdn/show_state",
    summary: "States of this node.",
    body: noParams,
    response: z.array(z.string()),
  }),
  operation({
    path: "/cdn/enforce_state",
    summary: "Force this node into a state.",
    body: z.object({ state: cdnStates }),
    response: null,
  }),
  operation({
    path: "/cdn/stream/show_routes",
    summary: "Routes of one stream through the CDN with their profiles.",
    body: z.object({ streamName: requiredString }),
    response: z.record(z.string(), z.array(z.string())),
  }),
  operation({
    path: "/cdn/stream/access_list/add",
    summary: "Add keys to a stream's access list.",
    body: accessList,
    response: null,
  }),
  operation({
    path: "/cdn/stream/access_list/remove",
    summary: "Remove keys from a stream's access list.",
    body: accessList,
    response: null,
  }),
  operation({
    path: "/cdn/stream/access_list/print",
    summary: "The keys of a stream's access list.",
    body: z.object({ name: requiredString }),
    response: z.array(z.string()),
  }),
  operation({
    path: "/cdn/stream/access_list/delete",
    summary: "Delete a stream's access list.",
    body: z.object({ name: requiredString }),
    response: null,
  }),
  operation({
    path: "/cdn/profile/add",
    summary: "Add a transcoding profile.",
    body: z.object({ name: requiredString, profile: cdnProfile }),
    response: null,
  }),
  operation({
    path: "/cdn/profile/modify",
    summary: "Change fields of a transcoding profile.",
    body: z.object({ name: requiredString, profile: cdnProfile }),
    response: null,
  }),
  operation({
    path: "/cdn/profile/print",
    summary: "Every transcoding profile, by name.",
    body: noParams,
    response: z.record(z.string(), cdnProfile),
  }),
  operation({
    path: "/cdn/profile/remove",
    summary: "Remove a transcoding profile.",
    body: z.object({ name: requiredString }),
    response: null,
  }),
  operation({
    path: "/cdn/remove_node",
    summary: "Remove a node from the CDN.",
    body: z.object({ nodeIp: requiredString }),
    response: null,
  }),
  operation({
    path: "/cdn/connection/reset_inbound",
    summary: "Reset the connection from a node.",
    body: byNode,
    response: null,
  }),
  operation({
    path: "/cdn/connection/reset_outbound",
    summary: "Reset the connection to a node.",
    body: byNode,
    response: null,
  }),
  operation({
    path: "/cdn/connection/reset_all",
    summary: "Reset every CDN connection.",
    body: noParams,
    response: null,
  }),
];
