"""Either bcrypt library makes the same hashes: pyca's package and the system's libxcrypt check
each other's, so a stage can switch without anyone's password changing; libxcrypt refuses what
it would silently cut short, hashes without holding the GIL, and where it cannot make bcrypt's
hashes the app says so and stays on pyca."""

from __future__ import annotations

import logging
import threading
import time

import bcrypt
import legacycrypt
import pytest
from helpers.browser import Browser
from helpers.stored import PASSWORD, PASSWORD_HASH, add_users

from tweepy import passwords

LIBXCRYPT = passwords.LIBRARIES["libxcrypt"]
PYCA = passwords.LIBRARIES["pyca"]


@pytest.fixture
def libxcrypt_app(make_app):
    app = make_app(BCRYPT_LIBRARY="libxcrypt")
    assert app.extensions["tweepy_bcrypt"] is LIBXCRYPT, "this machine's libxcrypt should have bcrypt"
    return app


def test_each_library_checks_the_others_hashes():
    for password in ("tweepy123", "pässwörd ✓", "x" * 71):
        by_pyca = bcrypt.hashpw(password.encode(), bcrypt.gensalt(4)).decode()
        by_libxcrypt = LIBXCRYPT.hash(password, 4)
        assert by_libxcrypt.startswith("$2b$04$")
        assert LIBXCRYPT.matches(by_pyca, password) and PYCA.matches(by_libxcrypt, password)
        assert not LIBXCRYPT.matches(by_pyca, password + "!") and not PYCA.matches(by_libxcrypt, password + "!")


def test_libxcrypt_hashes_at_the_cost_it_is_given():
    assert LIBXCRYPT.hash("tweepy123", 5).startswith("$2b$05$")


def test_libxcrypt_refuses_a_password_it_would_cut_short():
    for password in ("abc\x00def", "x" * 73):
        with pytest.raises(ValueError):
            LIBXCRYPT.hash(password, 4)
        with pytest.raises(ValueError):
            LIBXCRYPT.matches(PASSWORD_HASH, password)


def test_libxcrypt_refuses_a_stored_hash_that_is_not_bcrypt():
    with pytest.raises(ValueError):
        LIBXCRYPT.matches("$1$saltsalt$notbcrypt", "tweepy123")


def test_users_hashed_by_pyca_log_in_on_libxcrypt_and_new_ones_are_hashed_by_it(libxcrypt_app):
    add_users(libxcrypt_app, "alice")
    assert Browser(libxcrypt_app.test_client()).login("alice", PASSWORD).status_code == 303
    assert Browser(libxcrypt_app.test_client()).login("alice", "wrong guess").status_code == 401
    Browser(libxcrypt_app.test_client()).register("carol")
    with libxcrypt_app.app_context():
        from sqlalchemy import select

        from tweepy.extensions import db
        from tweepy.models import User

        stored = db.session.scalar(select(User.password_hash).where(User.name == "carol"))
    assert PYCA.matches(stored, PASSWORD)


def test_libxcrypt_lets_other_threads_run_while_it_hashes():
    """gevent's hub keeps serving while a hash runs on a native thread only if the hash lets go of the GIL."""
    done = threading.Event()
    worker = threading.Thread(target=lambda: (LIBXCRYPT.hash("tweepy123", 12), done.set()))
    ticks = 0
    worker.start()
    while not done.is_set():
        time.sleep(0.001)  # needs the GIL back after each sleep
        ticks += 1
    worker.join()
    # A hash at cost 12 takes a tenth of a second or more; holding the GIL, it would allow a tick or two.
    assert ticks >= 20


def test_where_the_system_has_no_bcrypt_the_app_says_so_and_hashes_with_pyca(make_app, monkeypatch, caplog):
    monkeypatch.setattr(legacycrypt, "crypt", lambda word, salt: "*0")
    with caplog.at_level(logging.WARNING):
        app = make_app(BCRYPT_LIBRARY="libxcrypt")
    assert app.extensions["tweepy_bcrypt"] is PYCA
    assert "hashing with pyca" in caplog.text


def test_an_unknown_library_is_refused_by_name(make_app):
    with pytest.raises(ValueError, match="TWEEPY_BCRYPT_LIBRARY"):
        make_app(BCRYPT_LIBRARY="md5")
