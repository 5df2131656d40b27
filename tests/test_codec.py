"""What Redis keeps is JSON: every value a cached read returns comes back equal and of the same types,
and whatever else is found there is refused, never built or run."""

from __future__ import annotations

import pickle
from datetime import UTC, datetime

import pytest
from helpers.caches import same_types
from hypothesis import given
from hypothesis import strategies as st
from markupsafe import Markup

from tweepy.cache import codec
from tweepy.queries import Profile, SessionRow, TweetRow, UserRow

# Text as people type it, surrogates aside (no UTF-8 can hold one, and no form field sends one).
text = st.text(st.characters(exclude_categories=("Cs",)), max_size=40)
moments = st.one_of(
    st.datetimes(min_value=datetime(1970, 1, 2), max_value=datetime(9999, 1, 1)),
    st.datetimes(min_value=datetime(1970, 1, 2), max_value=datetime(9999, 1, 1), timezones=st.just(UTC)),
)
ids = st.integers(-(2**63), 2**63 - 1)
plain = st.one_of(st.none(), st.booleans(), ids, st.floats(allow_nan=False, allow_infinity=False), text)
rows = st.one_of(
    st.builds(UserRow, ids, text),
    st.builds(SessionRow, ids, text, moments),
    st.builds(Profile, moments, ids, ids, ids, st.booleans()),
    st.builds(TweetRow, ids, ids, text, text, moments),
)
page = st.lists(st.builds(TweetRow, ids, ids, text, text, moments), min_size=1, max_size=60).map(tuple)
values = st.recursive(
    st.one_of(plain, moments, rows, page, st.frozensets(ids, max_size=30)),
    lambda inner: st.lists(inner, max_size=5).map(tuple),
    max_leaves=20,
)


@given(values)
def test_every_value_comes_back_equal_and_of_the_same_types(value):
    again = codec.decode(codec.encode(value))
    assert again == value
    assert same_types(again, value)


def test_a_page_of_tweets_comes_back_as_tweet_rows_with_their_datetimes():
    posted = datetime(2026, 12, 5, 17, 0, 1, 250)
    page = tuple(TweetRow(n, 7, "bob", f"news {n}, \u00e9t\u00e9 \u2603", posted) for n in range(50))
    again = codec.decode(codec.encode(page))
    assert again == page
    assert {type(row) for row in again} == {TweetRow}
    assert {type(row.posted) for row in again} == {datetime}


def test_text_that_is_markup_is_kept_as_its_text():
    row = UserRow(1, Markup("<b>bob</b>"))
    assert codec.decode(codec.encode(row)) == UserRow(1, "<b>bob</b>")


@pytest.mark.parametrize(
    "value",
    [
        {"a": 1},
        [1, 2],
        {1, 2},
        object(),
        UserRow(1, ["bob"]),
        TweetRow(1, 2, "bob", "news", datetime(2026, 1, 1).date()),
        (TweetRow(1, 2, "bob", "news", datetime(2026, 1, 1)), TweetRow(2, 2, "bob", object(), datetime(2026, 1, 1))),
    ],
    ids=["dict", "list", "set", "object", "a row holding a list", "a row holding a date", "a page with an object"],
)
def test_a_value_of_any_other_type_is_refused_when_written(value):
    with pytest.raises(TypeError):
        codec.encode(value)


@pytest.mark.parametrize(
    "payload",
    [
        b"[1, 2]",
        b'{"tuple": [[1, 2]]}',
        b'{"object": "os.system"}',
        b'{"rows": "Popen", "fields": [["ls"]]}',
        b'{"rows": ["UserRow"], "fields": []}',
        b'{"rows": "UserRow", "fields": [[1]]}',
        b'{"rows": "UserRow", "fields": [[1, ["bob"]]]}',
        b'{"row": "UserRow", "fields": [1, {"name": "bob"}]}',
        b'{"rows": "TweetRow", "fields": [[1, 2, "bob", "news", 7]]}',
        b'{"frozenset": [{"tuple": []}, [1]]}',
        b'{"datetime": 7}',
        b"not json",
        pickle.dumps(UserRow(1, "bob")),
    ],
)
def test_anything_else_found_in_redis_is_refused_when_read(payload):
    with pytest.raises(ValueError):
        codec.decode(payload)
