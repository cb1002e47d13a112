"""The embedded Ray: a Ray for this machine alone, every server on loopback, started quietly. `fanout.connect` starts
it when a launch joins no cluster; the tests start it once per session."""

from __future__ import annotations

import logging
import os

import ray
from ray._private import ray_constants

AUTH_SETUP = "ray._private.authentication.authentication_token_setup"
"""Ray's logger of token-authentication set-up (`start_embedded` quiets its start-up banner)."""


def start_embedded(num_cpus: int | None = None, object_store_mb: int = 256) -> None:
    """Start a Ray for this machine only: no dashboard, and every server on 127.0.0.1.

    Ray binds its gRPC servers to all interfaces unless the node's address is exactly 127.0.0.1, and turns an
    explicit `_node_ip_address="127.0.0.1"` into the machine's external address. The switch Ray uses on macOS
    and Windows (`RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`: single-node, loopback) is the one way to get loopback
    on Linux; it is set only while the node starts (its processes inherit it), so a later `ray.init(address=)`
    in this process is unaffected. tests/execution/test_launcher.py checks the listening addresses.

    Token authentication stays as Ray decides (on for a new cluster unless RAY_AUTH_MODE says otherwise), without
    the banner Ray logs about it at every start (`AUTH_SETUP` at WARNING): it is Ray's default, not news. Setting
    RAY_AUTH_MODE here instead would come too late, after Ray's import has read it."""
    auth_log = logging.getLogger(AUTH_SETUP)
    auth_level = auth_log.level
    auth_log.setLevel(logging.ERROR)
    env, flag = os.environ.get(ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR), ray_constants.ENABLE_RAY_CLUSTER
    os.environ[ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR], ray_constants.ENABLE_RAY_CLUSTER = "0", False
    try:
        ray.init(address="local", num_cpus=num_cpus or os.cpu_count(), include_dashboard=False,
                 log_to_driver=False, configure_logging=False, object_store_memory=object_store_mb * 2**20)  # fmt: skip
    finally:
        auth_log.setLevel(auth_level)
        ray_constants.ENABLE_RAY_CLUSTER = flag
        if env is None:
            del os.environ[ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR]
        else:
            os.environ[ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR] = env
