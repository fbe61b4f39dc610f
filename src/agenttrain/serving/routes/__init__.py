"""The server's routes by concern, each an `APIRouter` built from what it needs:
`identity` (`/`, `/health`), `sessions` (`/create` to `/close`, and the upkeep of the session
store), `agentgym` (AgentGym's dialects: request fields, answer shapes, extra queries)."""
