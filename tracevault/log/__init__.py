"""The signed Merkle log beneath every run: RFC 6962 trees, C2SP signed notes and checkpoints.

Beneath ``consumer`` (the sequencer signs, the archiver checks) and ``replayer`` (verify,
bundles); imports neither, nor any Kafka client. Design: docs/log.md.
"""

from tracevault.log._checkpoint import Checkpoint, log_origin
from tracevault.log._evidence import (
    LOG_CHECKS,
    LeafProof,
    RunEvent,
    RunLogEvidence,
    check_run_log,
)
from tracevault.log._gather import (
    FoundCheckpoint,
    RunLeaf,
    compact_source,
    fast_inclusion_proof,
    run_log_evidence,
)
from tracevault.log._keys import (
    LOG_KEY_ENV,
    load_signer,
    load_verifiers,
    load_witness_verifiers,
    write_private_key,
)
from tracevault.log._leaf import LEAF_DOMAIN, leaf_data, leaf_hash
from tracevault.log._merkle import (
    EMPTY_ROOT,
    CompactTree,
    NodeSource,
    consistency_proof,
    hash_children,
    hash_leaf,
    inclusion_proof,
    list_source,
    range_hash,
    root_from_inclusion,
    tree_root,
    verify_consistency,
    verify_inclusion,
)
from tracevault.log._note import (
    Ed25519Signer,
    Ed25519Verifier,
    NoteSigner,
    NoteVerifier,
    Signature,
    key_id,
    open_note,
    parse_vkey,
    sign_note,
    split_note,
)
from tracevault.log._record import (
    CHECKPOINT_KEY,
    RECORD_HEADER,
    RECORD_HEADER_CHECKPOINT,
    CheckpointRecord,
    VerifiedCheckpoint,
    is_checkpoint_record,
)
from tracevault.log._tlogproof import TLOG_PROOF_HEADER, TlogProof

__all__ = [
    "FoundCheckpoint",
    "RunLeaf",
    "TLOG_PROOF_HEADER",
    "TlogProof",
    "compact_source",
    "fast_inclusion_proof",
    "load_witness_verifiers",
    "run_log_evidence",
    "LOG_CHECKS",
    "LeafProof",
    "RunEvent",
    "RunLogEvidence",
    "check_run_log",
    "CHECKPOINT_KEY",
    "EMPTY_ROOT",
    "LEAF_DOMAIN",
    "LOG_KEY_ENV",
    "RECORD_HEADER",
    "RECORD_HEADER_CHECKPOINT",
    "Checkpoint",
    "CheckpointRecord",
    "CompactTree",
    "Ed25519Signer",
    "Ed25519Verifier",
    "NodeSource",
    "NoteSigner",
    "NoteVerifier",
    "Signature",
    "VerifiedCheckpoint",
    "consistency_proof",
    "hash_children",
    "hash_leaf",
    "inclusion_proof",
    "is_checkpoint_record",
    "key_id",
    "leaf_data",
    "leaf_hash",
    "list_source",
    "load_signer",
    "load_verifiers",
    "log_origin",
    "open_note",
    "parse_vkey",
    "range_hash",
    "root_from_inclusion",
    "sign_note",
    "split_note",
    "tree_root",
    "verify_consistency",
    "verify_inclusion",
    "write_private_key",
]
