/**
 * The Room API of the real `@flashphoner/websdk` 2.0.276 (its `flashphoner-room-api.js` bundle,
 * global `RoomApi`) in three Chromium pages against the built-in `roomApp`: each participant
 * sees the others' streams and plays them (frames decoded in the page), messages arrive, a
 * duplicate login is refused with the reason, leave and disconnect are seen, and the room ends
 * with its last participant. Runs inside a loopback-only network namespace as root;
 * `room_app_test.ts` re-executes this file there.
 */
import assert from "node:assert/strict";
import { createRequire } from "node:module";
import type { Page } from "playwright-core";
// Importing the package's manifest makes Deno install the package (and so its bundle).
import websdkPackage from "@flashphoner/websdk/package.json" with { type: "json" };
import { waitFor } from "../helpers/media_fixtures.ts";
import { startTestServer } from "../helpers/test_server.ts";
import { call, startBrowser } from "./browser.ts";
import { netnsEnv } from "./netns.ts";

/** Longest wait for a state in a page or on the server, in ms (the machine is loaded). */
const waitMs = 20_000;
/** How long played videos are watched for advancing time and frames, in ms. */
const watchMs = 1000;
const room = "conf";

/** What room_app_page.html's `join` resolves with. */
interface Joined {
  participants?: string[];
  streams?: string[];
  failed?: string;
}

/** One played stream's <video>, as `playStats` shows it. */
interface PlayStats {
  from: string;
  statuses: string[];
  width: number;
  currentTime: number;
  frames: number;
}

interface Seen {
  events: string[];
  messages: { from: string | null; text: string }[];
  participants: string[];
}

/**
 * Waits until `page` plays exactly the streams `names`, each PLAYING with a decoded picture,
 * then asserts that every one's time and frame count advance.
 */
async function assertPlays(page: Page, key: string, names: string[]): Promise<void> {
  const before = await waitFor(`${key} playing ${names.join(", ")}`, async () => {
    const stats = await call<Record<string, PlayStats>>(page, "playStats", key);
    const ready = names.every((n) =>
      stats[n]?.statuses.includes("PLAYING") && stats[n].width > 0 && stats[n].frames > 0
    );
    return ready ? stats : undefined;
  }, waitMs);
  assert.deepEqual(Object.keys(before).sort(), [...names].sort());
  await new Promise((r) => setTimeout(r, watchMs));
  const after = await call<Record<string, PlayStats>>(page, "playStats", key);
  for (const name of names) {
    assert.ok(after[name].currentTime > before[name].currentTime, `${key}: ${name} time stands`);
    assert.ok(after[name].frames > before[name].frames, `${key}: ${name} decodes no new frames`);
  }
}

/** Waits until the page's client has seen `event` (e.g. "LEFT carol"). */
function seeEvent(page: Page, key: string, event: string): Promise<Seen> {
  return waitFor(`${key} to see ${event}`, async () => {
    const seen = await call<Seen>(page, "seen", key);
    return seen.events.includes(event) ? seen : undefined;
  }, waitMs);
}

Deno.test("Room API of the Web SDK 2.0.276 in Chromium", async (t) => {
  if (Deno.env.get(netnsEnv) !== "1") {
    throw new Error(`run through tests/e2e/room_app_test.ts (needs a loopback-only netns)`);
  }
  assert.equal(websdkPackage.version, "2.0.276");
  const bundle = createRequire(import.meta.url).resolve(
    "@flashphoner/websdk/flashphoner-room-api.js",
  );
  const server = await startTestServer();
  const browser = await startBrowser(
    "room-chromium-",
    new URL("./room_app_page.html", import.meta.url),
    { "/flashphoner-room-api.js": await Deno.readFile(bundle) },
  );
  try {
    const [alice, bob, carol] = [await browser.open(), await browser.open(), await browser.open()];
    const join = (page: Page, key: string, login: string) =>
      call<Joined>(page, "join", key, server.wsUrl, login, room);
    const publish = async (page: Page, key: string) => {
      const result = await call<{ status: string; name: string; info: string }>(
        page,
        "publish",
        key,
      );
      assert.equal(result.status, "PUBLISHING", result.info);
      // The SDK's room stream naming: `<room>-<login>-<4 hex>`.
      assert.match(result.name, new RegExp(`^${room}-${key}-[0-9a-f]{4}$`));
      return result.name;
    };
    const streams: Record<string, string> = {};

    await t.step("two participants see and play each other's streams", async () => {
      assert.deepEqual(await join(alice, "alice", "alice"), { participants: [], streams: [] });
      streams.alice = await publish(alice, "alice");
      assert.deepEqual(await join(bob, "bob", "bob"), {
        participants: ["alice"],
        streams: [streams.alice],
      });
      streams.bob = await publish(bob, "bob");
      await seeEvent(alice, "alice", "JOINED bob");
      await seeEvent(alice, "alice", "PUBLISHED bob");
      await assertPlays(alice, "alice", [streams.bob]);
      await assertPlays(bob, "bob", [streams.alice]);
    });

    await t.step("a third participant plays both and is played by both", async () => {
      const joined = await join(carol, "carol", "carol");
      assert.deepEqual(joined.participants?.sort(), ["alice", "bob"]);
      assert.deepEqual(joined.streams?.sort(), [streams.alice, streams.bob].sort());
      streams.carol = await publish(carol, "carol");
      await assertPlays(carol, "carol", [streams.alice, streams.bob]);
      await assertPlays(alice, "alice", [streams.bob, streams.carol]);
      await assertPlays(bob, "bob", [streams.alice, streams.carol]);
      assert.deepEqual(server.services.rooms.list(), [{
        name: room,
        participants: ["alice", "bob", "carol"].map((login) => ({
          login,
          streams: [streams[login]],
        })),
      }]);
    });

    await t.step("messages reach the participant they are sent to", async () => {
      await call(alice, "sendMessage", "alice", ["bob"], "hi bob");
      await call(carol, "sendMessage", "carol", ["alice", "bob"], "hello all");
      const toBob = await waitFor("bob's messages", async () => {
        const seen = await call<Seen>(bob, "seen", "bob");
        return seen.messages.length === 2 ? seen.messages : undefined;
      }, waitMs);
      assert.deepEqual(
        toBob.sort((a, b) => a.text.localeCompare(b.text)),
        [{ from: "carol", text: "hello all" }, { from: "alice", text: "hi bob" }],
      );
      const toAlice = await waitFor("alice's message", async () => {
        const seen = await call<Seen>(alice, "seen", "alice");
        return seen.messages.length > 0 ? seen.messages : undefined;
      }, waitMs);
      assert.deepEqual(toAlice, [{ from: "carol", text: "hello all" }]);
      assert.deepEqual((await call<Seen>(carol, "seen", "carol")).messages, []);
    });

    await t.step("a second alice is refused with the reason in the room's FAILED", async () => {
      const refused = await join(carol, "alice2", "alice");
      assert.match(String(refused.failed), /login alice is already in room conf/);
      await call(carol, "disconnect", "alice2");
    });

    await t.step("leave is seen by the others and the leaver's stream ends", async () => {
      assert.equal(await call(carol, "leave", "carol"), true);
      for (const [page, key] of [[alice, "alice"], [bob, "bob"]] as const) {
        const seen = await seeEvent(page, key, "LEFT carol");
        assert.deepEqual(seen.participants.sort(), key === "alice" ? ["bob"] : ["alice"]);
      }
      await waitFor(
        "carol's stream to end",
        () => server.services.streams.published(streams.carol) ? undefined : true,
        waitMs,
      );
    });

    await t.step("a disconnect is seen; the room ends with its last participant", async () => {
      await call(bob, "disconnect", "bob");
      await seeEvent(alice, "alice", "LEFT bob");
      assert.equal(await call(alice, "leave", "alice"), true);
      assert.equal(server.services.rooms.size, 0);
    });
  } finally {
    await browser.close();
    await server.stop();
  }
});
