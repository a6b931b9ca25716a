"""CallLedger: which failures repeat, when a run is stuck, and lists that fit their room."""

from __future__ import annotations

from agent.ledger import CallLedger

_DOWN = "The search provider answered HTTP 500."


def test_a_call_varied_by_a_word_that_fails_the_same_way_is_a_repeat():
    ledger = CallLedger()
    ledger.record(1, "web_search", {"query": "museum hours"}, False, _DOWN)
    ledger.record(2, "web_search", {"query": "museum opening hours"}, False, _DOWN)
    ledger.record(3, "web_search", {"query": "museum hours"}, False, "No results for 'museum'.")
    ledger.record(4, "web_search", {"query": "cheap flights"}, False, _DOWN)
    ledger.record(5, "other", {"query": "museum hours"}, False, _DOWN)
    ledger.record(6, "web_search", {"query": "museum hours", "page": 2}, False, _DOWN)
    assert [r.repeat for r in ledger.records] == [False, True, False, False, False, False]


def test_an_error_naming_the_arguments_is_the_same_failure_for_other_arguments():
    ledger = CallLedger()
    ledger.record(1, "weather", {"city": "Atlantis"}, False, "No data for Atlantis.")
    ledger.record(2, "weather", {"city": "Atlantis city"}, False, "No data for Atlantis city.")
    assert ledger.records[1].repeat


def test_texts_in_lists_are_compared_by_their_words():
    ledger = CallLedger()
    missing = "No page could be fetched. {}: the server answered HTTP 404 Not Found"
    for step, path in enumerate(["museum/1", "museum/2"], start=1):
        url = f"http://example.org/{path}"
        ledger.record(step, "web_fetch", {"urls": [url], "n": 1}, False, missing.format(url))
    ledger.record(3, "web_fetch", {"urls": ["https://other.net/a/b/c/d"], "n": 1}, False, "x")
    assert [r.repeat for r in ledger.records] == [False, True, False]


def test_stuck_after_steps_that_only_repeat_failures():
    ledger = CallLedger()
    ledger.record(1, "t", {"q": "a b"}, False, "down")
    for step in (2, 3):
        ledger.record(step, "t", {"q": "a b c"}, False, "down")
    assert not ledger.stuck(3, 3)  # step 1 was the first failure, not a repeat
    ledger.record(4, "t", {"q": "a b"}, False, "down")
    assert ledger.stuck(4, 3) and not ledger.stuck(4, 0)
    ledger.record(5, "t", {"q": "a b"}, False, "down")
    ledger.record(5, "u", {}, True, "fine")  # a step with a success made progress
    assert not ledger.stuck(5, 1)
    assert not ledger.stuck(6, 1)  # a step without calls is not a repeat either


def test_the_call_list_keeps_the_newest_that_fit_and_counts_the_rest():
    ledger = CallLedger(room_chars=300)
    for step in range(1, 21):
        ledger.record(step, "echo", {"text": f"call {step}"}, True, "x" * 50)
    summary = ledger.summary()
    assert len(summary) <= 300 + 60
    assert summary.splitlines()[0].startswith("(") and "earlier calls left out" in summary
    assert "step 20:" in summary and "step 1:" not in summary
    left_out = int(summary.splitlines()[0].split()[0].strip("("))
    assert left_out + len(summary.splitlines()) - 1 == 20
    assert CallLedger().summary() == "No tool was called in this run."
    ledger.room_chars = 0
    assert len(ledger.summary().splitlines()) == 20
