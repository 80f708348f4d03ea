"""replay/stats.py: what is counted, here the outcomes of the requests forwarded upstream
(`--upstream`), judged per distinct request by what became of its attempts."""

from __future__ import annotations

from replay_server.replay.stats import Stats
from tests.support import build

JUDGE, CHAT = "judge-model", "/v1/chat/completions"


def forwarded(*outcomes: str, prompt: str | None = "ab12", stats: Stats | None = None
              ) -> Stats:
    """Stats after one distinct request's attempts came out as `outcomes`, in order."""
    stats = stats or Stats(build([]))
    for outcome in outcomes:
        stats.forward(JUDGE, CHAT, prompt, outcome, f"why {outcome}")
    return stats


def failing(stats: Stats) -> dict[str, int]:
    return {f.first["code"]: f.attempts for f in stats.forward_failures.values()}


def test_failed_attempts_followed_by_a_saved_one_were_retries_that_got_through() -> None:
    stats = forwarded("upstream_error", "abandoned", "recorded")
    assert stats.forward_failures == {} and stats.forward_failed() == 0
    (recovered,) = stats.forward_recovered.values()
    assert recovered.attempts == 2 and recovered.first["code"] == "upstream_error"
    assert stats.forwarded == {JUDGE: {"upstream_error": 1, "abandoned": 1, "saved": 1}}


def test_a_failed_attempt_after_a_saved_one_fails() -> None:
    assert failing(forwarded("recorded", "upstream_error")) == {"upstream_error": 1}
    again = forwarded("aborted", "recorded", "unrecordable", "abandoned")
    assert failing(again) == {"unrecordable": 2}
    assert [f.attempts for f in again.forward_recovered.values()] == [1]


def test_an_abandoned_attempt_that_nothing_followed_fails() -> None:
    """The client gave up (its timeout): the harness scored the item as failed."""
    assert failing(forwarded("abandoned")) == {"abandoned": 1}


def test_an_attempt_that_could_not_be_keyed_is_never_taken_for_another_s_retry() -> None:
    stats = forwarded("upstream_error", "recorded", prompt=None)
    assert failing(stats) == {"upstream_error": 1} and stats.forward_recovered == {}


def test_another_request_s_saved_answer_recovers_nothing() -> None:
    stats = forwarded("upstream_error", prompt="ab12")
    forwarded("recorded", prompt="cd34", stats=stats)
    assert failing(stats) == {"upstream_error": 1}


def test_a_client_that_leaves_while_run_stops_command_was_stopped_not_failed() -> None:
    stats = Stats(build([]))
    stats.stopping = True
    forwarded("abandoned", stats=stats)
    assert stats.forwarded == {JUDGE: {"stopped": 1}} and stats.forward_failures == {}


def test_a_reset_forgets_the_recovered_failures_unless_the_stats_are_a_whole_run_s() -> None:
    stats = forwarded("upstream_error", "recorded")
    stats.reset()
    assert stats.forward_recovered == {} and stats.forwarded == {}
    whole = forwarded("upstream_error", "recorded")
    whole.whole_run = True
    whole.reset()
    assert len(whole.forward_recovered) == 1


def test_unanswered_tokenizer_calls_are_attempts_of_the_same_call_only() -> None:
    """Reported by reason, but `--max-attempts` counts one call sent again: fifty different
    calls left unanswered for one reason are no request refused fifty times."""
    stats = Stats(build([]))
    stats.tokenizer_errors_fail = True
    heard: list[int] = []
    stats.on_error = lambda failure, miss: heard.append(failure.attempts)
    for call in (b"a", b"b", b"c", b"a", b"a"):
        stats.tokenizer_error("/tokenize", "m", "no --tokenizer", call)
    assert heard == [1, 1, 1, 2, 3]
    (reported,) = stats.tokenizer_unanswered.values()
    assert reported.attempts == 5
