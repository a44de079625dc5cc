/** The `cdn` group: nodes, routes, state, access lists and transcoding profiles. */
import { z } from "zod";
import { cdnNode, cdnProfile } from "../core/records.ts";
import { ConflictError } from "../core/errors.ts";
import type { CdnNode } from "../core/cdn/cdn_node.ts";
import type { Services } from "../core/services.ts";
import { noParams, operation, requiredString } from "./operation.ts";

const accessList = z.object({ keys: z.array(requiredString).min(1), name: requiredString });
const byNode = z.object({ nodeId: requiredString });
const cdnStates = z.enum([
  "NEW_STREAMS_ALLOWED",
  "CONNECTIONS_ALLOWED",
  "GROUP_CONNECTIONS_ALLOWED",
]);

/** This server's CDN node; 409 when the CDN is not enabled here. */
function cdn(services: Services): CdnNode {
  if (!services.cdn) {
    throw new ConflictError("the CDN is not enabled on this node (cdn.enabled)");
  }
  return services.cdn;
}

/** Operations of the cdn group. */
export const cdnOperations = [
  operation({
    path: "/cdn/show_nodes",
    summary: "List the nodes of the CDN.",
    body: noParams,
    response: z.array(cdnNode),
    handle: (_body, { services }) => cdn(services).showNodes(),
  }),
  operation({
    path: "/cdn/show_routes",
    summary: "Routes of the CDN: route key to stream name.",
    body: noParams,
    response: z.record(z.string(), z.string()),
    handle: (_body, { services }) => cdn(services).showRoutes(),
  }),
  operation({
    path: "/cdn/show_state",
    summary: "States of this node.",
    body: noParams,
    response: z.array(z.string()),
    handle: (_body, { services }) => cdn(services).showState(),
  }),
  operation({
    path: "/cdn/enforce_state",
    summary: "Force this node into a state.",
    body: z.object({ state: cdnStates }),
    response: null,
    handle: (body, { services }) => cdn(services).enforceState(body.state),
  }),
  operation({
    path: "/cdn/stream/show_routes",
    summary: "Routes of one stream through the CDN with their profiles.",
    body: z.object({ streamName: requiredString }),
    response: z.record(z.string(), z.array(z.string())),
    handle: (body, { services }) => cdn(services).streamRoutes(body.streamName),
  }),
  operation({
    path: "/cdn/stream/access_list/add",
    summary: "Add keys to a stream's access list.",
    body: accessList,
    response: null,
    handle: (body, { services }) => cdn(services).aclAdd(body.name, body.keys),
  }),
  operation({
    path: "/cdn/stream/access_list/remove",
    summary: "Remove keys from a stream's access list.",
    body: accessList,
    response: null,
    handle: (body, { services }) => cdn(services).aclRemove(body.name, body.keys),
  }),
  operation({
    path: "/cdn/stream/access_list/print",
    summary: "The keys of a stream's access list.",
    body: z.object({ name: requiredString }),
    response: z.array(z.string()),
    handle: (body, { services }) => cdn(services).aclPrint(body.name),
  }),
  operation({
    path: "/cdn/stream/access_list/delete",
    summary: "Delete a stream's access list.",
    body: z.object({ name: requiredString }),
    response: null,
    handle: (body, { services }) => cdn(services).aclDelete(body.name),
  }),
  operation({
    path: "/cdn/profile/add",
    summary: "Add a transcoding profile.",
    body: z.object({ name: requiredString, profile: cdnProfile }),
    response: null,
    handle: (body, { services }) => cdn(services).profileAdd(body.name, body.profile),
  }),
  operation({
    path: "/cdn/profile/modify",
    summary: "Change fields of a transcoding profile.",
    body: z.object({ name: requiredString, profile: cdnProfile }),
    response: null,
    handle: (body, { services }) => cdn(services).profileModify(body.name, body.profile),
  }),
  operation({
    path: "/cdn/profile/print",
    summary: "Every transcoding profile, by name.",
    body: noParams,
    response: z.record(z.string(), cdnProfile),
    handle: (_body, { services }) => cdn(services).profilePrint(),
  }),
  operation({
    path: "/cdn/profile/remove",
    summary: "Remove a transcoding profile.",
    body: z.object({ name: requiredString }),
    response: null,
    handle: (body, { services }) => cdn(services).profileRemove(body.name),
  }),
  operation({
    path: "/cdn/remove_node",
    summary: "Remove a node from the CDN.",
    body: z.object({ nodeIp: requiredString }),
    response: null,
    handle: (body, { services }) => cdn(services).removeNode(body.nodeIp),
  }),
  operation({
    path: "/cdn/connection/reset_inbound",
    summary: "Reset the connection from a node.",
    body: byNode,
    response: null,
    handle: (body, { services }) => void cdn(services).resetConnections("inbound", body.nodeId),
  }),
  operation({
    path: "/cdn/connection/reset_outbound",
    summary: "Reset the connection to a node.",
    body: byNode,
    response: null,
    handle: (body, { services }) => void cdn(services).resetConnections("outbound", body.nodeId),
  }),
  operation({
    path: "/cdn/connection/reset_all",
    summary: "Reset every CDN connection.",
    body: noParams,
    response: null,
    handle: (_body, { services }) => void cdn(services).resetConnections("all"),
  }),
];
