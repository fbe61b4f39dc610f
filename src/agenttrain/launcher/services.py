"""What `agenttrain launch` starts: one `ServiceSpec` per environment server and for the memory
service, with its port chosen (and checked free) before anything runs."""

from __future__ import annotations

import json
import socket
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from agenttrain.config import ConfigError, apply_override
from agenttrain.envs.registry import get_spec, registration
from agenttrain.launcher.config import EnvServersConfig, LaunchConfig
from agenttrain.rl.config import TrainConfig
from agenttrain.serving.runner import PortInUse, bind, describe_listener


class LaunchError(RuntimeError):
    """The launch cannot start as configured; nothing was started."""


@dataclass(frozen=True)
class ServiceSpec:
    """A service in general terms: a command, a port, a health route, an identity check."""

    name: str
    command: tuple[str, ...]
    host: str
    port: int
    health_route: str = "/health"
    identity_route: str | None = None
    identity_text: str | None = None
    """Text the answer of `identity_route` must contain: proof that the port holds our
    service and not a stranger that happened to answer the health route."""
    env: str | None = None
    """The environment it serves; None for the memory service."""

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        return f"http://{host}:{self.port}"


def plan_services(config: TrainConfig) -> list[ServiceSpec]:
    """The services of a launch, ports resolved: configured ones checked free (a taken one is
    reported with what answers there), the rest picked free."""
    launch = config.launch
    _check_server_sections(config)
    wanted: list[tuple[str, int, Callable[[int], ServiceSpec]]] = []
    for entry in config.environments:
        if entry.servers:
            continue
        servers = launch.servers.get(entry.name, EnvServersConfig())
        for index, port in enumerate(servers.ports or [0] * servers.count, start=1):
            name = f"{entry.name}-{index}"
            wanted.append((name, port, partial(_env_server, launch, entry.name, name, servers)))
    if launch.memory.enabled:
        wanted.append(
            ("memory", launch.memory.port, partial(_memory_service, launch, config.run.out_dir))
        )
    ports = _reserve_ports(launch.host, [(name, port) for name, port, _ in wanted])
    return [build(port) for (_, _, build), port in zip(wanted, ports, strict=True)]


def _check_server_sections(config: TrainConfig) -> None:
    """`launch.servers` may name only environments of the run that the launcher starts."""
    by_name = {entry.name: entry for entry in config.environments}
    for name in config.launch.servers:
        if name not in by_name:
            raise LaunchError(
                f"launch.servers.{name}: {name} is not an environment of this run "
                f"({', '.join(by_name)})"
            )
        if by_name[name].servers:
            raise LaunchError(
                f"launch.servers.{name}: the config already lists servers for {name} "
                f"({', '.join(by_name[name].servers)}); the launcher starts none then. "
                "Remove one of the two."
            )
    key = config.launch.memory.url_key
    if config.launch.memory.enabled and key:
        try:
            apply_override({}, f"{key}=x", TrainConfig)
        except ConfigError as problem:
            raise LaunchError(f"launch.memory.url_key: {problem}") from None
    for entry in config.environments:
        if not entry.servers and not registration(entry.name).in_process:
            raise LaunchError(
                f"{entry.name} cannot be served by `agenttrain serve`; start AgentGym's "
                f"server for it and list its URL in the config's servers for {entry.name}"
            )


def _reserve_ports(host: str, wanted: Sequence[tuple[str, int]]) -> list[int]:
    """Bind every port at once (0: a free one), so two services never get the same free port,
    then release them for the services to bind."""
    held: list[socket.socket] = []
    try:
        for name, port in wanted:
            try:
                held.append(bind(host, port))
            except PortInUse:
                raise LaunchError(
                    f"{name}: port {port} on {host} is already in use; "
                    f"{describe_listener(host, port)}. Stop that program, or give {name} "
                    "another port in the launch: section (none listed: free ports)"
                ) from None
        return [sock.getsockname()[1] for sock in held]
    finally:
        for sock in held:
            sock.close()


def _env_server(
    launch: LaunchConfig, env: str, name: str, servers: EnvServersConfig, port: int
) -> ServiceSpec:
    command = (
        sys.executable,
        "-m",
        "agenttrain",
        "serve",
        env,
        "--host",
        launch.host,
        "--port",
        str(port),
        *servers.args,
    )
    root_text = get_spec(env).protocol.root_text
    return ServiceSpec(name, command, launch.host, port, "/health", "/", root_text, env)


def _memory_service(launch: LaunchConfig, run_dir: Path, port: int) -> ServiceSpec:
    memory = launch.memory
    template = memory.command or [
        *(sys.executable, "-m", "agenttrain", "memory", "serve"),
        *("--host", "{host}", "--port", "{port}", "--pool", "{run_dir}/memory/pool.sqlite"),
    ]
    places = {"host": launch.host, "port": port, "run_dir": run_dir}
    command = tuple(part.format(**places) for part in [*template, *memory.args])
    return ServiceSpec(
        "memory",
        command,
        launch.host,
        port,
        memory.health_route,
        memory.identity_route,
        memory.identity_text,
    )


def server_overrides(config: TrainConfig, services: Sequence[ServiceSpec]) -> list[str]:
    """The `key=value` overrides that point the training at the started services."""
    urls: dict[str, list[str]] = {}
    for service in services:
        if service.env is not None:
            urls.setdefault(service.env, []).append(service.url)
    overrides = []
    if config.envs:
        entries = config.model_dump(mode="json")["envs"]
        for entry in entries:
            entry["servers"] = urls.get(entry["name"], entry["servers"])
        if urls:
            overrides.append(f"envs={json.dumps(entries)}")
    elif config.env.name in urls:
        overrides.append(f"env.servers={json.dumps(urls[config.env.name])}")
    memory = [service for service in services if service.env is None]
    if memory and config.launch.memory.url_key:
        overrides.append(f"{config.launch.memory.url_key}={memory[0].url}")
    return overrides
