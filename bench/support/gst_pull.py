#!/usr/bin/python3
# gst_pull.py URI...
# The peer of bench/rtsp.ts: ONE GStreamer process pulling every URI over RTSP/TCP, each
# track through its RTP depayloader (H.264, AAC) into a fakesink: the work our RTSP pull does
# before frames reach readers. Every pull starts at once (no input is opened after another).
# Prints "READY" once every pull has received video, then runs until SIGTERM or SIGINT.
# Needs Debian's /usr/bin/python3 (python3-gi) and gstreamer1.0-plugins-{base,good}.
import signal
import sys
import gi
gi.require_version("Gst", "1.0")
from gi.repository import Gst, GLib

Gst.init(None)
uris = sys.argv[1:]
pipeline = Gst.Pipeline.new("pulls")
depayloaders = {"H264": "rtph264depay", "MPEG4-GENERIC": "rtpmp4gdepay"}
receiving = set()


def on_video(_pad, _info, index):
    if index not in receiving:
        receiving.add(index)
        if len(receiving) == len(uris):
            print("READY", flush=True)
    return Gst.PadProbeReturn.REMOVE


def on_pad(_src, pad, index):
    structure = pad.get_current_caps().get_structure(0)
    name = depayloaders.get(structure.get_string("encoding-name"))
    sink = Gst.ElementFactory.make("fakesink")
    sink.set_property("sync", False)
    chain = [Gst.ElementFactory.make(name), sink] if name else [sink]
    for element in chain:
        pipeline.add(element)
        element.sync_state_with_parent()
    for a, b in zip(chain, chain[1:]):
        a.link(b)
    pad.link(chain[0].get_static_pad("sink"))
    if structure.get_string("media") == "video":
        sink.get_static_pad("sink").add_probe(Gst.PadProbeType.BUFFER, on_video, index)


for index, uri in enumerate(uris):
    src = Gst.ElementFactory.make("rtspsrc")
    src.set_property("location", uri)
    src.set_property("protocols", "tcp")
    src.set_property("latency", 0)
    src.connect("pad-added", on_pad, index)
    pipeline.add(src)

loop = GLib.MainLoop()
for sig in (signal.SIGTERM, signal.SIGINT):
    GLib.unix_signal_add(GLib.PRIORITY_DEFAULT, sig, loop.quit)
bus = pipeline.get_bus()
bus.add_signal_watch()
bus.connect("message::error", lambda _b, m: (print(m.parse_error(), file=sys.stderr), loop.quit()))
pipeline.set_state(Gst.State.PLAYING)
loop.run()
pipeline.set_state(Gst.State.NULL)
