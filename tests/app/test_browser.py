"""End to end: start the app with `streamlit run`, drive it in a real headless Chromium (Playwright).

Runs a simulation from the Simulate page, waits for the summary cards and the Plotly charts, and
saves a screenshot to test-artifacts/app-simulate.png. Skips when Chromium or Playwright is absent.
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARTIFACTS = REPO / "test-artifacts"

pytestmark = pytest.mark.browser


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture()
def app_url():
    port = free_port()
    env = {**os.environ, "STREAMLIT_BROWSER_GATHER_USAGE_STATS": "false"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", str(REPO / "app" / "streamlit_app.py"), "--server.headless", "true",
         "--server.address", "127.0.0.1", "--server.port", str(port), "--global.developmentMode", "false"],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                if urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).status == 200:
                    break
            except OSError:
                time.sleep(0.5)
        else:
            pytest.fail("streamlit did not start: " + proc.stdout.read1(4000).decode(errors="replace"))
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium not installed (apt-get install chromium)")
def test_simulate_in_a_real_browser(app_url):
    sync_api = pytest.importorskip("playwright.sync_api")
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=[
            "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
            "--disable-component-update", "--disable-sync"])
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 2200})
            page.goto(app_url, wait_until="domcontentloaded")
            try:
                drive(page)
            except Exception:
                page.screenshot(path=str(ARTIFACTS / "app-simulate-failed.png"), full_page=True)
                raise
            page.screenshot(path=str(ARTIFACTS / "app-simulate.png"), full_page=True)
        finally:
            browser.close()
    assert (ARTIFACTS / "app-simulate.png").stat().st_size > 10_000


def drive(page) -> None:
    """Set a small run, start it, and wait for the results to render."""
    requests_box = page.get_by_label("Requests", exact=True)
    requests_box.wait_for(timeout=20_000)
    requests_box.fill("80")
    requests_box.press("Enter")
    page.get_by_role("button", name="Run simulation").click()
    page.get_by_text("TTFT p50 / p99 (ms)").wait_for(timeout=120_000)
    page.locator(".js-plotly-plot").first.wait_for(timeout=60_000)
    assert page.locator(".js-plotly-plot").count() >= 3
    assert page.get_by_text("Finished / rejected").count() == 1
