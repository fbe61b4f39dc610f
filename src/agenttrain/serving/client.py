"""Async client for AgentGym-compatible environment servers: ours, or AgentGym's own.

`EnvServerPool` holds one HTTP connection pool for a set of server URLs of one environment.
Each `RemoteEnvironment` it hands out is one session implementing the `Environment`
protocol. The pool checks each server's identity (`GET /`) before first use, spreads new
sessions over the servers (fewest live sessions first, skipping servers that just failed),
retries transient failures with exponential backoff, and closes every session it opened.

Retries never replay a `/step` that may have reached the server: an action is not
idempotent. Only connection failures (nothing sent) and 503s are retried for it. Nor a
`/close`: AgentGym's SciWorld answers a second close with HTTP 500.

AgentGym's servers have defects the pool works around (`WireProtocol`): where a server has
no `/close` (WebShop, SQLGym, ALFWorld) a finished session is kept and reset for the next
episode instead of leaking a new one per episode; where `/create` starts handing out ids it
already gave (SQLGym after 8 sessions, WebShop after 8,000) the pool keeps at most that many
live, and an id it already holds coming back from `/create` marks the server full; where a
server runs one request at a time (ALFWorld) requests wait in the client, not in the server's
queue, so their timeout measures the server's work.

Task ids are ours everywhere above this module. For an environment whose servers number
tasks differently (`EnvSpec.task_key`, e.g. AgentGym's TextCraft), a server that is not
agenttrain's (no `agenttrain` in `GET /health`) has its id -> task table probed once, cached
on disk and spot-checked on later use; each reset then sends the server's id for our task, and
checks that the first observation shows it.

Transport: aiohttp. httpx was measured first and its connection pool collapses with many
requests in flight (303 steps/s, p99 292 ms at 32 sessions against 5,347 steps/s, p99
7 ms for aiohttp on the same server; docs/benchmarks.md), and rollouts keep many
sessions in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import orjson

from agenttrain.envs.base import EnvironmentNotReset, EnvSpec, Observation, StepResult
from agenttrain.envs.registry import get_spec
from agenttrain.serving.errors import (
    EnvRequestFailed,
    EnvServerError,
    ProtocolMismatch,
    ServerBusy,
    ServerRefused,
    ServerTimeout,
    ServerUnreachable,
    SessionLost,
    WrongServer,
)
from agenttrain.serving.task_map import (
    TaskMapError,
    TaskNotFound,
    TaskTable,
    TaskTableCache,
    default_cache_dir,
    local_task_table,
)

log = logging.getLogger(__name__)
T = TypeVar("T")

RETRYABLE_STATUS = (502, 503, 504)
PROTOCOL_FIELDS = frozenset({"id", "env_idx", "observation", "done", "reward", "deleted"})
"""Fields of a reset answer that belong to the protocol, not to the task."""
LOST_SESSION_MARKERS = ("is not valid", "has been deleted")
"""AgentGym's messages for an id the server does not know (any more)."""
PROBE_SESSIONS = 4
"""Sessions that read a server's task table in parallel."""
SPOT_CHECKS = 4
"""Ids of a cached table re-read to confirm the server still numbers tasks that way."""


@dataclass(frozen=True)
class Answer:
    """An HTTP answer read in full: status and body."""

    status: int
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")

    def json(self) -> Any:
        return orjson.loads(self.body)


def normalize_url(url: str) -> str:
    url = url.strip().rstrip("/")
    return url if "://" in url else f"http://{url}"


class EnvServerPool:
    """Sessions of one environment over one or more AgentGym-compatible servers."""

    def __init__(
        self,
        env: str | EnvSpec,
        urls: str | Sequence[str],
        *,
        token: str | None = None,
        timeout_s: float = 60.0,
        connect_timeout_s: float = 5.0,
        retries: int = 3,
        backoff_s: float = 0.2,
        down_for_s: float = 5.0,
        max_connections: int = 512,
        task_table_dir: Path | None = None,
    ) -> None:
        self.spec = get_spec(env) if isinstance(env, str) else env
        self.urls = [normalize_url(u) for u in ([urls] if isinstance(urls, str) else urls)]
        if not self.urls:
            raise ValueError("EnvServerPool needs at least one server URL")
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        self.down_for_s = down_for_s
        self._headers = {"Content-Type": "application/json"}
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
        self._timeout = aiohttp.ClientTimeout(total=timeout_s, sock_connect=connect_timeout_s)
        self._max_connections = max_connections
        self._http: aiohttp.ClientSession | None = None  # made on first use, inside the loop
        self.live_sessions: dict[str, int] = dict.fromkeys(self.urls, 0)
        self._down_until: dict[str, float] = {}
        self._verified: set[str] = set()
        self._verify_locks = {url: asyncio.Lock() for url in self.urls}
        self._open: set[RemoteEnvironment] = set()
        self._jitter = random.Random(0)  # only spreads retry timing; never touches results
        self._table_cache = TaskTableCache(task_table_dir or default_cache_dir())
        self._task_tables: dict[str, TaskTable | None] = {}
        """Per server: its id -> task table, or None where its ids are ours."""
        self._our_tasks: TaskTable | None = None
        proto = self.spec.protocol
        self._held: dict[str, set[int]] = {url: set() for url in self.urls}
        """Per server: the sessions in an episode now."""
        self._idle: dict[str, list[int]] = {url: [] for url in self.urls}
        """Per server without `/close`: finished sessions, reset for the next episode."""
        self._session_cap: dict[str, int | None] = dict.fromkeys(self.urls, proto.max_sessions)
        self._capacity = asyncio.Condition()
        """Guards `live_sessions`, `_held` and `_idle`; notified when a session is released."""
        limit = proto.max_requests_in_flight
        self._request_slots = {url: asyncio.Semaphore(limit) for url in self.urls} if limit else {}

    async def __aenter__(self) -> EnvServerPool:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def environment(self) -> RemoteEnvironment:
        """A new session handle; the server-side session is created on the first `reset`."""
        return RemoteEnvironment(self)

    async def verify(self) -> None:
        """Check every server's identity, and read (or spot-check the cached) task table of
        each that numbers tasks its own way, now rather than before its first use."""
        await asyncio.gather(*(self._verify(url) for url in self.urls))

    async def check_tasks(self, task_ids: Iterable[int]) -> None:
        """Refuse up front our task ids whose task some server lacks, naming them all
        (otherwise each such episode fails on its reset)."""
        await self.verify()
        wanted = set(task_ids)
        for url, table in self._task_tables.items():
            if table is None or self._our_tasks is None:
                continue
            offered = set(table.keys.values())
            missing = sorted({self._our_tasks.key_of(k) for k in wanted} - offered)
            if missing:
                raise TaskNotFound(
                    f"{url} lacks {len(missing)} of the {self.spec.name} tasks asked for: "
                    + ", ".join(map(repr, missing))
                )

    async def aclose(self) -> None:
        """Close every session still open, then the connections."""
        await asyncio.gather(*(env.close() for env in list(self._open)))
        if self._http is not None:
            await self._http.close()
            self._http = None

    def _session(self) -> aiohttp.ClientSession:
        if self._http is None:
            self._http = aiohttp.ClientSession(
                headers=self._headers,
                timeout=self._timeout,
                connector=aiohttp.TCPConnector(limit=self._max_connections),
                json_serialize=lambda obj: orjson.dumps(obj).decode(),
            )
        return self._http

    async def _verify(self, url: str) -> None:
        if url in self._verified:
            return
        async with self._verify_locks[url]:
            if url in self._verified:
                return
            expected = self.spec.protocol.root_text
            response = await self._exchange("GET", url, "/", idempotent=True)
            if response.status == 401:  # the right server, wanting a token we do not send
                raise ServerRefused(url, "/", 401, response.text)
            found = _root_text(response)
            if found != expected:
                raise WrongServer(url, expected, found)
            if self.spec.task_key is not None:
                self._our_tasks = await local_task_table(self.spec)
                self._task_tables[url] = await self._server_task_table(url)
            self._verified.add(url)

    async def _server_task_table(self, url: str) -> TaskTable | None:
        """The server's id -> task table; None for our own server, whose ids are ours."""
        if await self._is_agenttrain(url):
            return None
        root_text = self.spec.protocol.root_text
        cached = self._table_cache.load(url, root_text, self.spec.name)
        if cached is not None:
            if await self._agrees(url, cached):
                return cached
            log.warning("%s numbers tasks differently than when last probed; probing again", url)
        return await self._probe(url)

    async def _is_agenttrain(self, url: str) -> bool:
        answer = await self._exchange("GET", url, "/health", idempotent=True)
        if answer.status != 200:
            return False  # AgentGym's servers have no /health
        try:
            body = answer.json()
        except ValueError:
            return False
        return isinstance(body, Mapping) and "agenttrain" in body

    async def _agrees(self, url: str, table: TaskTable) -> bool:
        """Whether a few ids (a different sample each time) still name the cached tasks."""
        sample = random.Random().sample(sorted(table.keys), min(SPOT_CHECKS, len(table.keys)))
        found = await self._read_task_keys(url, sample, sessions=1)
        return all(found[task_id] == table.keys[task_id] for task_id in sample)

    async def _probe(self, url: str) -> TaskTable:
        """Read which task each server id 0..num_tasks-1 names, and cache the table."""
        assert self._our_tasks is not None
        ids = sorted(self._our_tasks.keys)
        log.info("reading the task table of %s (%d resets)", url, len(ids))
        keys = await self._read_task_keys(url, ids, sessions=PROBE_SESSIONS)
        table = TaskTable(self.spec.name, keys, f"the server at {url}")
        self._table_cache.save(url, self.spec.protocol.root_text, table)
        return table

    async def _reprobe(self, url: str, stale: TaskTable | None) -> None:
        """Replace a table found stale mid-run (another install answers), once for all sessions."""
        async with self._verify_locks[url]:
            if self._task_tables.get(url) is stale:
                log.warning("%s no longer numbers tasks as probed; probing again", url)
                self._task_tables[url] = await self._probe(url)

    async def _read_task_keys(
        self, url: str, ids: Sequence[int], *, sessions: int
    ) -> dict[int, str]:
        """Reset `sessions` temporary sessions to each of the server's `ids` and read the tasks."""
        parts = [ids[i::sessions] for i in range(min(sessions, len(ids)))]
        found = await asyncio.gather(*(self._read_part(url, part) for part in parts))
        return {task_id: key for part in found for task_id, key in part.items()}

    async def _read_part(self, url: str, ids: Sequence[int]) -> dict[int, str]:
        session_id = await self._create(url, ids[0])
        try:
            return {
                task_id: self._task_key(url, await self._reset_session(url, session_id, task_id))
                for task_id in ids
            }
        finally:
            await self._close_session(url, session_id)

    def _task_key(self, url: str, first: Observation) -> str:
        details = self.spec.describe(first.text) if self.spec.describe else {}
        key = details.get(self.spec.task_key or "")
        if key is None:
            raise ProtocolMismatch(
                url, f"a first observation shows no {self.spec.task_key}: {first.text[-200:]!r}"
            )
        return str(key)

    def _server_task_id(self, url: str, task_id: int) -> int:
        """The server's id for our task `task_id` (the same where its ids are ours)."""
        table = self._task_tables.get(url)
        if table is None or self._our_tasks is None:
            return task_id
        return table.id_of(self._our_tasks.key_of(task_id))

    def _shows_other_task(self, url: str, task_id: int, first: Observation) -> str | None:
        """What went wrong when `first` is not our task `task_id`'s; None when it is."""
        if self._task_tables.get(url) is None or self._our_tasks is None:
            return None
        expected, shown = self._our_tasks.key_of(task_id), self._task_key(url, first)
        if shown == expected:
            return None
        server_id = self._server_task_id(url, task_id)
        return f"server id {server_id} showed {shown!r} where {expected!r} was expected"

    async def _open_session(self, task_id: int) -> tuple[str, int]:
        """A session on the least-loaded server that works and has room (waiting while every
        server is full); returns (url, id)."""
        failures: list[EnvServerError] = []
        tried: set[str] = set()
        while (url := await self._reserve(tried)) is not None:
            try:
                session_id = await self._session_on(url, task_id)
            except (ServerUnreachable, ServerTimeout, ServerBusy) as failure:
                await self._unreserve(url)
                self._down_until[url] = time.monotonic() + self.down_for_s
                failures.append(failure)
                tried.add(url)
                continue
            except BaseException:
                await self._unreserve(url)
                raise
            if session_id is None:  # the server is full: wait for one of ours to finish
                await self._unreserve(url)
                continue
            return url, session_id
        if len(failures) == 1:
            raise failures[0]
        reasons = "; ".join(str(f) for f in failures)
        raise ServerUnreachable(", ".join(self.urls), f"no server could open a session: {reasons}")

    async def _reserve(self, tried: set[str]) -> str | None:
        """Count a new session on the best server not yet `tried` that has room, waiting while
        none has; None when every server was tried."""
        async with self._capacity:
            while True:
                untried = [url for url in self.urls if url not in tried]
                if not untried:
                    return None
                roomy = [url for url in untried if self._has_room(url)]
                if roomy:
                    now = time.monotonic()
                    url = min(
                        roomy,
                        key=lambda u: (self._down_until.get(u, 0) > now, self.live_sessions[u]),
                    )
                    self.live_sessions[url] += 1
                    return url
                await self._capacity.wait()

    def _has_room(self, url: str) -> bool:
        cap = self._session_cap[url]
        return cap is None or self.live_sessions[url] < cap

    async def _unreserve(self, url: str) -> None:
        async with self._capacity:
            self.live_sessions[url] = max(0, self.live_sessions[url] - 1)
            self._capacity.notify_all()

    async def _session_on(self, url: str, task_id: int) -> int | None:
        """A finished session of `url` to reuse, or a new one; None when `/create` answered
        the id of a session in an episode now (the server recycles ids: it is full)."""
        await self._verify(url)
        if self._idle[url]:
            session_id = self._idle[url].pop()
        else:
            session_id = await self._create(url, self._server_task_id(url, task_id))
            if session_id in self._held[url]:
                self._session_cap[url] = len(self._held[url])
                log.warning(
                    "%s handed out session %s, which is in an episode: it recycles ids, so "
                    "at most %d episodes run there at once",
                    url,
                    session_id,
                    len(self._held[url]),
                )
                return None
            if session_id in self._idle[url]:
                self._idle[url].remove(session_id)
        self._held[url].add(session_id)
        return session_id

    async def _create(self, url: str, server_task_id: int) -> int:
        """Open a session; `server_task_id` (the server's numbering) preloads it where asked."""
        proto = self.spec.protocol
        body: dict[str, Any] | None = dict(proto.create_body) if proto.create_body else None
        if proto.create_task_field:
            body = {**(body or {}), proto.create_task_field: server_task_id}
        answer = await self._send("POST", url, "/create", json=body, idempotent=False)
        if isinstance(answer, Mapping) and isinstance(answer.get(proto.id_field), int):
            return answer[proto.id_field]
        if isinstance(answer, int) and not isinstance(answer, bool):
            return answer
        raise ProtocolMismatch(url, f"/create answered {answer!r:.200}, expected a session id")

    async def _reset_session(self, url: str, session_id: int, server_task_id: int) -> Observation:
        proto = self.spec.protocol
        body = {proto.id_field: session_id, proto.task_field: server_task_id, **proto.reset_extra}
        answer = await self._send("POST", url, "/reset", json=body, idempotent=True)
        return _first_observation(self.spec, url, answer)

    async def _close_session(self, url: str, session_id: int) -> None:
        """Close a server-side session (never raises: closing must not hide another error)."""
        if not self.spec.protocol.has_close:
            return  # AgentGym's server for this env has no /close; nothing more can be done
        try:
            body = {self.spec.protocol.id_field: session_id}
            await self._send("POST", url, "/close", json=body, idempotent=False)
        except EnvServerError as failure:
            log.warning("could not close session %s on %s: %s", session_id, url, failure)

    async def _release(self, url: str, session_id: int, *, reuse: bool) -> None:
        """End an episode's hold on a session; `reuse` keeps it for the next episode."""
        async with self._capacity:
            self._held[url].discard(session_id)
            if reuse:
                self._idle[url].append(session_id)
            self.live_sessions[url] = max(0, self.live_sessions[url] - 1)
            self._capacity.notify_all()

    def _request_slot(self, url: str) -> contextlib.AbstractAsyncContextManager[Any]:
        return self._request_slots.get(url) or contextlib.nullcontext()

    async def _send(self, method: str, url: str, route: str, **request: Any) -> Any:
        """One request with retries; returns the decoded JSON answer or raises a typed error."""
        return self._decode(url, route, await self._exchange(method, url, route, **request))

    async def _exchange(
        self,
        method: str,
        url: str,
        route: str,
        *,
        json: Any = None,
        params: Mapping[str, Any] | None = None,
        idempotent: bool,
    ) -> Answer:
        """Send with retries on transient failures; any HTTP answer is returned as is."""
        attempt = 0
        while True:
            try:
                data = None if json is None else orjson.dumps(json)
                request = self._session().request
                async with (
                    self._request_slot(url),
                    request(method, url + route, data=data, params=params) as response,
                ):
                    answer = Answer(response.status, await response.read())
            except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError) as failure:
                # Nothing reached the server: safe to retry any request.
                if attempt >= self.retries:
                    raise ServerUnreachable(url, f"{route}: {_describe(failure)}") from failure
            except asyncio.TimeoutError as failure:
                if not idempotent or attempt >= self.retries:
                    raise ServerTimeout(
                        url, f"{route} did not answer within {self.timeout_s:g} s"
                    ) from failure
            except aiohttp.ClientError as failure:
                if not idempotent or attempt >= self.retries:
                    raise ServerUnreachable(url, f"{route}: {_describe(failure)}") from failure
            else:
                if answer.status not in RETRYABLE_STATUS or attempt >= self.retries:
                    return answer
            await asyncio.sleep(self._delay(attempt))
            attempt += 1

    def _delay(self, attempt: int) -> float:
        return min(5.0, self.backoff_s * 2**attempt) * self._jitter.uniform(0.5, 1.5)

    def _decode(self, url: str, route: str, response: Answer) -> Any:
        if response.status != 200:
            error = ServerBusy if response.status == 503 else ServerRefused
            raise error(url, route, response.status, _error_text(response))
        try:
            answer = response.json()
        except ValueError:
            raise ProtocolMismatch(
                url, f"{route} answered non-JSON: {response.text[:200]!r}"
            ) from None
        if isinstance(answer, Mapping) and "error" in answer:
            message = str(answer["error"])
            lost = any(marker in message for marker in LOST_SESSION_MARKERS)
            raise (SessionLost if lost else EnvRequestFailed)(url, route, message)
        return answer


class RemoteEnvironment:
    """One session on a server of the pool, implementing the `Environment` protocol."""

    def __init__(self, pool: EnvServerPool) -> None:
        self.spec = pool.spec
        self._pool = pool
        self.url: str | None = None
        self.session_id: int | None = None
        self._in_doubt = False
        """A request of this session failed in transit: the server may still be working on it,
        so the session is not handed to another episode."""

    async def reset(self, task_id: int) -> Observation:
        """Start our task `task_id` (sent as the server's id for the same task)."""
        first = await self._watched(self._reset_to(task_id))
        assert self.url is not None
        if self._pool._shows_other_task(self.url, task_id, first) is None:
            return first
        # The server renumbered its tasks (another install now answers there): read them again.
        await self._pool._reprobe(self.url, self._pool._task_tables.get(self.url))
        first = await self._watched(self._reset_to(task_id))
        problem = self._pool._shows_other_task(self.url, task_id, first)
        if problem is not None:
            raise TaskMapError(f"{self.url}: {problem}, even after reading its task table again")
        return first

    async def step(self, action: str) -> StepResult:
        if self.session_id is None or self.url is None:
            raise EnvironmentNotReset(f"{self.spec.display_name}: call reset() before step()")
        proto = self.spec.protocol
        answer = await self._watched(
            self._pool._send(
                "POST",
                self.url,
                "/step",
                json={proto.id_field: self.session_id, "action": action},
                idempotent=False,
            )
        )
        return _step_result(self.spec, self.url, answer)

    async def close(self) -> None:
        """Close the server-side session, or keep it for the next episode where the server has
        no `/close` (never raises: closing must not hide another error)."""
        if self.session_id is None or self.url is None:
            return
        url, session_id = self.url, self.session_id
        reuse = not self.spec.protocol.has_close and not self._in_doubt
        await self._forget(reuse=reuse)
        if not reuse:
            await self._pool._close_session(url, session_id)

    async def __aenter__(self) -> RemoteEnvironment:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def _open(self, task_id: int) -> None:
        self.url, self.session_id = await self._pool._open_session(task_id)
        self._in_doubt = False
        self._pool._open.add(self)

    async def _forget(self, *, reuse: bool = False) -> None:
        url, session_id = self.url, self.session_id
        self._pool._open.discard(self)
        self.url, self.session_id = None, None
        if url is not None and session_id is not None:
            await self._pool._release(url, session_id, reuse=reuse)

    async def _watched(self, request: Awaitable[T]) -> T:
        """Await a request of this session, noting a failure in transit."""
        try:
            return await request
        except (ServerTimeout, ServerUnreachable):
            self._in_doubt = True
            raise

    async def _reset_to(self, task_id: int) -> Observation:
        if self.session_id is None:
            await self._open(task_id)
        try:
            return await self._reset_session(task_id)
        except SessionLost:
            # The server forgot the session (restart, idle expiry): a reset starts afresh anyway.
            await self._forget()
            await self._open(task_id)
            return await self._reset_session(task_id)

    async def _reset_session(self, task_id: int) -> Observation:
        assert self.url is not None and self.session_id is not None
        server_task_id = self._pool._server_task_id(self.url, task_id)
        return await self._pool._reset_session(self.url, self.session_id, server_task_id)


def _first_observation(spec: EnvSpec, url: str, answer: Any) -> Observation:
    proto = spec.protocol
    try:
        if proto.reset_returns == "pair":
            return Observation(str(answer[0]))
        if proto.reset_returns == "text":
            return Observation(str(answer))
        info = {k: v for k, v in answer.items() if k not in PROTOCOL_FIELDS}
        text = answer["observation"]
        if proto.first_observation == "task_and_observation":
            text = f"{answer['task_description']}\n{text}"
        elif proto.first_observation == "with_actions":
            text = f"{text}\nAVAILABLE ACTIONS: {','.join(answer['available_actions'])}"
        return Observation(text, info)
    except (KeyError, IndexError, TypeError, AttributeError):
        raise ProtocolMismatch(
            url, f"/reset answered {answer!r:.200}, not {spec.display_name}'s reset format"
        ) from None


def _step_result(spec: EnvSpec, url: str, answer: Any) -> StepResult:
    field = spec.protocol.step_observation_field
    try:
        info = {k: v for k, v in answer.items() if k not in (field, "reward", "done")}
        return StepResult(str(answer[field]), float(answer["reward"]), bool(answer["done"]), info)
    except (KeyError, TypeError, ValueError, AttributeError):
        raise ProtocolMismatch(
            url, f"/step answered {answer!r:.200}, expected {field!r}, 'reward' and 'done'"
        ) from None


def _root_text(response: Answer) -> str:
    if response.status != 200:
        return f"HTTP {response.status} {response.text[:120]}"
    try:
        body = response.json()
    except ValueError:
        return response.text[:200]  # a Quart server (WebArena) answers plain text
    return body if isinstance(body, str) else repr(body)[:200]


def _error_text(response: Answer) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text
    if isinstance(body, Mapping):
        return str(body.get("error") or body.get("detail") or body)
    return str(body)


def _describe(failure: Exception) -> str:
    detail = str(failure)
    return f"{type(failure).__name__}: {detail}" if detail else type(failure).__name__
