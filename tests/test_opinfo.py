"""torch's whole OpInfo database (``op_db``) through the real pipeline.

Every entry runs its first samples (float32; int64 or bool for entries without float32) with
``tests.opinfo_census``: exported, run in onnxruntime and compared with eager. An entry must match, unless
``tests/opinfo_expected.py`` lists it with the outcome it has today (refused, mismatch, not capturable):
that list only shrinks. An entry listed there that now matches fails too, so that the list stays true. An
entry that matches only from some torch release on is listed in ``EXPECTED_BEFORE`` with that release and
its outcome before it (``expected_outcome``).
Nothing but an ``OnnxportError`` may leave ``export`` (the census lets anything else through). The
coverage line at the end of the session counts matched entries; ``bench/opinfo.py`` runs other dtypes.
The whole database is a ``sweep``: ``make test-sweep`` runs it, once per CI, at the newest torch.
"""

from __future__ import annotations

import collections

import pytest
pytest.importorskip("expecttest")
from torch.testing._internal.common_methods_invocations import op_db  # noqa: E402

from onnxport.versions import torch_at_least  # noqa: E402
from tests.opinfo_census import census_entry, ci_dtype, entry_key  # noqa: E402
from tests.opinfo_expected import EXPECTED, EXPECTED_BEFORE  # noqa: E402

pytestmark = pytest.mark.sweep

SAMPLES_PER_ENTRY = 3
RESULTS: dict[str, str] = {}


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # generators closed early
@pytest.mark.parametrize("info", op_db, ids=entry_key)
def test_opinfo(info) -> None:
    key, dtype = entry_key(info), ci_dtype(info)
    if dtype is None:
        pytest.skip("no float32, int64 or bool samples")
    result = census_entry(info, dtype, SAMPLES_PER_ENTRY)
    RESULTS[key] = result["status"]
    if result["status"] == "eager fails":
        pytest.skip("eager refuses every sample")
    expected = expected_outcome(key)
    if result["status"] in ("matched", "random"):
        assert expected is None, f"{key} now matches: remove it from tests/opinfo_expected.py"
        return
    got = f"{result['status']}: {', '.join(result['ops']) or result['detail']}"
    assert expected is not None, f"{key} no longer matches: {got}"
    assert expected.split(":")[0] == result["status"], f"{key} was '{expected}', now '{got}'"


def expected_outcome(key: str) -> str | None:
    """The outcome ``EXPECTED`` lists for ``key`` (None: it matches); for an entry of ``EXPECTED_BEFORE``, its
    outcome on a torch older than its release, and None (a match) from that release on."""
    if key in EXPECTED_BEFORE:
        release, outcome = EXPECTED_BEFORE[key]
        return None if torch_at_least(release) else outcome
    return EXPECTED.get(key)


def test_expected_before_is_its_own_list() -> None:
    """An entry is in one table or the other: ``EXPECTED_BEFORE`` would hide its ``EXPECTED`` outcome."""
    assert not set(EXPECTED) & set(EXPECTED_BEFORE)


def coverage_line(results: dict[str, str]) -> str:
    """Matched entries over those eager runs that torch.export captures (random ones count by shape)."""
    counts = collections.Counter(results.values())
    matched = counts["matched"] + counts["random"]
    base = len(results) - counts["eager fails"] - counts["not capturable"]
    return (f"OpInfo coverage: {matched}/{base} entries match eager ({100 * matched / max(base, 1):.1f}%); "
            f"refused {counts['refused']}, mismatch {counts['mismatch']}, not capturable by torch.export "
            f"{counts['not capturable']}, eager fails {counts['eager fails']}")
