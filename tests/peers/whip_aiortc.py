"""A WHIP publisher made with aiortc (Debian python3-aiortc), for the WHIP browser suite.

Usage: /usr/bin/python3 whip_aiortc.py <whip-url> <seconds>
Publishes ffmpeg's testsrc2 picture and a sine tone, prints one JSON line once connected
({"post": 201, "location": ..., "state": "connected"}), keeps sending for <seconds>, then
DELETEs the session and prints {"delete": <status>}. No STUN server: loopback only.
"""
import asyncio
import json
import sys
from urllib.parse import urljoin

import aiohttp
import aioice.ice
from aiortc import RTCConfiguration, RTCPeerConnection, RTCRtpSender, RTCSessionDescription
from aiortc.contrib.media import MediaPlayer

# aioice leaves 127.0.0.1 out of its host candidates; the tests run on loopback only.
aioice.ice.get_host_addresses = lambda use_ipv4, use_ipv6: ["127.0.0.1"]


async def main(url: str, seconds: float) -> None:
    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    video = MediaPlayer("testsrc2=size=320x240:rate=25", format="lavfi")
    audio = MediaPlayer("sine=frequency=440:sample_rate=48000", format="lavfi")
    # VP8 only: aiortc 1.4's H.264 encoder ignores keyframe requests (PLI), so a player
    # joining after the first keyframe would wait for libx264's next one (250 frames).
    vp8 = [c for c in RTCRtpSender.getCapabilities("video").codecs if c.mimeType == "video/VP8"]
    pc.addTransceiver(video.video, direction="sendonly").setCodecPreferences(vp8)
    pc.addTransceiver(audio.audio, direction="sendonly")
    connected = asyncio.Event()

    @pc.on("connectionstatechange")
    def on_state() -> None:
        if pc.connectionState == "connected":
            connected.set()

    # aiortc gathers every candidate before the offer is set: no trickle needed.
    await pc.setLocalDescription(await pc.createOffer())
    async with aiohttp.ClientSession() as http:
        async with http.post(
            url, data=pc.localDescription.sdp, headers={"Content-Type": "application/sdp"}
        ) as res:
            answer = await res.text()
            if res.status != 201:
                print(json.dumps({"post": res.status, "body": answer}), flush=True)
                await pc.close()
                return
            location = urljoin(url, res.headers["Location"])
        await pc.setRemoteDescription(RTCSessionDescription(sdp=answer, type="answer"))
        await asyncio.wait_for(connected.wait(), 10)
        print(json.dumps({"post": 201, "location": location, "state": "connected"}), flush=True)
        await asyncio.sleep(seconds)
        async with http.delete(location) as res:
            print(json.dumps({"delete": res.status}), flush=True)
    await pc.close()
    video.video.stop()
    audio.audio.stop()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], float(sys.argv[2])))
