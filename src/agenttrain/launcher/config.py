"""The `launch:` section of a training config: which services `agenttrain launch` starts, on
which ports, and what it does when one of them dies. `agenttrain train` ignores it."""

from __future__ import annotations

from pydantic import Field, model_validator

from agenttrain.run.config import Section


class EnvServersConfig(Section):
    """The `agenttrain serve` processes of one environment."""

    count: int = Field(1, ge=1)
    """Servers to start; the training spreads sessions over all of them."""
    ports: list[int] = Field(default_factory=list)
    """Fixed ports, one per server (then `count` may be left out); empty: free ports."""
    args: list[str] = Field(default_factory=list)
    """Extra `agenttrain serve` flags, e.g. [--max-sessions, '4096']."""

    @model_validator(mode="after")
    def _ports_match_count(self) -> EnvServersConfig:
        if self.ports:
            if "count" in self.model_fields_set and self.count != len(self.ports):
                raise ValueError(
                    f"count={self.count} but {len(self.ports)} ports are listed: give one port "
                    "per server, or leave ports empty for free ones"
                )
            self.count = len(self.ports)
        if any(not 0 < port < 65536 for port in self.ports):
            raise ValueError(f"ports must be 1-65535, got {self.ports}")
        return self


class RestartConfig(Section):
    """What happens when a service dies while the training runs."""

    enabled: bool = True
    """Restart it on the same port; false: stop the training and fail the launch (exit 3)."""
    max_restarts: int = Field(3, ge=0)
    """Restarts allowed per service; one more death fails the launch."""
    backoff_s: float = Field(1.0, ge=0)
    """Wait before the first restart, doubled for each further one of the same service."""


class MemoryServiceConfig(Section):
    """The experience-pool service (`agenttrain memory serve`, or any ReMe-compatible one)."""

    enabled: bool = False
    port: int = Field(8001, ge=0, lt=65536, description="0: a free port")
    command: list[str] = Field(default_factory=list)
    """The command; `{host}`, `{port}` and `{run_dir}` are replaced. Empty: this Python's
    `agenttrain memory serve --host {host} --port {port} --pool {run_dir}/memory/pool.sqlite`."""
    args: list[str] = Field(default_factory=list)
    """Extra arguments after the command, e.g. [--retrieval, bm25]."""
    health_route: str = "/health"
    identity_route: str | None = "/"
    """A route whose answer must contain `identity_text`, checked once the service is healthy
    (the defaults fit `agenttrain memory serve`; null both for a service without one)."""
    identity_text: str | None = "agenttrain experience pool"
    url_key: str = "memory.url"
    """The training config key that gets the service's URL."""

    @model_validator(mode="after")
    def _identity_is_complete(self) -> MemoryServiceConfig:
        if (self.identity_route is None) != (self.identity_text is None):
            raise ValueError("set both identity_route and identity_text, or neither")
        return self


class LaunchConfig(Section):
    host: str = "127.0.0.1"
    servers: dict[str, EnvServersConfig] = Field(default_factory=dict)
    """Per environment of the run; an environment not listed gets one server on a free port,
    one with `servers` URLs in its own section gets none (those servers are used as they are)."""
    memory: MemoryServiceConfig = Field(default_factory=MemoryServiceConfig)
    restart: RestartConfig = Field(default_factory=RestartConfig)
    ready_timeout_s: float = Field(120.0, gt=0)
    """How long a service may take to answer its health route."""
    stop_timeout_s: float = Field(30.0, gt=0)
    """After SIGTERM, how long a process group may take to exit before SIGKILL."""
    train_command: list[str] = Field(default_factory=list)
    """What runs the training; the config path and the overrides are appended. Empty:
    `agenttrain train` with this Python."""
