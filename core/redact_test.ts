import assert from "node:assert/strict";
import { redactPaths, redactText, redactUri, withoutSecrets } from "./redact.ts";

Deno.test("redactUri hides the userinfo password and secret query values", () => {
  assert.equal(
    redactUri("rtsp://admin:s3cret@10.0.0.5:554/cam?token=abc&channel=1"),
    "rtsp://admin:***@10.0.0.5:554/cam?token=***&channel=1",
  );
  assert.equal(redactUri("rtsp://u:p@ss@host/x"), "rtsp://u:***@host/x", "last @ ends userinfo");
  assert.equal(
    redactUri("rtmp://host/live/s?Key=1&AUTH=2&aclAuth=3&pass=4"),
    "rtmp://host/live/s?Key=***&AUTH=***&aclAuth=***&pass=***",
  );
  assert.equal(
    redactUri("rtmp://h/a/s?access_token=x&secret=y&password=z#t"),
    "rtmp://h/a/s?access_token=***&secret=***&password=***#t",
  );
  assert.equal(
    redactUri("srt://host:9000?streamid=cam&passphrase=0123456789&latency=200"),
    "srt://host:9000?streamid=cam&passphrase=***&latency=200",
  );
  assert.equal(redactUri("rtsp://user@host/x?keyframe=1"), "rtsp://user@host/x?keyframe=1");
  assert.equal(redactUri("rtsp://host/x"), "rtsp://host/x");
  assert.equal(redactUri("not a uri: with colon"), "not a uri: with colon");
});

Deno.test("withoutSecrets drops the userinfo and secret parameters", () => {
  assert.equal(withoutSecrets("rtsp://a:b@h:554/cam?token=abc"), "rtsp://h:554/cam");
  assert.equal(withoutSecrets("rtsp://a:b@h/cam?x=1&key=2&y"), "rtsp://h/cam?x=1&y");
  assert.equal(withoutSecrets("rtsp://h/cam"), "rtsp://h/cam");
});

Deno.test("redactText redacts every URI in free text", () => {
  assert.equal(
    redactText('camera rtsp://u:pw@127.0.0.1:9/x?token=abc: cannot connect, "rtmp://v:q@h/a/b"'),
    'camera rtsp://u:***@127.0.0.1:9/x?token=***: cannot connect, "rtmp://v:***@h/a/b"',
  );
  assert.equal(redactText("plain"), "plain");
});

Deno.test("redactPaths removes absolute paths and keeps URIs", () => {
  assert.equal(
    redactPaths("No such file or directory (os error 2): open '/work/main/records/a.mp4'"),
    "No such file or directory (os error 2): open '<path>'",
  );
  assert.equal(
    redactPaths('ENOENT: no such file or directory, open "/tmp/x y"'),
    'ENOENT: no such file or directory, open "<path>"',
  );
  assert.equal(redactPaths("cannot write /var/lib/x.mp4: full"), "cannot write <path>: full");
  assert.equal(redactPaths("module file:///work/main/x.ts failed"), "module <path> failed");
  assert.equal(
    redactPaths("camera rtsp://h:1/a/b and rtsp://[::1]/c/d"),
    "camera rtsp://h:1/a/b and rtsp://[::1]/c/d",
  );
  assert.equal(redactPaths("Stopped by rest /terminate"), "Stopped by rest /terminate");
});
