#!/usr/bin/python3
# gst_rtsp_server.py PORT MOUNT AUDIO [USER PASSWORD]
# The RTSP camera of the RTSP pull tests: rtsp://127.0.0.1:PORT/MOUNT serves H.264 640x360 at
# 25 fps (GOP 25) from videotestsrc with AUDIO (aac, pcmu or opus) from audiotestsrc; one live
# pipeline shared by every client, TCP and UDP transports. With USER and PASSWORD it asks for
# Digest authentication. Prints "READY" once it listens. Environment GST_RTSP_VIDEO picks
# another video: "h264-bframes" (H.264 high, 2 B-frames) or "h265-bframes" (H.265, 2 B-frames).
# Needs Debian's /usr/bin/python3 (python3-gi) and gir1.2-gst-rtsp-server-1.0,
# gstreamer1.0-plugins-{base,good,ugly}, gstreamer1.0-libav.
import os
import sys
import gi
gi.require_version("Gst", "1.0")
gi.require_version("GstRtsp", "1.0")
gi.require_version("GstRtspServer", "1.0")
from gi.repository import Gst, GstRtsp, GstRtspServer, GLib

port, mount, audio = sys.argv[1], sys.argv[2], sys.argv[3]
audio_pipeline = {
    "aac": "avenc_aac ! aacparse ! rtpmp4gpay name=pay1 pt=97",
    "pcmu": "audioresample ! audio/x-raw,rate=8000,channels=1 ! mulawenc ! rtppcmupay name=pay1 pt=0",
    "opus": "opusenc ! rtpopuspay name=pay1 pt=97",
}[audio]
video_pipeline = {
    "baseline": "x264enc tune=zerolatency speed-preset=ultrafast key-int-max=25 bitrate=800 threads=1 "
                "! video/x-h264,profile=baseline ! rtph264pay name=pay0 pt=96 config-interval=1",
    "h264-bframes": "x264enc speed-preset=ultrafast key-int-max=25 bitrate=800 threads=1 bframes=2 "
                    "b-adapt=false rc-lookahead=5 ! video/x-h264,profile=high "
                    "! rtph264pay name=pay0 pt=96 config-interval=1",
    "h265-bframes": "x265enc speed-preset=ultrafast key-int-max=25 bitrate=800 "
                    "option-string=bframes=2:b-adapt=0:rc-lookahead=5:pools=1:frame-threads=1 "
                    "! rtph265pay name=pay0 pt=96 config-interval=1",
}[os.environ.get("GST_RTSP_VIDEO", "baseline")]
Gst.init(None)
server = GstRtspServer.RTSPServer()
server.set_address("127.0.0.1")
server.set_service(port)
factory = GstRtspServer.RTSPMediaFactory()
factory.set_shared(True)
factory.set_launch(
    "( videotestsrc is-live=true pattern=smpte ! video/x-raw,width=640,height=360,framerate=25/1 "
    f"! {video_pipeline} "
    "audiotestsrc is-live=true wave=sine freq=440 ! audioconvert ! audioresample "
    f"! {audio_pipeline} )")
if len(sys.argv) > 5:
    auth = GstRtspServer.RTSPAuth()
    auth.set_supported_methods(GstRtsp.RTSPAuthMethod.DIGEST)
    token = GstRtspServer.RTSPToken()
    token.set_string(GstRtspServer.RTSP_TOKEN_MEDIA_FACTORY_ROLE, "camera-user")
    auth.add_digest(sys.argv[4], sys.argv[5], token)
    server.set_auth(auth)
    permissions = GstRtspServer.RTSPPermissions()
    permissions.add_permission_for_role("camera-user", GstRtspServer.RTSP_PERM_MEDIA_FACTORY_ACCESS, True)
    permissions.add_permission_for_role("camera-user", GstRtspServer.RTSP_PERM_MEDIA_FACTORY_CONSTRUCT, True)
    factory.set_permissions(permissions)
server.get_mount_points().add_factory(mount, factory)
if server.attach(None) == 0:
    sys.exit(f"cannot bind 127.0.0.1:{port}")
print("READY", flush=True)
GLib.MainLoop().run()
