"""Rendered HTML of single tweets, kept per process with ``FRAGMENT_CACHE``.

Someone else's tweet renders the same for every viewer: the macro
``tweet_item`` sees only the row and the profiles prefix, never the viewer.
So a fragment is kept under everything it is made of: the template's own
source (a digest of it) and the whole row. If a row ever carries a field that
changes (a like count, an edited text), its key changes with it and the old
HTML is simply never asked for again; nothing has to be invalidated. The
store is an LRU bounded in bytes (``FRAGMENT_CACHE_BYTES``).

Rendering 50 tweets was the largest part of a timeline's CPU time; with this,
a page mostly joins strings it already has.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Hashable

import cachetools
from flask import Flask, url_for
from flask_login import current_user
from flask_wtf.csrf import generate_csrf
from markupsafe import Markup

TEMPLATE = "_macros.html"


def entry_bytes(html: str) -> int:
    # The key holds the row, whose text the HTML holds too (escaped): twice the HTML bounds the entry.
    return 2 * sys.getsizeof(html)


def template_digest(app: Flask) -> str:
    source, _filename, _uptodate = app.jinja_env.loader.get_source(app.jinja_env, TEMPLATE)
    return hashlib.sha256(source.encode()).hexdigest()[:16]


def fragment_key(digest: str, row: Hashable) -> tuple[str, Hashable]:
    return (digest, row)


def init_app(app: Flask) -> None:
    keep = app.config["FRAGMENT_CACHE"]
    rendered: cachetools.LRUCache = cachetools.LRUCache(
        maxsize=app.config["FRAGMENT_CACHE_BYTES"], getsizeof=entry_bytes
    )
    app.extensions["tweepy_fragments"] = rendered
    macro = {}

    def tweet_item():
        """The macro, loaded on first use with the digest of the very source it was compiled from."""
        if not macro:
            macro["item"] = app.jinja_env.get_template(TEMPLATE).module.tweet_item
            macro["digest"] = template_digest(app)
        return macro["item"]

    def rendered_tweet(tweet) -> Markup:
        item = tweet_item()
        key = fragment_key(macro["digest"], tweet)
        html = rendered.get(key)
        if html is None:
            html = Markup(item(tweet, url_for("users.index")))
            if keep and entry_bytes(html) <= rendered.maxsize:
                rendered[key] = html
        return html

    def rendered_tweets(tweets, next_url: str) -> Markup:
        """A page's tweets: one's own with a delete button (the page's token), the others as kept fragments."""
        me = current_user.id if current_user.is_authenticated else None
        items = []
        for tweet in tweets:
            if tweet.author_id == me:
                items.append(tweet_item()(tweet, url_for("users.index"), {"csrf": generate_csrf(), "next": next_url}))
            else:
                items.append(rendered_tweet(tweet))
        return Markup("".join(items))  # every item is Markup already: nothing to escape

    app.jinja_env.globals["rendered_tweet"] = rendered_tweet
    app.jinja_env.globals["rendered_tweets"] = rendered_tweets
