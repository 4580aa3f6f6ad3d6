"""The audit CLI: rebuild, verify, explain and what-if replays over a recorded log; also the `gangway` command."""
