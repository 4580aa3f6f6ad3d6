"""Read tokens: one operator token sees everything; a team's token sees its own jobs in full and other teams'
only as counts. Tokens live in a YAML file:

    operator: s3cret-operator          # or a list of tokens
    teams:
      nlp: s3cret-nlp
      vision: [s3cret-vision, another-vision-token]
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from pathlib import Path

import yaml


class TokenFileError(ValueError):
    """The tokens file is missing or malformed; the message says how to fix it."""


@dataclass(frozen=True)
class Viewer:
    """Who a request speaks for: the operator (team None) or one team."""

    team: str | None

    @property
    def operator(self) -> bool:
        return self.team is None

    def sees_jobs_of(self, team: str | None) -> bool:
        return self.operator or team == self.team


OPERATOR = Viewer(None)


@dataclass(frozen=True)
class Tokens:
    by_token: dict[str, Viewer]

    @classmethod
    def load(cls, path: Path) -> Tokens:
        try:
            raw = yaml.safe_load(path.read_text())
        except OSError as error:
            raise TokenFileError(f"cannot read the tokens file {path}: {error.strerror}") from None
        except yaml.YAMLError as error:
            raise TokenFileError(f"{path} is not YAML: {error}") from None
        return cls.parse(raw, str(path))

    @classmethod
    def parse(cls, raw: object, source: str = "tokens") -> Tokens:
        if not isinstance(raw, dict) or not set(raw) <= {"operator", "teams"}:
            raise TokenFileError(f"{source}: expected a mapping with 'operator' and/or 'teams'")
        by_token: dict[str, Viewer] = {}

        def add(tokens: object, viewer: Viewer, where: str) -> None:
            for token in [tokens] if isinstance(tokens, str) else tokens if isinstance(tokens, list) else [None]:
                if not isinstance(token, str) or len(token) < 8:
                    raise TokenFileError(f"{source}: {where}: a token is a string of at least 8 characters")
                if token in by_token:
                    raise TokenFileError(f"{source}: {where}: a token is given twice")
                by_token[token] = viewer

        if raw.get("operator") is not None:
            add(raw["operator"], OPERATOR, "operator")
        teams = raw.get("teams") or {}
        if not isinstance(teams, dict):
            raise TokenFileError(f"{source}: 'teams' maps team names to tokens")
        for team, tokens in sorted(teams.items()):
            add(tokens, Viewer(str(team)), f"teams.{team}")
        if not by_token:
            raise TokenFileError(f"{source}: no tokens")
        return cls(by_token)

    def viewer(self, token: str) -> Viewer | None:
        """The viewer a token stands for; compared in constant time."""
        found = None
        for known, viewer in self.by_token.items():
            if hmac.compare_digest(known.encode(), token.encode()):
                found = viewer
        return found
