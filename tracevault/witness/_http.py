"""C2SP tlog-witness ``POST /add-checkpoint`` in front of the same :class:`Witness`.

For a log that pushes its checkpoints (a tracevault archive, another tlog) rather than one
the witness follows in Kafka. Request body: ``old <size>\\n``, at most 63 base64 proof lines,
a blank line, the signed checkpoint. Answers: 200 with the cosignature line; 400 malformed;
404 an origin this witness does not witness (not a partition log of its deployment); 403
not signed by a trusted log key; 409 ``text/x.tlog.size`` with the witness's size (old
size is not its size, a different root for its size, a rollback); 422 the proof failed.
The witness's lock makes check-and-persist atomic, as the spec requires (c2sp.org/tlog-witness).
"""

from __future__ import annotations

import base64
import binascii
import logging
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from tracevault.errors import LogError, TraceVaultError
from tracevault.transparency import split_note
from tracevault.witness._core import Refused, Witness

__all__ = ["MAX_BODY", "BadRequest", "parse_add_checkpoint", "serve_add_checkpoint"]

log = logging.getLogger(__name__)

MAX_BODY = 64 * 1024
_MAX_PROOF = 63
_STATUS = {
    200: "200 OK",
    400: "400 Bad Request",
    403: "403 Forbidden",
    404: "404 Not Found",
    405: "405 Method Not Allowed",
    409: "409 Conflict",
    413: "413 Content Too Large",
    422: "422 Unprocessable Entity",
    500: "500 Internal Server Error",
}


class BadRequest(Exception):
    """An add-checkpoint body that does not parse (answered 400, naming what is wrong)."""


def parse_add_checkpoint(body: bytes) -> tuple[int, list[bytes], str]:
    """(old size, proof, checkpoint note) of an add-checkpoint body; ``BadRequest`` if not."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise BadRequest("body is not UTF-8") from None
    head, sep, note = text.partition("\n\n")
    if not sep:
        raise BadRequest("no blank line before the checkpoint")
    lines = head.split("\n")
    first = lines[0]
    size = first[4:]
    if not first.startswith("old ") or not size.isdigit() or (size != "0" and size[0] == "0"):
        raise BadRequest("the first line must be 'old <size>' in decimal")
    if len(lines) - 1 > _MAX_PROOF:
        raise BadRequest(f"more than {_MAX_PROOF} proof lines")
    proof: list[bytes] = []
    for line in lines[1:]:
        try:
            h = base64.b64decode(line, validate=True)
        except binascii.Error:
            raise BadRequest(f"proof line {line[:60]!r} is not base64") from None
        if len(h) != 32:
            raise BadRequest("a proof line is not a 32-byte hash")
        proof.append(h)
    return int(size), proof, note


def _app(witness: Witness) -> Callable[..., Iterable[bytes]]:
    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        def answer(code: int, body: str, ctype: str = "text/plain; charset=utf-8") -> list[bytes]:
            data = body.encode()
            start_response(
                _STATUS[code], [("Content-Type", ctype), ("Content-Length", str(len(data)))]
            )
            return [data]

        if environ.get("PATH_INFO") != "/add-checkpoint":
            return answer(404, "not found\n")
        if environ.get("REQUEST_METHOD") != "POST":
            return answer(405, "POST only\n")
        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            return answer(400, "bad Content-Length\n")
        if length > MAX_BODY:
            return answer(413, f"body over {MAX_BODY} bytes\n")
        try:
            old, proof, note = parse_add_checkpoint(environ["wsgi.input"].read(length))
            got = witness.add_checkpoint(note, old, proof)
        except BadRequest as e:
            return answer(400, f"{e}\n")
        except Refused as r:
            if r.status == 409:
                return answer(409, f"{r.size}\n", "text/x.tlog.size")
            return answer(r.status, f"{r}\n")
        except (LogError, TraceVaultError) as e:
            log.error("add-checkpoint failed: %s", e)
            return answer(500, "the witness could not record its decision\n")
        latest = witness.latest(got.origin)
        if not got.new and (latest is None or old != latest[0]):
            # the same checkpoint again, but the caller is not at the witness's size
            return answer(409, f"{latest[0] if latest else 0}\n", "text/x.tlog.size")
        _, sigs = split_note(got.note)
        mine = [
            s for s in sigs if (s.name, s.key_id) == (witness.signer.name, witness.signer.key_id)
        ]
        return answer(200, "".join(s.line() for s in mine))

    return app


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        return None


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


def serve_add_checkpoint(witness: Witness, port: int, host: str = "0.0.0.0") -> WSGIServer:  # noqa: S104
    """Serve ``/add-checkpoint`` on ``port`` (0: a free one) in a daemon thread."""
    server = make_server(host, port, _app(witness), _Server, handler_class=_Quiet)
    threading.Thread(target=server.serve_forever, name="witness-http", daemon=True).start()
    return server
