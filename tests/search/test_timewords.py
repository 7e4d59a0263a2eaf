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
