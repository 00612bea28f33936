"""Ray Serve for `serve --ray`: its switches, set before Ray Serve is imported (every module of
the Ray deployments imports this one first), and the one-line error when the extra is missing.
"""

from __future__ import annotations

import os

# Ray Serve's switches, set before Ray Serve is imported (it reads them then) for this process
# and the Ray instance it starts (a cluster's are set where `ray start` runs): replicas' user code
# and the ingress's router on the actor's own event loop instead of threads of their own, and
# requests to replicas over gRPC rather than as Ray actor tasks: together they take nearly half
# of the latency Ray adds to a request away and raise what two replicas serve (measured by
# docs/benchmarks/ray/switches.py).
RAY_SERVE_ENV = {"RAY_SERVE_RUN_USER_CODE_IN_SEPARATE_THREAD": "0",
                 "RAY_SERVE_RUN_ROUTER_IN_SEPARATE_LOOP": "0",
                 "RAY_SERVE_USE_GRPC_BY_DEFAULT": "1"}
for _name, _value in RAY_SERVE_ENV.items():  # Ray's processes this one starts inherit them
    os.environ.setdefault(_name, _value)

try:
    import ray  # noqa: F401  (present: the extra is installed)
except ImportError as exc:  # the optional extra
    from ...errors import SpecDecodeError

    raise SpecDecodeError("--ray needs Ray Serve: pip install 'specdecode[ray]'") from exc
