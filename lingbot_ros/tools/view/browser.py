"""A headless Chromium driven over its DevTools protocol: opens the viewer's page, reads the
scene the page holds, takes screenshots (the browser test, ``scripts/viewer_screenshot.py``).

Chromium is the distribution's package (Debian: ``apt-get install chromium``), started with
its own empty profile on loopback; the protocol is spoken over the websocket client that
viser brings (``websockets``). Every wait is bounded (:class:`BrowserError` on a timeout).
The page's scene is read from viser's own client state (``window.__viserSceneTree``, the
scene tree it keeps; ``window.__viserMutable.scene``, the three.js scene it draws).
"""
from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Optional

__all__ = ["BrowserError", "Chromium", "find_chromium", "SCENE_STATE_JS"]

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
_DEVTOOLS_LINE = re.compile(rb"DevTools listening on (ws://\S+)")

# What the page holds, from the viewer's client state: each scene node's kind and the
# points it draws (a point cloud's count; a line's segments), and what three.js renders.
SCENE_STATE_JS = r"""
(() => {
  const tree = window.__viserSceneTree, mut = window.__viserMutable;
  if (!tree || !mut || !mut.scene) return null;
  const nodes = {};
  for (const [name, node] of Object.entries(tree.getState())) {
    const msg = node && node.message;
    if (!msg || !msg.props) continue;
    const p = msg.props, out = {type: msg.type};
    if (p.points && p.points.byteLength !== undefined) {
      const bytes = p.precision === "float16" ? 2 : 4;
      out.count = p.points.byteLength / (3 * bytes);
    }
    if (p._image_data) out.image_bytes = p._image_data.byteLength;
    nodes[name] = out;
  }
  let rendered = 0;
  mut.scene.traverse((o) => {
    if (o.isPoints && o.geometry && o.geometry.attributes.position)
      rendered += o.geometry.attributes.position.count;
  });
  return {nodes: nodes, rendered_points: rendered, text: document.body.innerText};
})()
"""


class BrowserError(RuntimeError):
    """Chromium did not start, or the page did not do what was waited for in time."""


def find_chromium() -> Optional[str]:
    """The Chromium binary on PATH (``LINGBOT_CHROMIUM`` overrides), or None."""
    given = os.environ.get("LINGBOT_CHROMIUM")
    if given:
        return given
    return next((p for p in map(shutil.which, CANDIDATES) if p), None)


class Chromium:
    """One headless Chromium with one page. ``with Chromium() as c: c.open(url)``."""

    def __init__(self, binary: Optional[str] = None, width: int = 1280, height: int = 800,
                 start_timeout: float = 30.0) -> None:
        self.binary = binary or find_chromium()
        if self.binary is None:
            raise BrowserError("no Chromium found (Debian: apt-get install chromium)")
        self.size, self._start_timeout = (width, height), start_timeout
        self.console_errors: list[str] = []
        self.requests: list[str] = []
        self._next_id = 0

    def __enter__(self) -> "Chromium":
        from websockets.sync.client import connect  # viser's dependency
        self._profile = tempfile.TemporaryDirectory(prefix="lingbot-chromium-")
        w, h = self.size
        self._proc = subprocess.Popen(
            [self.binary, "--headless=new", "--no-sandbox", "--no-first-run",
             "--no-default-browser-check", "--disable-extensions", "--disable-sync",
             "--disable-background-networking", "--disable-component-update",
             "--use-angle=swiftshader", "--enable-unsafe-swiftshader",
             "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0",
             f"--user-data-dir={self._profile.name}", f"--window-size={w},{h}",
             "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            url = self._devtools_url()
            self._ws = connect(url, max_size=None, open_timeout=self._start_timeout)
            target = self._call("Target.createTarget", {"url": "about:blank"})["targetId"]
            self._session = self._call("Target.attachToTarget",
                                       {"targetId": target, "flatten": True})["sessionId"]
            for domain in ("Page", "Runtime", "Log", "Network"):
                self._call(f"{domain}.enable", session=True)
            self._call("Emulation.setDeviceMetricsOverride", {
                "width": w, "height": h, "deviceScaleFactor": 1, "mobile": False},
                session=True)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        ws = getattr(self, "_ws", None)
        if ws is not None:
            ws.close()
        self._proc.terminate()
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(timeout=10)
        self._profile.cleanup()

    # -- the page -----------------------------------------------------------------------
    def open(self, url: str, timeout: float = 30.0) -> None:
        """Navigate and wait for the page's load event."""
        self._call("Page.navigate", {"url": url}, session=True)
        self.wait_for("document.readyState === 'complete'", timeout)

    def evaluate(self, expression: str):
        """The JSON value of ``expression`` in the page (BrowserError if it throws)."""
        res = self._call("Runtime.evaluate", {"expression": expression,
                                              "returnByValue": True}, session=True)
        if "exceptionDetails" in res:
            raise BrowserError(f"the page threw: {res['exceptionDetails']}")
        return res["result"].get("value")

    def wait_for(self, expression: str, timeout: float, poll: float = 0.1):
        """Evaluate until the value is truthy (returned), at most ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        value = None
        while time.monotonic() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            self.pump(poll)
        raise BrowserError(f"not true within {timeout} s: {expression.strip()[:200]} "
                           f"(last value {str(value)[:300]})")

    def scene_state(self) -> Optional[dict]:
        """What the viewer's client holds (:data:`SCENE_STATE_JS`), None before it runs."""
        return self.evaluate(SCENE_STATE_JS)

    def screenshot(self, path: Optional[Path] = None) -> bytes:
        """A PNG of the page (also written to ``path``)."""
        data = base64.b64decode(self._call("Page.captureScreenshot", {"format": "png"},
                                           session=True)["data"])
        if path is not None:
            Path(path).write_bytes(data)
        return data

    def screenshot_until(self, check, timeout: float, poll: float = 0.2) -> bytes:
        """Screenshots until ``check(png)`` is true (objects fade in as they arrive), at
        most ``timeout`` seconds; returns that PNG."""
        deadline = time.monotonic() + timeout
        while True:
            png = self.screenshot()
            if check(png):
                return png
            if time.monotonic() >= deadline:
                raise BrowserError(f"no screenshot passed the check within {timeout} s")
            self.pump(poll)

    # -- the protocol -------------------------------------------------------------------
    def _devtools_url(self) -> str:
        deadline = time.monotonic() + self._start_timeout
        seen = b""
        os.set_blocking(self._proc.stderr.fileno(), False)
        while time.monotonic() < deadline:
            chunk = self._proc.stderr.read() or b""
            seen += chunk
            match = _DEVTOOLS_LINE.search(seen)
            if match:
                return match.group(1).decode()
            if self._proc.poll() is not None:
                break
            time.sleep(0.05)
        raise BrowserError(f"Chromium ({self.binary}) did not open its DevTools port within "
                           f"{self._start_timeout} s: {seen.decode(errors='replace')[-500:]}")

    def _call(self, method: str, params: Optional[dict] = None, session: bool = False,
              timeout: float = 30.0) -> dict:
        self._next_id += 1
        msg = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = self._session
        self._ws.send(json.dumps(msg))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            reply = self._receive(max(0.0, deadline - time.monotonic()))
            if reply is not None and reply.get("id") == self._next_id:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error']}")
                return reply.get("result", {})
        raise BrowserError(f"{method}: no answer within {timeout} s")

    def pump(self, seconds: float) -> None:
        """Take the events that arrive within ``seconds``."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            self._receive(left)

    def _receive(self, timeout: float) -> Optional[dict]:
        try:
            msg = json.loads(self._ws.recv(timeout=timeout))
        except TimeoutError:
            return None
        method, params = msg.get("method"), msg.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") == "error":
            self.console_errors.append(" ".join(
                str(a.get("value", a.get("description", ""))) for a in params.get("args", [])))
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            self.console_errors.append(str(details.get("exception", {}).get(
                "description", details.get("text"))))
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            entry = params["entry"]
            self.console_errors.append(f"{entry.get('source')}: {entry.get('text')} "
                                       f"{entry.get('url', '')}".strip())
        elif method == "Network.requestWillBeSent":
            self.requests.append(params.get("request", {}).get("url", ""))
        return msg
