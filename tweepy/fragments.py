"""Rendered HTML of tweets and of timeline pages, kept per process with ``FRAGMENT_CACHE``.

Someone else's tweet renders the same for every viewer: the macro ``tweet_item`` sees only the row
and the profiles prefix. So a fragment is kept under everything it is made of (a digest of the
template's source, the profiles prefix, the whole row) and is never invalidated: a row that changes
(a like count, an edited text) has a new key. One's own tweet carries a delete button whose form
holds the page's CSRF token and where to go next: it is kept with two holes instead (``CSRF_HOLE``,
``NEXT_HOLE``), filled in once per page. Holes are written with ``<``, which never reaches a fragment
from a row (the macro escapes the text; names and dates have no ``<``), so nothing else is filled in.
A page joins strings it already has; the joined list, and a timeline's whole first page
(``kept_page``), are kept too while their rows are the very tuple the read cache holds.

Nothing shown may depend on other rows: "@bob" links to bob's profile whenever "bob" could be
registered (nobody's profile is a 404); a time is exact, in UTC, made relative by ``static/tweepy.js``.
"""

from __future__ import annotations

import hashlib
import re
import sys
from collections.abc import Hashable
from itertools import chain

import cachetools
from flask import Flask, current_app, g, render_template, request, session
from flask_login import current_user
from markupsafe import Markup, escape

from .cache import cache
from .signing import page_token
from .site import here, links

TEMPLATE = "_macros.html"
CSRF_HOLE = Markup("<tweepy:csrf>")
NEXT_HOLE = Markup("<tweepy:next>")
HOLES = {"csrf": CSRF_HOLE, "next": NEXT_HOLE}
# Where a kept page's frame takes its list of tweets (``kept_page``).
ROWS_HOLE = Markup("<tweepy:rows>")
# The holes of a page, kept in what it is split into.
BETWEEN_HOLES = re.compile("(" + "|".join(map(re.escape, (*HOLES.values(), ROWS_HOLE))) + ")")


def entry_bytes(html: str) -> int:
    # The key holds the row, whose text the HTML holds too (escaped): twice the HTML bounds the entry.
    return 2 * sys.getsizeof(html)


def template_digest(app: Flask) -> str:
    source, _filename, _uptodate = app.jinja_env.loader.get_source(app.jinja_env, TEMPLATE)
    return hashlib.sha256(source.encode()).hexdigest()[:16]


def fragment_key(digest: str, row: Hashable, profiles: str = "", own: bool = False) -> tuple:
    return (digest, profiles, own, row)


def fill_holes(html: str, csrf: str, next_url: str) -> Markup:
    """The page's token and ``next_url`` in the holes of one's own tweets (a page without any is left as it is)."""
    return Markup(html.replace(CSRF_HOLE, escape(csrf)).replace(NEXT_HOLE, escape(next_url)))


def cut_at_holes(page: str) -> tuple[bytes | str, ...]:
    """The page as its UTF-8 pieces, with each hole (a str) between them, for ``filled``."""
    return tuple(part if i % 2 else part.encode() for i, part in enumerate(BETWEEN_HOLES.split(page)))


def filled(pieces: tuple[bytes | str, ...], csrf: str, next_url: str) -> bytes:
    """The page ``cut_at_holes`` made, with the token and ``next_url`` in its holes."""
    values = {CSRF_HOLE: escape(csrf).encode(), NEXT_HOLE: escape(next_url).encode()}
    return b"".join([values[piece] if type(piece) is str else piece for piece in pieces])


# Where the app keeps whether FRAGMENT_CACHE is on (read once, by ``init_app``).
KEEP_PAGES = "tweepy_keep_pages"
# Set in ``g`` while a page is rendered to be kept: its tweets keep their holes for the page's.
HOLES_OPEN = "tweepy_holes_open"


def kept_page(template: str, rows: tuple, **context) -> str | bytes:
    """``render_template(template, **context)`` for the logged-in viewer (UTF-8 when kept), kept with
    FRAGMENT_CACHE while ``rows`` (the tweets it lists: all the page shows besides the viewer) are the
    very same tuple the read cache holds (``ReadCache.derived``), one page a viewer.

    The first page of a timeline differs from one request to the next only in the CSRF token and where
    its buttons send people back to: the page's token (``csrf``) and ``here`` are holes in what is kept,
    filled for each request. It is kept as UTF-8 pieces cut at its holes, so a visit joins bytes ready
    to send, without searching the page for its holes or encoding it.

    The template shows its rows as ``rows_hole or tweet_list(tweets, here, older_url)``: the frame (the
    bar, the tweet box, the headings) is rendered once a viewer with ``rows_hole`` set, and only the list
    is rendered again when the rows change, so nothing else in ``context`` may change what the frame
    shows. A page with a message to flash is rendered afresh, since showing it uses it up."""
    if not current_app.extensions[KEEP_PAGES] or "_flashes" in session:
        return render_template(template, **context)
    viewer = (template, request.script_root, current_user.id, current_user.name)

    def frame() -> tuple[bytes | str, ...]:
        holes = {"csrf": CSRF_HOLE, "here": NEXT_HOLE, "rows_hole": ROWS_HOLE}
        return _with_holes_open(render_template, template, **context, **holes)

    def listed() -> tuple[bytes | str, ...]:
        tweet_list = current_app.jinja_env.get_template(TEMPLATE).module.tweet_list
        return _with_holes_open(tweet_list, rows, NEXT_HOLE, context.get("older_url"))

    def page() -> tuple[bytes | str, ...]:
        # Nothing in the frame depends on the rows, so it is kept for as long as the cache keeps it.
        around = cache().derived(("frame", *viewer), (), frame)
        return tuple(chain.from_iterable(listed() if piece == ROWS_HOLE else (piece,) for piece in around))

    pieces = cache().derived(("page", *viewer), (rows,), page)
    return filled(pieces, page_token(), here())


def _with_holes_open(render, *args, **kwargs) -> tuple[bytes | str, ...]:
    """``render(*args, **kwargs)`` cut at its holes, one's own tweets in it keeping theirs for the page's."""
    setattr(g, HOLES_OPEN, True)
    try:
        return cut_at_holes(str(render(*args, **kwargs)))
    finally:
        delattr(g, HOLES_OPEN)


def init_app(app: Flask) -> None:
    keep = app.extensions[KEEP_PAGES] = app.config["FRAGMENT_CACHE"]
    # First in, first out: a hit is one dictionary lookup (an LRU would reorder on every one), and
    # a fragment never goes stale, so which ones leave first only costs a render now and then.
    rendered: cachetools.FIFOCache = cachetools.FIFOCache(
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

    def joined(tweets, digest: str, profiles: str, me: int | None) -> str:
        """The tweets' fragments, joined: kept ones where there are, the rest rendered (and kept)."""
        item, items = tweet_item(), []
        for tweet in tweets:
            own = tweet.author_id == me
            key = fragment_key(digest, tweet, profiles, own)
            try:
                html = rendered[key]
            except KeyError:
                html = Markup(item(tweet, profiles, HOLES if own else None))
                if keep and entry_bytes(html) <= rendered.maxsize:
                    rendered[key] = html
            items.append(html)
        return "".join(items)  # every item is Markup already: nothing to escape

    def rendered_tweets(tweets, next_url: str) -> Markup:
        """A page's tweets: kept fragments, one's own with the page's token and ``next_url`` in their holes.

        The same rows (the very same tuple, from the read cache) join into the same text, so with
        FRAGMENT_CACHE the joined text is kept too, for as long as the rows are the same."""
        tweet_item()
        digest, profiles = macro["digest"], links()["users"]
        me = current_user.id if current_user.is_authenticated else None
        if keep:
            # One list a viewer: the one they saw last (their timeline, mostly), so rows read afresh
            # for every page (older tweets) replace it rather than pile up.
            key = ("tweets", digest, profiles, me)
            page = cache().derived(key, (tweets,), lambda: joined(tweets, digest, profiles, me))
        else:
            page = joined(tweets, digest, profiles, me)
        if g.get(HOLES_OPEN):
            return Markup(page)  # the whole page is being kept: it fills these holes with its own
        return fill_holes(page, page_token(), next_url)

    def rendered_tweet(tweet) -> Markup:
        return rendered_tweets((tweet,), "")

    app.jinja_env.globals["rendered_tweet"] = rendered_tweet
    app.jinja_env.globals["rendered_tweets"] = rendered_tweets
