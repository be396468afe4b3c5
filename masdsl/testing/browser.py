"""A real headless browser for tests: Debian's `chromium`, driven over the DevTools protocol
through a pipe (`--remote-debugging-pipe`: JSON messages ended by a NUL byte on fds 3 and 4),
so no websocket client, no driver download and no open port are needed.

    with Browser() as b:
        b.open("file:///tmp/view.html#role=coder")
        b.click("#f-failures")                 # a real mouse click at the element's centre
        b.evaluate("document.title")
        b.screenshot(Path("shot.png"))

`chromium_path()` is None where no chromium is installed (tests skip with that reason).
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

NAMES = ("chromium", "chromium-browser", "google-chrome")
TIMEOUT_S = 60.0  # a cold start on two busy cores can take a while


def chromium_path() -> str | None:
    return next((p for p in map(shutil.which, NAMES) if p), None)


class BrowserError(RuntimeError):
    pass


class Browser:
    """One headless chromium with one page, for the life of a `with` block."""

    def __init__(self, width: int = 1280, height: int = 900, timeout_s: float = TIMEOUT_S) -> None:
        exe = chromium_path()
        if exe is None:
            raise BrowserError(f"no chromium on PATH (looked for {', '.join(NAMES)})")
        self.timeout_s = timeout_s
        self.profile = tempfile.TemporaryDirectory(prefix="masdsl-chromium-")
        to_child, self._out = os.pipe()
        self._in, from_child = os.pipe()

        def fds() -> None:  # the child reads commands on fd 3 and writes replies on fd 4
            # copies above 4 first, so that neither dup2 overwrites the other's source
            a, b = fcntl.fcntl(to_child, fcntl.F_DUPFD, 10), fcntl.fcntl(from_child, fcntl.F_DUPFD, 10)
            os.dup2(a, 3)  # dup2 makes 3 and 4 inheritable
            os.dup2(b, 4)

        # --no-sandbox: chromium refuses to start its sandbox as root, which CI and these machines are
        cmd = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe", "--no-first-run",
               f"--user-data-dir={self.profile.name}", f"--window-size={width},{height}", "about:blank"]
        self.proc = subprocess.Popen(cmd, preexec_fn=fds, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL,
                                     close_fds=False)  # close_fds would close 3 and 4 after `fds` made them
        os.close(to_child)
        os.close(from_child)
        self._buf, self._next, self.session = b"", 0, None
        self.width, self.height = width, height

    def __enter__(self) -> "Browser":
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()

    # -- the protocol ----------------------------------------------------------------------
    def send(self, method: str, params: dict | None = None, session: bool = True) -> dict:
        """Send one command and wait for its reply (events in between are dropped)."""
        self._next += 1
        message: dict[str, Any] = {"id": self._next, "method": method, "params": params or {}}
        if session and self.session:
            message["sessionId"] = self.session
        os.write(self._out, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + self.timeout_s
        while True:
            while b"\0" in self._buf:
                raw, self._buf = self._buf.split(b"\0", 1)
                reply = json.loads(raw)
                if reply.get("id") == self._next:
                    if "error" in reply:
                        raise BrowserError(f"{method}: {reply['error']}")
                    return reply.get("result", {})
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._in], [], [], left)[0]:
                raise BrowserError(f"{method}: no reply from chromium in {self.timeout_s:g} s")
            chunk = os.read(self._in, 1 << 20)
            if not chunk:
                raise BrowserError(f"{method}: chromium exited (status {self.proc.poll()})")
            self._buf += chunk

    def evaluate(self, expression: str) -> Any:
        """The value of a JS expression in the page (an exception in it: BrowserError)."""
        out = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in out:
            raise BrowserError(f"{expression}: {out['exceptionDetails'].get('text')}")
        return out["result"].get("value")

    # -- what a test does -------------------------------------------------------------------
    def open(self, url: str) -> None:
        """Load `url` in a fresh page and wait until it has loaded."""
        target = self.send("Target.createTarget", {"url": "about:blank"}, session=False)["targetId"]
        self.session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True},
                                 session=False)["sessionId"]
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": self.width, "height": self.height, "deviceScaleFactor": 1, "mobile": False})
        self.send("Page.navigate", {"url": url})
        deadline = time.monotonic() + self.timeout_s
        while not self.evaluate("location.href !== 'about:blank' && document.readyState === 'complete'"):
            if time.monotonic() > deadline:
                raise BrowserError(f"{url}: not loaded in {self.timeout_s:g} s")
            time.sleep(0.05)

    def click(self, selector: str) -> None:
        """A real left click (mouse down and up) at the centre of the first element matching."""
        box = self.evaluate(f"(function(){{var e=document.querySelector({json.dumps(selector)});"
                            "if(!e)return null;e.scrollIntoView({block:'center'});"
                            "var r=e.getBoundingClientRect();return [r.x+r.width/2,r.y+r.height/2];})()")
        if box is None:
            raise BrowserError(f"no element matches {selector}")
        for kind in ("mousePressed", "mouseReleased"):
            self.send("Input.dispatchMouseEvent",
                      {"type": kind, "x": box[0], "y": box[1], "button": "left", "clickCount": 1})

    def screenshot(self, path: Path, full_page: bool = False) -> Path:
        """A PNG of the viewport (or of the whole page)."""
        shot = self.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": full_page})
        Path(path).write_bytes(base64.b64decode(shot["data"]))
        return Path(path)

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.send("Browser.close", session=False)
                self.proc.wait(10)
            except (BrowserError, OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait(10)
        for fd in (self._in, self._out):
            try:
                os.close(fd)
            except OSError:
                pass
        self.profile.cleanup()
