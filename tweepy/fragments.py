"""Rendered HTML of single tweets, kept per process when the cache is on.

A tweet never changes once posted (it can only be deleted, and then no page
lists it), so the HTML of someone else's tweet is the same for every viewer
and needs no invalidation at all: a bounded LRU keyed by tweet id. Rendering
50 tweets was the largest part of a timeline's CPU time; with this, a page
mostly joins strings it already has.
"""

from __future__ import annotations

import cachetools
from flask import Flask, url_for
from markupsafe import Markup


def init_app(app: Flask) -> None:
    keep = app.config["CACHE"] != "none"
    rendered: cachetools.LRUCache = cachetools.LRUCache(maxsize=app.config["CACHE_SIZE"] * 5)
    macros = {}

    def rendered_tweet(tweet) -> Markup:
        html = rendered.get(tweet.id)
        if html is None:
            if not macros:
                macros["item"] = app.jinja_env.get_template("_macros.html").module.tweet_item
            html = Markup(macros["item"](tweet, url_for("users.index")))
            if keep:
                rendered[tweet.id] = html
        return html

    app.jinja_env.globals["rendered_tweet"] = rendered_tweet
