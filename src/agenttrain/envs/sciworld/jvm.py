"""The JVM behind SciWorld: one per process, shared by every game of that process.

ScienceWorld's own wrapper (`ScienceWorldEnv`) starts one JVM per environment (~150 MB
each in AgentGym's server). A JVM can hold many independent simulators
(`PythonInterface` objects), so a process starts one JVM and each game is one simulator
in it; its calls are serialised by whoever drives the process (a worker runs one request
at a time).
"""

from __future__ import annotations

import os
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agenttrain.envs.base import EnvError

INSTALL_JAVA = (
    "install a headless Java runtime (Debian/Ubuntu: `sudo apt-get install -y "
    "default-jre-headless`; or `make setup` does it where apt is usable) or set JAVA_HOME"
)
SCIENCEWORLD_PIN = "scienceworld==1.2.3"


class JavaMissing(EnvError):
    """No Java runtime was found; SciWorld's simulator is a Scala program."""


class ScienceWorldMissing(EnvError):
    """The `scienceworld` package (which ships the simulator's jar) is not installed."""


def find_java() -> str | None:
    """The `java` of JAVA_HOME if set, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").is_file():
        return str(Path(home) / "bin" / "java")
    return shutil.which("java")


def require_java() -> str:
    java = find_java()
    if java is None:
        raise JavaMissing(f"SciWorld needs Java 8 or newer and found no `java`: {INSTALL_JAVA}")
    return java


def require_scienceworld() -> None:
    try:
        import scienceworld  # noqa: F401
    except ImportError:
        raise ScienceWorldMissing(
            f"SciWorld needs the scienceworld package: pip install {SCIENCEWORLD_PIN}"
        ) from None


@dataclass
class Simulators:
    """A running JVM that makes simulators."""

    gateway: Any
    process: Any

    def alive(self) -> bool:
        return self.process.poll() is None

    def new(self) -> Any:
        """A fresh, independent ScienceWorld simulator (`PythonInterface`) in this JVM."""
        return self.gateway.jvm.scienceworld.runtime.pythonapi.PythonInterface()

    def release(self, simulator: Any) -> None:
        """Let the JVM collect a simulator this process no longer uses."""
        if self.alive():
            self.gateway.detach(simulator)

    def heap_used_bytes(self) -> int:
        runtime = self.gateway.jvm.java.lang.Runtime.getRuntime()
        return int(runtime.totalMemory() - runtime.freeMemory())


_running: Simulators | None = None
_lock = threading.Lock()


def simulators(heap: str = "2g") -> Simulators:
    """This process's JVM, started on first use (again if it died) with at most `heap`."""
    global _running
    with _lock:
        if _running is None or not _running.alive():
            _running = _launch(heap)
        return _running


def _launch(heap: str) -> Simulators:
    java = require_java()
    require_scienceworld()
    from py4j.java_gateway import GatewayParameters, JavaGateway, launch_gateway
    from scienceworld.constants import BASEPATH, JAR_PATH

    port, process = launch_gateway(
        classpath=JAR_PATH,
        die_on_exit=True,  # the JVM ends with this process, even if it is killed
        cwd=BASEPATH,
        java_path=java,
        # A bounded heap and the serial collector keep an idle simulator's footprint small.
        javaopts=[f"-Xmx{heap}", "-XX:+UseSerialGC"],
        return_proc=True,
    )
    gateway = JavaGateway(
        gateway_parameters=GatewayParameters(auto_field=True, port=port), java_process=process
    )
    return Simulators(gateway, process)
