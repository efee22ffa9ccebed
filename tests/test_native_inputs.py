"""Every C entry point checks what it is given: a clean Python exception, never a crash.

The calls are in tests/native_calls.py, each in a forked child, so a segfault (as
``take(msgs, -1, ctx)`` and ``_cmerkle.extend([], 1, [h])`` once gave) fails its own case
here instead of killing the test run. Under the sanitizer build (``.ci/native``) a read out
of bounds, a use after free or a signed overflow aborts the child too.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

EXPECTED = {
    # _cmerkle: the tree size and the list must be a compact tree (one hash per bit of size)
    "merkle_extend_empty_list_size_1": "ValueError",
    "merkle_extend_size_3_one_hash": "ValueError",
    "merkle_extend_negative_size": "ValueError",
    "merkle_extend_size_past_64_bits": "ValueError",
    "merkle_extend_size_that_overflows": "ValueError",
    "merkle_extend_not_a_list": "TypeError",
    "merkle_extend_consistent": "ok (4, 1)",
    "merkle_perfect_root_of_three": "ValueError",
    "merkle_perfect_root_of_an_int": "TypeError",
    "merkle_hash_children_short": "ValueError",
    # the takes: start within the batch; a message the walk holds stays alive
    "ctake_start_negative": "ValueError",
    "ctake_start_past_the_end": "ValueError",
    "ctake_bad_context": "TypeError",
    "ctake_not_a_message": "AttributeError",
    "ctake_takes_a_good_record": "ok (1, 0, 1)",
    "ctake_run_id_length_past_int64": "ok None",
    "ctake_offset_at_int64_max": "ok (0, None, 0)",
    "ctake_batch_dropped_while_walked": "ok (1, 0, 1)",
    # _ccolumns: headers of 10 bytes, kinds >= 1, exact-int counts that add up to the values;
    # a value it cannot walk is declined (None): the Python rows read it
    "ccolumns_short_header": "ValueError",
    "ccolumns_no_kinds": "ValueError",
    "ccolumns_values_not_a_list": "TypeError",
    "ccolumns_counts_past_the_values": "ValueError",
    "ccolumns_negative_count": "ValueError",
    "ccolumns_count_whose_index_clears_the_values": "TypeError",
    "ccolumns_value_cut_short": "ok None",
    "ccolumns_value_not_bytes": "ok None",
    "cseal_start_negative": "ValueError",
    "cseal_start_past_the_end": "ValueError",
    "cseal_bad_context": "TypeError",
    # _cseal's encoders: the batch is read from a copy while the encoders (Python) run
    "cseal_values_not_sealouts": "ValueError",
    "cseal_values_batch_cleared_by_an_encoder": "ok (2, {0: 2})",
    "cseal_values_seq_past_int64": "ValueError",
    "cseal_heads_runs_cleared_by_an_encoder": "ok 2",
    "cseal_peek_short_header": "ValueError",
    "cseal_link_short_hash": "ValueError",
    "cseal_canonical_of_an_int": "TypeError",
    # _csign: the seed is 32 bytes, the key is a capsule key() made; any message
    "csign_key_short_seed": "ValueError",
    "csign_key_of_an_int": "TypeError",
    "csign_sign_not_a_key": "TypeError",
    "csign_sign_another_capsule": "TypeError",
    "csign_sign_a_memoryview": "ok 64",
    "csign_sign_empty_message": "ok 64",
    # _cfields: the key is 32 bytes, the prefix bounded, events a list whose items have a seq;
    # anything it does not open is None (the Python opener decides), never a crash
    "cfields_short_key": "ValueError",
    "cfields_prefix_too_long": "ValueError",
    "cfields_not_a_list": "TypeError",
    "cfields_event_without_seq": "AttributeError",
    "cfields_seq_past_int64_and_not_bytes": "ok [None, None, None]",
    "cfields_envelope_too_short_for_a_tag": "ok [None]",
    "cfields_tool_shape_cut_short": "ok [None, None]",
    "cfields_list_cleared_while_read": "ok [None, None, None]",
    # _cput: a file mode, a lock time after the epoch, only the O_TMPFILE bits, tuples
    "cput_put_negative_mode": "ValueError",
    "cput_put_mode_past_07777": "ValueError",
    "cput_put_lock_before_the_epoch": "ValueError",
    "cput_put_other_open_flags": "ValueError",
    "cput_put_ok": "ok 1",
    "cput_put_batch_not_a_tuple": "TypeError",
    "cput_put_batch_short_tuple": "TypeError",
    "cput_put_batch_negative_mode": "ValueError",
    "cput_put_batch_ok": "ok [1, 1, 0]",
    # _cjcs: any object; MAX_DEPTH (not the C stack) ends deep nesting and cycles; what it
    # leaves to the Python walk comes back checked (an int) or as that walk's error
    "cjcs_nested_a_million_deep": "Unencodable",
    "cjcs_nested_at_max_depth": "ok (0, 'Unencodable')",
    "cjcs_cyclic_list": "Unencodable",
    "cjcs_cyclic_dict_through_a_tuple": "Unencodable",
    "cjcs_huge_list": "ok 0",
    "cjcs_huge_dict": "ok 1",
    "cjcs_deep_subclass_left_to_python": "ok 2",
    "cjcs_python_walk_raises": "KeyError",
    "cjcs_python_walk_returns_a_str": "TypeError",
    "cjcs_init_not_an_exception": "TypeError",
    "cjcs_init_depth_negative": "ValueError",
    "cjcs_scan_of_odd_objects": "ok " + repr(["Unencodable"] * 7),
    # _cwire: prefix and agent bytes, a sound layout, else TypeError; fields the C does not
    # write exactly go to the Python encoder (its bytes or its exception); prev is 32 bytes
    "cwire_encode_prefix_a_str": "TypeError",
    "cwire_encode_three_arguments": "TypeError",
    "cwire_encode_nine_kinds": "TypeError",
    "cwire_encode_fallback_not_callable": "TypeError",
    "cwire_encode_eleven_fields": "ValueError",
    "cwire_encode_not_a_tuple": "TypeError",
    "cwire_encode_seq_a_str": "TypeError",
    "cwire_encode_seq_past_int64_as_python": "ok True",
    "cwire_encode_int64_edges": "ok True",
    "cwire_encode_duration_with_5000_digits": "ValueError",
    "cwire_encode_lone_surrogate_attribute": "UnicodeEncodeError",
    "cwire_encode_error_with_an_int_message": "AttributeError",
    "cwire_encode_16_mib_payload_and_10k_attributes": "ok True",
    "cwire_encode_fallback_that_calls_encode_again": "RecursionError",
    "cwire_link_short_prev": "ValueError",
    "cwire_link_long_prev": "ValueError",
    "cwire_link_raw_a_str": "TypeError",
    "cwire_link_empty_raw": "ok 32",
    # _cfields.Sealer: refuses as RunCipher's Python refuses; one counter, never reset or wrapped
    "csealer_short_key": "ValueError",
    "csealer_long_salt": "ValueError",
    "csealer_start_negative": "OverflowError",
    "csealer_start_past_64_bits": "OverflowError",
    "csealer_key_of_a_str": "TypeError",
    "csealer_not_a_base": "TypeError",
    "csealer_init_again_keeps_the_counter": "ok 1",
    "csealer_seal_seq_past_int64": "OverflowError",
    "csealer_seal_seq_of_a_float": "TypeError",
    "csealer_seal_unknown_field": "ValueError",
    "csealer_seal_field_not_a_str": "ValueError",
    "csealer_seal_plaintext_of_a_str": "TypeError",
    "csealer_seal_empty_plaintext": "ok 56",
    "csealer_seal_the_last_counter_then_refuses": "ok (True, 'refused')",
    "csealer_event_with_one_counter_left": "OverflowError",
    "csealer_tool_shortest_shape": "ok True",
    "csealer_tool_empty_request": "ok True",
    "csealer_tool_key_without_closing": "ok True",
    "csealer_event_bool_that_raises": "ZeroDivisionError",
    "csealer_event_bool_that_seals_on_the_same_sealer": "ok [0, 1, 2]",
    "csealer_event_response_not_bytes": "TypeError",
    "csealer_copy_would_clone_the_counter": "TypeError",
    "csealer_seal_a_large_field": "ok 133388",
}


@pytest.fixture(scope="module")
def outcomes() -> dict[str, str]:
    res = subprocess.run(
        [sys.executable, "-m", "tests.native_calls"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert res.returncode == 0, res.stderr[-4000:]
    out: dict[str, str] = json.loads(res.stdout.strip().splitlines()[-1])
    return out


def test_every_case_is_expected() -> None:
    from tests import native_calls

    assert set(native_calls.CASES) == set(EXPECTED)


@pytest.mark.parametrize("name", list(EXPECTED))
def test_a_hostile_call_gives_a_clean_outcome(outcomes: dict[str, str], name: str) -> None:
    assert outcomes[name] == EXPECTED[name]
