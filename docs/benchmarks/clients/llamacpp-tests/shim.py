"""pytest plugin: run llama.cpp's server test suite (tools/server/tests) against `specdecode serve`.

Load it with `-p shim` and PYTHONPATH=<this dir>:<llama.cpp tools/server/tests> (run.sh does this);
llama.cpp's own files are not modified. It replaces

  * ServerPreset.load_all   -> no-op (no model download; there is no internet)
  * ServerProcess.start     -> maps the launch options it can honour to `specdecode serve` flags and
                               points the test at a shared server started with exactly those flags
                               (one running server per distinct flag set, reused across tests; up to
                               SHIM_MAX_SERVERS kept alive, least recently used stopped first)
  * ServerProcess.stop      -> detaches the test from its shared server (the server keeps running)

Every server runs SHIM_MODEL (default smollm2-135m) with --threads SHIM_THREADS (default 2).
For every test, the launch options it (or its preset) set that have no `specdecode serve`
equivalent are recorded: as junit <properties> (shim.unmapped_by_test / shim.unmapped_by_preset)
and in the JSON file SHIM_REPORT (default /tmp/lcpp/shim-report.json).

Environment:
  SHIM_SPECDECODE     the specdecode executable (default: <repo>/.venv/bin/specdecode)
  SHIM_MODEL          model alias/path (default smollm2-135m)
  SHIM_THREADS        --threads (default 2)
  SHIM_EXTRA_ARGS     extra serve flags, whitespace separated (default: none)
  SHIM_SERVER_PYTHONPATH  prepended to the servers' PYTHONPATH: a copy of the repo's src/ to serve a
                      fixed snapshot instead of the (editable-installed) working tree (run.sh sets it)
  SHIM_LOG_DIR        server logs (default /tmp/lcpp/shim-servers)
  SHIM_REPORT         per-test JSON record (default /tmp/lcpp/shim-report.json)
  SHIM_TEST_TIMEOUT   seconds a test's call phase may take before it fails (default 240; 0: off)
  SHIM_REQUEST_TIMEOUT  --request-timeout for every server (default 120)
  SHIM_MAX_SERVERS    servers kept running at once (default 6)
  SHIM_START_TIMEOUT  seconds to wait for a server's /health (default 180)
  SHIM_REWRITE_MODEL  1: replace the "model" a test sends (its own make_request / make_stream_request
                      and the openai client) by the name the server serves, to see what fails behind
                      the server's model-name check; off by default (an informational pass only)
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import socket
import subprocess
import time
from collections import OrderedDict
from pathlib import Path

import pytest
import requests

import utils  # llama.cpp's tests/utils.py: the tests dir must be on PYTHONPATH
from utils import ServerPreset, ServerProcess

_REPO = Path(__file__).resolve().parents[4]
SPECDECODE = os.environ.get("SHIM_SPECDECODE", str(_REPO / ".venv" / "bin" / "specdecode"))
MODEL = os.environ.get("SHIM_MODEL", "smollm2-135m")
THREADS = os.environ.get("SHIM_THREADS", "2")
EXTRA_ARGS = os.environ.get("SHIM_EXTRA_ARGS", "").split()
SERVER_PYTHONPATH = os.environ.get("SHIM_SERVER_PYTHONPATH", "")
LOG_DIR = Path(os.environ.get("SHIM_LOG_DIR", "/tmp/lcpp/shim-servers"))
REPORT = Path(os.environ.get("SHIM_REPORT", "/tmp/lcpp/shim-report.json"))
TEST_TIMEOUT = int(os.environ.get("SHIM_TEST_TIMEOUT", "240"))
REQUEST_TIMEOUT = os.environ.get("SHIM_REQUEST_TIMEOUT", "120")
MAX_SERVERS = int(os.environ.get("SHIM_MAX_SERVERS", "6"))
START_TIMEOUT = float(os.environ.get("SHIM_START_TIMEOUT", "180"))
REWRITE_MODEL = os.environ.get("SHIM_REWRITE_MODEL", "") not in ("", "0")

# --- how ServerProcess's launch options map onto `specdecode serve` -------------------------------

# option -> flag, value passed as given
MAPPED = {
    "api_key": "--api-key",
    "cors_origins": "--cors-origins",
    # llama-server --alias (a comma list: several), and its single-model default of taking any
    # `model` a request names: --served-model-name ALIAS,...,* (see _flags)
    "model_alias": "--served-model-name",
    "n_slots": "--max-batch",               # llama-server --parallel: sequences decoded together
    "server_slots": "--slots",              # a switch: passed without a value when set
}
# options that are honoured without a flag, or that only concern the harness itself
HONOURED = {
    "server_host",              # --host (first address; a comma list is recorded as unmapped)
    "server_port",              # the shim picks a free port per server and points the test at it
    "n_threads",                # every server gets --threads SHIM_THREADS
    "offline",                  # download policy only
    "server_metrics",           # /metrics is always served
    "server_continuous_batching",  # always on
    "n_gpu_layer",              # CPU only
    "log_path",                 # the shim writes server logs to SHIM_LOG_DIR
}
# options naming the model: always replaced by SHIM_MODEL
MODEL_OPTIONS = {"model_hf_repo", "model_hf_file", "model_file", "model_url"}
# passed to llama-server on every launch (--temp, --seed): server-wide sampling defaults, which
# `specdecode serve` does not have; recorded as set by the preset whatever their value
ALWAYS_PASSED = ("temperature", "seed")
# session variables of ServerProcess, not launch options
NOT_OPTIONS = {"process", "ready", "external_server", "_log"}

_DEFAULTS = ServerProcess()  # class defaults (+ env PORT/DEBUG/N_GPU_LAYERS, as the suite sees them)
_OPTION_NAMES = sorted(
    name for name in ServerProcess.__annotations__
    if name not in NOT_OPTIONS and not name.startswith("_")
)


_UNSET = (None, False, "")


def _same(a, b) -> bool:
    # None / False / "" all mean "not passed" to llama-server
    return a == b or (a in _UNSET and b in _UNSET)


def _options(server: ServerProcess) -> dict:
    return {name: getattr(server, name, None) for name in _OPTION_NAMES}


def _unmapped(values: dict, reference: dict) -> dict:
    """Options in `values` that differ from `reference` and that no serve flag honours."""
    out = {}
    for name, value in values.items():
        if _same(value, reference.get(name)):
            continue
        if name in MAPPED or name in NOT_OPTIONS:
            continue
        if name in HONOURED:
            if name == "server_host" and value and "," in str(value):
                out[name] = value
            continue
        if name in MODEL_OPTIONS:
            out["model"] = f"{name}={value!r} (replaced by {MODEL})"
            continue
        out[name] = value
    return out


def _flags(server: ServerProcess) -> tuple:
    flags = []
    host = (server.server_host or "127.0.0.1").split(",")[0].strip()
    flags += ["--host", host]
    for name, flag in MAPPED.items():
        value = getattr(server, name, None)
        if name == "model_alias":  # llama-server takes any model name beside its aliases
            value = f"{value or MODEL},*"
        if value is None or value is False or value == "":
            continue
        flags += [flag] if value is True else [flag, str(value)]
    return tuple(flags)


# --- the shared servers -----------------------------------------------------------------------------

class _Shared:
    def __init__(self, flags: tuple, index: int):
        self.flags = flags
        self.index = index
        self.port = _free_port()
        self.host = flags[flags.index("--host") + 1]
        self.log_path = LOG_DIR / f"server-{index:02d}.log"
        self.args = [SPECDECODE, "serve", "--model", MODEL, "--threads", THREADS,
                     "--port", str(self.port), "--request-timeout", REQUEST_TIMEOUT,
                     *EXTRA_ARGS, *flags]
        self.proc: subprocess.Popen | None = None
        self.served = flags[flags.index("--served-model-name") + 1].split(",")[0]

    def start(self) -> None:
        LOG_DIR.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "w")
        log.write("# " + " ".join(self.args) + "\n")
        log.flush()
        print(f"[shim] starting server #{self.index}: {' '.join(self.args)}")
        env = dict(os.environ)
        env.pop("PYTHONPATH", None)  # the tests dir and this plugin are nothing to the server
        if SERVER_PYTHONPATH:
            env["PYTHONPATH"] = SERVER_PYTHONPATH
        self.proc = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=env)
        log.close()
        deadline = time.time() + START_TIMEOUT
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"[shim] specdecode serve exited with {self.proc.returncode}; "
                                   f"log {self.log_path}:\n{self.log_path.read_text()[-3000:]}")
            try:
                if requests.get(f"http://{_url_host(self.host)}:{self.port}/health", timeout=2).status_code == 200:
                    print(f"[shim] server #{self.index} ready on port {self.port}")
                    return
            except requests.RequestException:
                pass
            time.sleep(0.2)
        self.stop()
        raise TimeoutError(f"[shim] server #{self.index} not healthy after {START_TIMEOUT}s; log {self.log_path}")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        print(f"[shim] stopped server #{self.index} (pid {self.proc.pid})")
        self.proc = None


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_POOL: "OrderedDict[tuple, _Shared]" = OrderedDict()
_STARTED = 0


def _server_for(flags: tuple) -> _Shared:
    global _STARTED
    shared = _POOL.get(flags)
    if shared is not None and shared.alive():
        _POOL.move_to_end(flags)
        return shared
    if shared is not None:  # died: start it again
        _POOL.pop(flags)
    while len(_POOL) >= MAX_SERVERS:
        _, oldest = _POOL.popitem(last=False)
        oldest.stop()
    _STARTED += 1
    shared = _Shared(flags, _STARTED)
    shared.start()
    _POOL[flags] = shared
    return shared


def _stop_all() -> None:
    while _POOL:
        _, shared = _POOL.popitem()
        shared.stop()


atexit.register(_stop_all)


# --- per-test record ----------------------------------------------------------------------------------

_CURRENT: pytest.Item | None = None
_RECORDS: dict[str, dict] = {}


def _record(server: ServerProcess, shared: _Shared) -> None:
    values = _options(server)
    preset = getattr(server, "_shim_preset", None)
    snapshot = getattr(server, "_shim_snapshot", None) or _options(_DEFAULTS)
    by_preset = _unmapped(snapshot, _options(_DEFAULTS))
    for name in ALWAYS_PASSED:
        by_preset.setdefault(name, snapshot.get(name))
    by_test = _unmapped(values, snapshot)
    entry = {
        "preset": preset,
        "server": shared.index,
        "flags": list(shared.flags),
        "unmapped_by_preset": {k: repr(v) if not isinstance(v, (str, int, float, bool, type(None))) else v
                               for k, v in by_preset.items()},
        "unmapped_by_test": {k: repr(v) if not isinstance(v, (str, int, float, bool, type(None))) else v
                             for k, v in by_test.items()},
    }
    if _CURRENT is None:
        return
    rec = _RECORDS.setdefault(_CURRENT.nodeid, {"starts": []})
    rec["starts"].append(entry)
    _CURRENT.user_properties.append(("shim.server", f"#{shared.index} " + " ".join(shared.flags)))
    if by_test:
        _CURRENT.user_properties.append(("shim.unmapped_by_test", json.dumps(entry["unmapped_by_test"])))
    if by_preset:
        _CURRENT.user_properties.append(("shim.unmapped_by_preset", json.dumps(entry["unmapped_by_preset"])))


# --- the replacements ---------------------------------------------------------------------------------

def _start(self: ServerProcess, timeout_seconds: int = utils.DEFAULT_HTTP_TIMEOUT) -> None:
    flags = _flags(self)
    shared = _server_for(flags)
    self.server_port = shared.port
    self.ready = True
    self.process = None
    self._shim_shared = shared
    utils.server_instances.add(self)
    _record(self, shared)


def _brief(value, limit: int = 700):
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= limit else text[:limit] + f"...(+{len(text) - limit})"


def _exchange(method: str, path: str, data, status, body, **extra) -> dict:
    """What a test sent and got back, kept in the report for the failure analysis."""
    entry = {"request": f"{method} {path}",
             "sent_fields": sorted(data) if isinstance(data, dict) else
             (None if data is None else type(data).__name__),
             "status": status, "body": _brief(body), **extra}
    if _CURRENT is not None:
        rec = _RECORDS.setdefault(_CURRENT.nodeid, {"starts": []})
        exchanges = rec.setdefault("exchanges", [])
        if len(exchanges) < 12:
            exchanges.append(entry)
    return entry


_make_request = ServerProcess.make_request
_make_stream_request = ServerProcess.make_stream_request


def _rewrite(server: ServerProcess, data):
    shared = getattr(server, "_shim_shared", None)
    if REWRITE_MODEL and shared is not None and isinstance(data, dict) and data.get("model"):
        return {**data, "model": shared.served}
    return data


def _recorded_request(self, method, path, data=None, headers=None,
                      timeout=utils.DEFAULT_REQUEST_TIMEOUT, host=None):
    data = _rewrite(self, data)
    try:
        res = _make_request(self, method, path, data, headers, timeout, host)
    except Exception as e:
        _exchange(method, path, data, None, repr(e))
        raise
    _exchange(method, path, data, res.status_code, res.body if res.body is not None else
              {k: v for k, v in res.headers.items() if k.lower().startswith("access-control")})
    return res


def _recorded_stream(self, method, path, data=None, headers=None, host=None):
    # recorded when the first event arrives and updated in place: a test that stops reading
    # (a failed assertion) leaves the generator suspended, so nothing runs after the last event
    entry = None
    data = _rewrite(self, data)
    try:
        for event in _make_stream_request(self, method, path, data, headers, host):
            if entry is None:
                entry = _exchange(method, path, data, 200, None, stream=True, events=0,
                                  first_event=_brief(event, 500))
            entry["events"] += 1
            entry["last_event"] = _brief(event, 500)
            yield event
    except utils.ServerError as e:
        _exchange(method, path, data, e.code, e.body, stream=True)
        raise
    except GeneratorExit:
        raise
    except Exception as e:
        if entry is None:
            _exchange(method, path, data, None, repr(e), stream=True)
        else:
            entry["error"] = repr(e)
        raise
    if entry is None:
        _exchange(method, path, data, 200, None, stream=True, events=0)


def _stop(self: ServerProcess) -> None:
    utils.server_instances.discard(self)
    self.process = None


def _load_all() -> None:
    print("[shim] ServerPreset.load_all: skipped (models are not downloaded; every server runs "
          f"{MODEL})")


def _wrap_preset(name: str, make):
    def preset() -> ServerProcess:
        server = make()
        server._shim_preset = name
        server._shim_snapshot = _options(server)
        return server
    preset.__name__ = name
    return staticmethod(preset)


ServerProcess.start = _start
ServerProcess.stop = _stop
ServerProcess.make_request = _recorded_request
ServerProcess.make_stream_request = _recorded_stream
for _name, _method in list(ServerPreset.__dict__.items()):
    if isinstance(_method, staticmethod) and _name != "load_all":
        setattr(ServerPreset, _name, _wrap_preset(_name, _method.__func__))
ServerPreset.load_all = staticmethod(_load_all)


def _patch_openai_client() -> None:
    """SHIM_REWRITE_MODEL for tests that call the server through the openai client."""
    from openai import _base_client

    build = _base_client.BaseClient._build_request

    def _build_request(self, options, *args, **kwargs):
        served = {s.port: s.served for s in _POOL.values()}.get(self.base_url.port)
        if served and isinstance(options.json_data, dict) and options.json_data.get("model"):
            options.json_data = {**options.json_data, "model": served}
        return build(self, options, *args, **kwargs)

    _base_client.BaseClient._build_request = _build_request


if REWRITE_MODEL:
    _patch_openai_client()


# --- pytest hooks ---------------------------------------------------------------------------------------

class ShimTestTimeout(Exception):
    pass


def _on_alarm(signum, frame):
    raise ShimTestTimeout(f"[shim] test exceeded SHIM_TEST_TIMEOUT={TEST_TIMEOUT}s")


def pytest_runtest_setup(item):
    global _CURRENT
    _CURRENT = item


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    if TEST_TIMEOUT > 0:
        old = signal.signal(signal.SIGALRM, _on_alarm)
        signal.alarm(TEST_TIMEOUT)
    try:
        yield
    finally:
        if TEST_TIMEOUT > 0:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, old)


def pytest_runtest_logreport(report):
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        rec = _RECORDS.setdefault(report.nodeid, {"starts": []})
        rec["outcome"] = report.outcome
        rec["duration"] = round(report.duration, 2)
        if report.outcome == "failed":
            crash = getattr(report.longrepr, "reprcrash", None)
            rec["error"] = (crash.message if crash is not None else str(report.longrepr))[:800]


def pytest_sessionfinish(session, exitstatus):
    _stop_all()
    if not _RECORDS:  # e.g. --collect-only: keep the last run's report
        return
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text(json.dumps({
        "model": MODEL, "threads": THREADS, "specdecode": SPECDECODE,
        "servers_started": _STARTED, "tests": _RECORDS,
    }, indent=1, default=str))
    print(f"\n[shim] per-test launch-option record: {REPORT}; server logs: {LOG_DIR}")


def pytest_report_header(config):
    return [f"shim: llama.cpp server tests -> specdecode serve --model {MODEL} --threads {THREADS} "
            f"(server PYTHONPATH: {SERVER_PYTHONPATH or 'unset: the installed working tree'}) "
            f"(mapped: {', '.join(f'{k}->{v}' for k, v in MAPPED.items())}, host/port)"]
