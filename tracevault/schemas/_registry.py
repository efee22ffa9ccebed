"""The published schema versions and their fingerprints.

Every ``<Name>.v<N>.avsc`` file in a schema directory is a published version; none is ever
edited. Readers find the writer schema by its CRC-64-AVRO fingerprint of the Parsing Canonical
Form, then resolve it into the reader's version (Avro schema resolution).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastavro import parse_schema
from fastavro.schema import fingerprint as _fastavro_fingerprint
from fastavro.schema import to_parsing_canonical_form

from tracevault.errors import ConfigError

__all__ = ["SCHEMA_DIR", "SchemaSet", "SchemaVersion", "default_schemas", "fingerprint"]

SCHEMA_DIR = Path(__file__).with_name("avsc")
_FILE = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)\.v(?P<version>[0-9]+)\.avsc$")


def fingerprint(schema: dict[str, Any] | str) -> bytes:
    """The 8-byte CRC-64-AVRO fingerprint of a schema's Parsing Canonical Form.

    The bytes are in the order single-object encoding writes them (little-endian), so
    ``fingerprint("null").hex() == "8a8f25cce724dd63"``, the Avro spec's test value.
    """
    pcf = to_parsing_canonical_form(parse_schema(schema, _write_hint=False))
    return bytes.fromhex(_fastavro_fingerprint(pcf, "CRC-64-AVRO"))


def _strip_logical(node: Any) -> Any:
    """Drop ``logicalType`` so timestamps stay integer micros in process.

    The Parsing Canonical Form ignores logical types, so fingerprints are unchanged, and
    we avoid a datetime round trip per event that could also lose nothing but time.
    """
    if isinstance(node, dict):
        return {k: _strip_logical(v) for k, v in node.items() if k != "logicalType"}
    if isinstance(node, list):
        return [_strip_logical(v) for v in node]
    return node


@dataclass(frozen=True)
class SchemaVersion:
    """One published version: the schema as written, its parsed form and fingerprint."""

    name: str
    version: int
    path: Path
    source: dict[str, Any]
    parsed: Any
    fingerprint: bytes

    @property
    def fingerprint_hex(self) -> str:
        return self.fingerprint.hex()


class SchemaSet:
    """All published versions found in one or more directories, by name and by fingerprint."""

    def __init__(self, *directories: Path) -> None:
        self._by_name: dict[str, dict[int, SchemaVersion]] = {}
        self._by_fp: dict[bytes, SchemaVersion] = {}
        for directory in directories or (SCHEMA_DIR,):
            for path in sorted(Path(directory).glob("*.avsc")):
                m = _FILE.match(path.name)
                if m is None:
                    raise ConfigError(
                        f"schema file {path} is not named <Name>.v<N>.avsc; rename it"
                    )
                self._add(m["name"], int(m["version"]), path)

    def _add(self, name: str, version: int, path: Path) -> None:
        source = json.loads(path.read_text("utf-8"))
        fp = fingerprint(source)
        sv = SchemaVersion(
            name=name,
            version=version,
            path=path,
            source=source,
            parsed=parse_schema(_strip_logical(source), _write_hint=False),
            fingerprint=fp,
        )
        if fp in self._by_fp and self._by_fp[fp].name == name:
            raise ConfigError(f"{path} has the same canonical form as {self._by_fp[fp].path}")
        self._by_name.setdefault(name, {})[version] = sv
        self._by_fp[fp] = sv

    def versions(self, name: str) -> list[SchemaVersion]:
        """Every published version of ``name``, oldest first."""
        return [v for _, v in sorted(self._by_name.get(name, {}).items())]

    def get(self, name: str, version: int | None = None) -> SchemaVersion:
        """A version of ``name``; the newest (current reader) when ``version`` is None."""
        versions = self._by_name.get(name)
        if not versions:
            raise ConfigError(f"no published schema named {name!r}")
        if version is None:
            return versions[max(versions)]
        try:
            return versions[version]
        except KeyError:
            raise ConfigError(
                f"schema {name} has no version {version}; published: {sorted(versions)}"
            ) from None

    def by_fingerprint(self, fp: bytes) -> SchemaVersion | None:
        return self._by_fp.get(fp)

    def all(self) -> list[SchemaVersion]:
        return [v for name in sorted(self._by_name) for v in self.versions(name)]


_DEFAULT: SchemaSet | None = None


def default_schemas() -> SchemaSet:
    """The versions shipped in ``tracevault/schemas/avsc`` (loaded once, on first use)."""
    global _DEFAULT  # noqa: PLW0603 - lazy, so importing tracevault reads no files
    if _DEFAULT is None:
        _DEFAULT = SchemaSet(SCHEMA_DIR)
    return _DEFAULT
