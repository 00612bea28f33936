"""`specdecode serve`: its help, and the real command serving and stopping on SIGTERM."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest

from specdecode.app.cli import main


def test_serve_help(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["serve", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for option in ("--model", "--method", "--max-draft-nodes", "--max-draft-depth", "--host",
                   "--port", "--max-queue", "--max-batch", "--api-key", "--request-timeout"):
        assert option in out


def test_serve_rejects_bad_options_with_exit_2(capsys):
    assert main(["serve", "--max-queue", "0"]) == 2
    assert "--max-queue" in capsys.readouterr().err


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serve_answers_and_stops_on_sigterm(tiny_real_vocab_model):
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "specdecode.app.cli", "serve", "--model", str(tiny_real_vocab_model),
         "--port", str(port), "--threads", "1", "--log-level", "warning"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 90
        while True:
            assert proc.poll() is None, proc.communicate()[1]
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the server did not come up"
            time.sleep(0.2)
        r = httpx.post(url + "/v1/chat/completions", timeout=60,
                       json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] >= 1
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err  # a clean exit after draining
    assert "Traceback" not in err


def test_serve_on_a_port_in_use_exits_2_with_one_line(tiny_real_vocab_model, capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code = main(["serve", "--model", str(tiny_real_vocab_model), "--port", str(port),
                     "--log-level", "critical"])
    assert code == 2
    err = capsys.readouterr().err
    assert f"could not listen on 127.0.0.1:{port}" in err and "Traceback" not in err
