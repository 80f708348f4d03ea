"""lighteval details and evalscope reviews as verdicts (written by the real harnesses)."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from replay_server.commands.compare import certify
from replay_server.compare import READERS
from replay_server.compare.requests import read_requests
from replay_server.compare.sides import read_side
from replay_server.errors import LoadError

from .support import DATA, EVALSCOPE, copied

LIGHTEVAL = DATA / "lighteval"


def test_lighteval_rows_are_docs_with_every_metric_of_the_row() -> None:
    side = read_side("ORIGINAL", str(LIGHTEVAL / "sampled"), READERS)
    assert side.harnesses == {"lighteval"} and len(side.verdicts) == 6
    doc = side.verdicts[("arith_lighteval_sampled|0", "3")]
    assert {n: s.value for n, s in doc.scores.items()} == {"maj@3": 1.0,
                                                           "avg@3": 2 / 3}
    assert doc.line == 1 and doc.text is not None and "Sure! The answer is 65." in doc.text


def test_evalscope_reviews_are_one_instance_per_doc_and_repeat() -> None:
    side = read_side("ORIGINAL", str(EVALSCOPE / "repeats"), READERS)
    assert side.harnesses == {"evalscope"} and len(side.verdicts) == 18
    assert {i for _, i in side.verdicts} == {f"{d} (repeat {r})" for d in range(6)
                                             for r in range(3)}
    doc = side.verdicts[("general_qa_evalscope_arith", "1 (repeat 2)")]
    assert doc.scores["Rouge-1-R"].value == 0.75 and len(doc.scores) == 9
    assert doc.scores["Rouge-1-R"].answer == doc.text


@pytest.mark.parametrize("run", [LIGHTEVAL / "greedy", LIGHTEVAL / "sampled",
                                 EVALSCOPE / "plain", EVALSCOPE / "repeats"])
def test_every_instance_finds_its_own_requests(run: Path) -> None:
    """The contract with the replay readers: lighteval by instance, evalscope by instance
    and repeat index (one request each)."""
    side = read_side("RESCORED", str(run), READERS)
    requests = read_requests([str(run)])
    assert {len(requests.of(v)) for v in side.verdicts.values()} == {1}
    assert certify(str(run), str(run)).status == 0


def test_a_details_file_without_metrics_is_named(tmp_path: Path) -> None:
    [details] = (LIGHTEVAL / "greedy").glob("details/*/*/*/*.parquet")
    bad = copied(details, tmp_path / "details" / "openai" / "tiny-model" / details.parent.name)
    table = pq.read_table(details)
    pq.write_table(table.drop_columns(["metric"]), bad)
    with pytest.raises(LoadError) as e:
        read_side("ORIGINAL", str(bad), READERS)
    assert str(e.value) == f"{bad}: field `metric`: missing: not a lighteval details file"
    bad.write_bytes(b"PAR1 not really")
    with pytest.raises(LoadError, match="not a readable parquet file"):
        read_side("ORIGINAL", str(bad), READERS)


def test_a_review_without_a_score_is_named(tmp_path: Path) -> None:
    run = copied(EVALSCOPE / "plain", tmp_path)
    [reviews] = (run / "reviews").glob("*/*.jsonl")
    lines = reviews.read_text().splitlines()
    reviews.write_text("\n".join([lines[0], lines[1].replace('"value"', '"values"')]) + "\n")
    with pytest.raises(LoadError) as e:
        read_side("ORIGINAL", str(run), READERS)
    assert str(e.value) == (f"{reviews}:2: field `sample_score.score`: expected an object "
                            "with a `value`")
