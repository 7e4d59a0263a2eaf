"""Time words in a query: the span of creation times they name, and the query without them."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from memvault.search.timewords import read_time

NOW = datetime(2023, 3, 20, 15, 0, tzinfo=UTC)  # a Monday


def day(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


@pytest.mark.parametrize(
    ("query", "inside", "outside", "rest"),
    [
        ("What did I buy 10 days ago?", "2023-03-10", "2023-03-01", "What did I buy ?"),
        ("Which book did I finish a week ago?", "2023-03-13", "2023-03-01", "Which book did I finish ?"),
        ("what did I cook last Saturday", "2023-03-18", "2023-03-11", "what did I cook"),
        ("Which shoes did I clean last month?", "2023-02-10", "2022-12-01", "Which shoes did I clean ?"),
        ("Where did I travel in May?", "2022-05-15", "2022-07-01", "Where did I travel ?"),
        ("What did I eat yesterday?", "2023-03-19", "2023-03-10", "What did I eat ?"),
    ],
)
def test_time_words_name_a_span_and_leave_the_rest_to_search(query, inside, outside, rest):
    spoken = read_time(query, NOW)
    assert spoken is not None
    assert spoken.start <= day(inside) <= spoken.end
    assert not spoken.start <= day(outside) <= spoken.end
    assert spoken.rest == rest


@pytest.mark.parametrize("query", ["What is my cat's name?", "the 10 apples", "I may go", "days of the week"])
def test_a_query_without_time_words_has_no_span(query):
    assert read_time(query, NOW) is None


@pytest.mark.parametrize(
    ("query", "inside", "outside"),
    [
        ("What did Maria share on 16 June, 2023?", "2023-06-16", "2023-06-20"),
        ("What did Mel paint on October 13, 2022?", "2022-10-13", "2022-10-16"),
        ("what did we decide on May 16th 2022", "2022-05-16", "2022-05-19"),
        ("What happened on 2022-11-20?", "2022-11-20", "2022-11-23"),
        ("What did I cook on 3 March", "2023-03-03", "2022-03-03"),
        ("What did I plant on 2 April", "2022-04-02", "2023-04-02"),  # not yet this year
        ("What did I read in July 2021?", "2021-07-15", "2022-07-15"),
        ("What did Joanna finish last Friday on 23 January, 2022?", "2022-01-23", "2023-03-17"),
    ],
)
def test_a_date_said_outright_names_its_day_or_month_and_stays_searched(query, inside, outside):
    spoken = read_time(query, NOW)
    assert spoken is not None
    assert spoken.start <= day(inside) <= spoken.end
    assert not spoken.start <= day(outside) <= spoken.end
    assert spoken.rest == query  # a note may name the same date


@pytest.mark.parametrize("query", ["I may 2 go", "mar 33 2023", "room 12 of the inn", "at 10:30"])
def test_numbers_that_are_not_dates_name_no_span(query):
    assert read_time(query, NOW) is None


@pytest.mark.parametrize("query", ["on 0000-05-20", "on 3 March 0000"])
def test_a_day_the_calendar_does_not_have_names_no_span(query):
    # Year 0 was read as "no year said", this year's (or last year's) day.
    assert read_time(query, NOW) is None


@pytest.mark.parametrize("query", ["in July 0000", "in December 9999"])
def test_a_month_the_calendar_does_not_have_is_read_as_a_month_alone(query):
    # A query is hostile input: these raised ValueError (year 0; the month after December 9999).
    # What is left is "in July", "in December": the last such month before now.
    spoken = read_time(query, NOW)
    assert spoken is not None and spoken.end <= NOW.timestamp() + 4 * 86400


@pytest.mark.parametrize(
    "query",
    ["What did I eat yesterday?", "Which shoes did I clean last month?", "Who called last week?"],
)
def test_a_span_that_reaches_now_takes_in_a_clock_running_hours_ahead(query):
    # A note synced from a machine whose clock or zone runs ahead, or stamped in local time by hand,
    # can be created "later" than now; a span ending now would leave it out, and boost every other.
    spoken = read_time(query, NOW)
    assert spoken is not None
    ahead = NOW.timestamp() + 9 * 3600
    assert spoken.start <= ahead <= spoken.end
    assert spoken.end < NOW.timestamp() + 2 * 86400
