"""Replay with decryption: the read path of ``replay show/run`` on an encrypted archived run,
against fastavro reading the same sealed records.

The run (``--events``, the payloads of ``replay_throughput.py``) is recorded as the Recorder
seals it: a data key from a keyring provider (docs/confidentiality.md), every request,
response and error an AES-256-GCM envelope, the wrapped key in RUN_STARTED; then chained and
archived to a file:// store by the archiver's own writer. Then, in the same process and on
the same files:

* **tracevault** (the headline): what ``replay run`` does before the agent sees an event:
  ``load_from_archive`` (one listing, every segment and receipt read, SHA-256 taken) +
  ``verify(rebuild=True)`` (checks 1-6 and A1-A3 over every record, every event decoded in
  the same walk, as ``replay_throughput.py``) + ``opened.opened`` (the data key unwrapped
  once through the keyring provider, every field opened, its plaintext checked as canonical
  JSON: the sequencer could check only the envelope).
* **plain** (extra fields): the same read of the same run recorded in clear (nothing to
  open): what encryption costs the read path.
* **baseline**: ``fastavro.reader`` over the same segment files, iterating every record.

Best of ``--reps`` for each side, rounds alternating.

    .venv/bin/python bench/replay_encrypted.py [--events 100000] [--reps 3]

Last line: {"events", "seconds", "events_per_s", "baseline_events_per_s", "ratio", ...}.
Target: ratio >= 0.45.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
import time
from pathlib import Path

from replay_throughput import RUN, archive, arguments, baseline, make_run

from tracevault.archive import open_store
from tracevault.chain import genesis, link
from tracevault.config import Settings
from tracevault.content import KEY_ATTRIBUTE, KeyringProvider, RunCipher
from tracevault.replayer.load.archive import load_from_archive
from tracevault.replayer.load.opened import opened
from tracevault.replayer.load.verify import verify
from tracevault.schemas import EventKind, SealedEvent, decode_event, encode_event

TENANT = "bench"


def encrypt_run(plain: list[SealedEvent], provider: KeyringProvider) -> list[SealedEvent]:
    """``plain``'s events sealed field by field as the Recorder's hook does, chained anew."""
    data_key, wrapped = provider.generate(TENANT, None, RUN)
    cipher = RunCipher(RUN, data_key)
    prev = genesis(RUN)
    out: list[SealedEvent] = []
    for s in plain:
        ev = decode_event(s.raw)
        seq = ev.seq
        tool = ev.kind is EventKind.TOOL_CALL
        attrs = {**ev.attributes, KEY_ATTRIBUTE: wrapped.to_attribute()} if seq == 0 else None
        ev = dataclasses.replace(
            ev,
            request=cipher.seal_tool_request(seq, ev.request)
            if tool
            else cipher.seal(seq, "request", ev.request),
            response=cipher.seal(seq, "response", ev.response),
            attributes=attrs if attrs is not None else ev.attributes,
        )
        raw = encode_event(ev)
        h = link(prev, raw)
        out.append(dataclasses.replace(s, prev_hash=prev, hash=h, raw=raw))
        prev = h
    return out


def read(root: Path, settings: Settings) -> tuple[float, int]:
    """load + verify + open every event: the read path of ``replay run`` / ``show``."""
    store = open_store(f"file://{root}")
    t = time.perf_counter()
    run = load_from_archive(store, RUN)
    report = verify(run, require_finished=True, rebuild=True)
    events = opened(settings, report.events)
    last = events[-1]
    dt = time.perf_counter() - t
    store.close()
    assert report.finished and len(events) == report.count
    assert last.kind is EventKind.RUN_FINISHED and last.response == b'{"output":{"ok":true}}'
    return dt, report.count


def main() -> None:
    args = arguments(__doc__)
    with tempfile.TemporaryDirectory(prefix="tv-replay-enc-bench-") as tmp:
        os.chmod(tmp, 0o700)
        keyring = Path(tmp) / "keyring.json"
        provider = KeyringProvider(keyring)
        settings = Settings(key_provider="keyring", keyring_path=str(keyring), tenant=TENANT)
        t = time.perf_counter()
        plain = make_run(args.events)
        enc_root, plain_root = Path(tmp) / "enc", Path(tmp) / "plain"
        paths = archive(enc_root, encrypt_run(plain, provider), args.per_segment)
        archive(plain_root, plain, args.per_segment)
        print(json.dumps({"phase": "setup", "seconds": round(time.perf_counter() - t, 3)}))
        best = {"ours": float("inf"), "plain": float("inf"), "base": float("inf")}
        for rep in range(args.reps):
            dt_b, nb = baseline(paths)
            dt_o, no = read(enc_root, settings)
            dt_p, np_ = read(plain_root, settings)
            assert nb == no == np_ == args.events
            for k, v in (("ours", dt_o), ("plain", dt_p), ("base", dt_b)):
                best[k] = min(best[k], v)
            print(json.dumps({"rep": rep, "ours_s": round(dt_o, 4), "plain_s": round(dt_p, 4),
                              "baseline_s": round(dt_b, 4)}))  # fmt: skip
    result = {
        "bench": "replay_encrypted",
        "events": args.events,
        "segments": len(paths),
        "path": "load_from_archive + verify(rebuild) + opened (unwrap, decrypt, canonical)",
        "seconds": round(best["ours"], 4),
        "events_per_s": round(args.events / best["ours"]),
        "baseline_seconds": round(best["base"], 4),
        "baseline_events_per_s": round(args.events / best["base"]),
        "ratio": round(best["base"] / best["ours"], 3),
        "plain_seconds": round(best["plain"], 4),
        "plain_ratio": round(best["base"] / best["plain"], 3),
        "targets": {"ratio": 0.45},
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
