"""Every cached read is forgotten by every write that changes it.

A random sequence of writes (every function of ``writes.py``) runs against an
app with the cache on; between writes every cached read is asked for every
argument it can take, and whatever the cache holds must equal what the
database says now. A write that forgets too little shows here as a stale
entry; a new cached read or a new write that this test does not know fails
the coverage tests below until it is added, so it cannot be left out.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest
from helpers.invalidation import FORGETS_NOTHING, QUICK, InvalidationWorld, possible_args
from hypothesis import Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from tweepy import cache, queries, writes


def test_no_write_leaves_a_stale_entry_in_the_cache():
    run_state_machine_as_test(InvalidationWorld, settings=QUICK)


@pytest.mark.parametrize("mutant", ["forget", "change"])
def test_a_write_that_forgets_nothing_is_caught(monkeypatch, mutant):
    monkeypatch.setattr(writes, mutant, FORGETS_NOTHING[mutant])
    with pytest.raises(AssertionError, match="is stale"):
        run_state_machine_as_test(InvalidationWorld, settings=settings(QUICK, phases=[Phase.generate]))


def test_a_write_that_leaves_a_count_wrong_is_caught(monkeypatch):
    monkeypatch.setattr(writes, "delete_tweet", lambda user_id, tweet_id: None)  # deletes nothing
    with pytest.raises(AssertionError, match="counts"):
        run_state_machine_as_test(InvalidationWorld, settings=settings(QUICK, phases=[Phase.generate]))


def test_every_cached_read_is_checked():
    """A new @memoized read must be given its arguments in ``possible_args`` (tests/helpers/invalidation.py)."""
    assert set(possible_args([])) == set(cache.READS)


def test_every_write_is_exercised():
    """A new function in writes.py must be a rule of ``InvalidationWorld`` (tests/helpers/invalidation.py)."""
    public_writes = {
        name
        for name, function in inspect.getmembers(writes, inspect.isfunction)
        if function.__module__ == writes.__name__ and not name.startswith("_") and name != "transaction"
    }
    rules = {name for name in public_writes if hasattr(InvalidationWorld, name)}
    assert public_writes == rules


def keys_given(call: ast.Call) -> list[ast.expr]:
    """What a call in writes.py gives as keys: forget's arguments, change's ``forgets``, a Patch's key."""
    name = getattr(call.func, "id", None)
    if name == "forget":
        return call.args
    if name == "change":
        return [key for kw in call.keywords if kw.arg == "forgets" for key in kw.value.elts]
    if name == "Patch":
        return call.args[:1]
    return []


def test_writes_forget_only_keys_named_by_cached_reads():
    """Every key writes.py forgets is ``queries.<cached read>.key(...)``, nothing spelled by hand."""
    tree = ast.parse(Path(writes.__file__).read_text())
    keys = [key for call in ast.walk(tree) if isinstance(call, ast.Call) for key in keys_given(call)]
    assert len(keys) >= 5, "writes.py forgets next to nothing?"
    for key in keys:
        assert isinstance(key, ast.Call) and isinstance(key.func, ast.Attribute), ast.unparse(key)
        assert key.func.attr == "key", ast.unparse(key)
        read = key.func.value
        assert isinstance(read, ast.Attribute) and getattr(read.value, "id", None) == "queries"
        assert isinstance(getattr(queries, read.attr), cache.CachedRead), f"queries.{read.attr} is not cached"


def test_forget_refuses_a_key_spelled_by_hand(app):
    with app.app_context(), pytest.raises(TypeError, match="made by a cached read"):
        cache.forget("newest_tweets_by:1")


def test_change_refuses_a_key_spelled_by_hand(app):
    with app.app_context(), pytest.raises(TypeError, match="made by a cached read"):
        cache.change(writes.GONE_FOLLOW, {"follower_id": 1, "followed_id": 2}, forgets=("following:1",))


def test_a_key_is_named_by_its_read_in_canonical_form():
    assert queries.user_named.key("Bob") == queries.user_named.key("bob") == "user_named:bob"
    assert queries.newest_tweets_by.key(7) == "newest_tweets_by:7"
    assert queries.user_named.key("K\u212aelvin") != queries.user_named.key("kkelvin")
