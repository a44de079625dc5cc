#!/usr/bin/python3
# gst_rtsp_file.py PORT MOUNT FILE
# gst-rtsp-server serving an H.264 + AAC MP4 at rtsp://127.0.0.1:PORT/MOUNT without
# transcoding, in real time, one shared media for every client (what bench/rtsp_fanout.ts
# puts next to the server's RTSP fan-out). Prints "READY" once it listens.
import sys
import gi
gi.require_version("Gst", "1.0")
gi.require_version("GstRtspServer", "1.0")
from gi.repository import Gst, GstRtspServer, GLib

port, mount, path = sys.argv[1], sys.argv[2], sys.argv[3]
Gst.init(None)
server = GstRtspServer.RTSPServer()
server.set_address("127.0.0.1")
server.set_service(port)
factory = GstRtspServer.RTSPMediaFactory()
factory.set_shared(True)
factory.set_launch(
    f"( filesrc location={path} ! qtdemux name=d "
    "d.video_0 ! queue ! h264parse ! rtph264pay name=pay0 pt=96 config-interval=-1 "
    "d.audio_0 ! queue ! aacparse ! rtpmp4gpay name=pay1 pt=97 )")
server.get_mount_points().add_factory(mount, factory)
if server.attach(None) == 0:
    sys.exit(f"cannot bind 127.0.0.1:{port}")
print("READY", flush=True)
GLib.MainLoop().run()
