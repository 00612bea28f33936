"""`specdecode serve --ray`: the same app as Ray Serve replicas behind Ray's HTTP proxy.

Two deployments: `ray_replica.EngineReplica`, what `serve` runs, unchanged, and
`ray_ingress.Ingress`, which Ray's proxy calls and which forwards to the replicas. Ray Serve
replaces a dead replica, routes to none until its model has loaded (the constructor returns only
then), and on shutdown lets requests in flight finish.

A cluster runs the same deployments with Ray's own command (`serve run`, see `cli.ray_app`).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from . import ray_env  # noqa: F401  (Ray Serve's switches, before Ray Serve is imported)
import ray
from ray import serve
from ray.serve.config import RequestRouterConfig

from ...errors import InvalidParameterError, SpecDecodeError
from .ray_ingress import Ingress
from .ray_replica import EngineReplica

APP_NAME = "specdecode"
# Ray Serve's own names for the two deployments (metrics and `serve status` show them)
ENGINE, INGRESS = "EngineReplica", "Ingress"


def deployment(args: argparse.Namespace) -> serve.Application:
    """The two deployments for `args` (`serve`'s arguments: --replicas, --max-replicas and
    --threads size the engine replicas)."""
    threads = args.threads or 1
    if args.replicas < 1 or (args.max_replicas is not None and args.max_replicas < args.replicas):
        raise InvalidParameterError(f"need --replicas >= 1 and --max-replicas >= --replicas, got "
                                    f"{args.replicas}, {args.max_replicas}")
    options: dict[str, Any] = {"num_replicas": args.replicas}
    if args.max_replicas is not None:
        # Ray Serve counts a replica's requests in flight, queued ones included
        options = {"autoscaling_config": {"min_replicas": args.replicas,
                                          "max_replicas": args.max_replicas,
                                          "target_ongoing_requests": args.max_batch}}
    if args.routing == "conversation":
        options["request_router_config"] = RequestRouterConfig(
            request_router_class="specdecode.app.server.routing:ConversationRouter")
    engine = serve.deployment(EngineReplica, name=ENGINE).options(
        ray_actor_options={"num_cpus": threads},
        max_ongoing_requests=args.max_batch + args.max_queue,
        graceful_shutdown_timeout_s=args.shutdown_grace, **options)
    ingress = serve.deployment(Ingress, name=INGRESS).options(
        ray_actor_options={"num_cpus": 0}, max_ongoing_requests=1000)
    return ingress.bind(engine.bind(args))


def run_deployment(args: argparse.Namespace) -> None:
    """Deploy `args`'s replicas on the Ray instance this process is connected to, behind Ray's
    HTTP proxy on --host:--port; returns once every replica has loaded its model."""
    serve.start(http_options={"host": args.host, "port": args.port})
    serve.run(deployment(args), name=APP_NAME, route_prefix="/")


@contextmanager
def ray_instance(address: str | None = None, **init: Any) -> Iterator[None]:
    """Ray for the block: a local instance started and stopped here (`address` None; `init`:
    more of `ray.init`'s arguments), or a running cluster joined and left as it was."""
    if address is None:
        ray.init(include_dashboard=False, logging_level=logging.WARNING, **init)
    else:
        ray.init(address=address, logging_level=logging.WARNING)
    try:
        yield
    finally:
        if address is None:
            serve.shutdown()
        ray.shutdown()


def serve_ray(args: argparse.Namespace) -> int:
    """`specdecode serve --ray`: start (or join) Ray, run the deployments behind Ray's HTTP proxy
    on --host:--port until SIGINT or SIGTERM, then shut them down gracefully."""
    deployment(args)  # bad values fail before Ray starts
    local = {"log_to_driver": args.log_level == "debug",
             "_metrics_export_port": args.metrics_export_port}
    try:
        with ray_instance(args.ray_address, **({} if args.ray_address else local)):
            # after ray.init, which installs a SIGTERM handler of its own that ends the process
            # at once (leaving Ray's agents behind)
            stop = threading.Event()
            previous = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGINT,
                                                                               signal.SIGTERM)}
            try:
                _serve_until(stop, args)
            finally:
                for s, handler in previous.items():
                    signal.signal(s, handler)
    except RuntimeError as exc:  # Ray Serve's deployment errors: one line, not a traceback
        raise SpecDecodeError(f"Ray Serve could not run the server: {exc}") from exc
    return 0


def _serve_until(stop: threading.Event, args: argparse.Namespace) -> None:
    started = time.perf_counter()
    run_deployment(args)
    print(f"specdecode: serving {args.model} through Ray Serve: {args.replicas} "
          f"{ENGINE} replica(s) of {args.threads or 1} thread(s), ready in "
          f"{time.perf_counter() - started:.0f} s, on http://{args.host}:{args.port}/v1",
          file=sys.stderr)
    if args.ray_address is None and args.metrics_export_port:
        print(f"specdecode: every replica's metrics: http://127.0.0.1:"
              f"{args.metrics_export_port}/metrics (Ray's metrics agent)", file=sys.stderr)
    stop.wait()
    serve.delete(APP_NAME)  # replicas finish what is in flight first
