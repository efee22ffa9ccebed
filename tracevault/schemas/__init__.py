"""The published Avro schemas of tracevault and their codec.

Import from here, never from the private modules::

    from tracevault.schemas import TraceEvent, encode_event, decode_event, canonical_json
"""

from tracevault.schemas._binary import avro_bytes, avro_long
from tracevault.schemas._canonical import (
    canonical_json,
    canonical_json_like,
    canonical_json_plain,
    check_canonical,
    loads_canonical,
)
from tracevault.schemas._codec import (
    MAGIC,
    Codec,
    decode_event,
    decode_sealed,
    encode_event,
    encode_sealed,
)
from tracevault.schemas._events import (
    AgentInfo,
    ErrorInfo,
    EventKind,
    Interleave,
    SealedEvent,
    TraceEvent,
    micros_to_datetime,
)
from tracevault.schemas._models import AgentModel, ErrorModel, EventModel
from tracevault.schemas._registry import (
    SCHEMA_DIR,
    SchemaSet,
    SchemaVersion,
    default_schemas,
    fingerprint,
)
from tracevault.schemas.fast import VarintError, read_long

__all__ = [
    # records
    "AgentInfo",
    "ErrorInfo",
    "EventKind",
    "Interleave",
    "SealedEvent",
    "TraceEvent",
    "micros_to_datetime",
    # codec
    "MAGIC",
    "Codec",
    "decode_event",
    "decode_sealed",
    "encode_event",
    "encode_sealed",
    # canonical JSON
    "canonical_json",
    "canonical_json_like",
    "canonical_json_plain",
    "check_canonical",
    "loads_canonical",
    # schema versions
    "SCHEMA_DIR",
    "SchemaSet",
    "SchemaVersion",
    "default_schemas",
    "fingerprint",
    # Avro binary primitives (for hand-written fast paths)
    "VarintError",
    "avro_bytes",
    "avro_long",
    "read_long",
    # boundary models
    "AgentModel",
    "ErrorModel",
    "EventModel",
]
