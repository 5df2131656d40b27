"""The timeline, posting and deleting tweets."""

from __future__ import annotations

import re

from flask import Blueprint, current_app, redirect, render_template, url_for
from flask_login import current_user, login_required
from markupsafe import Markup, escape

from . import fragments, queries, site, throttle, writes
from .forms import ActionForm, TweetForm
from .navigation import go_back
from .paging import LARGEST_ID, older_tweets_url, tweet_id_arg

bp = Blueprint("tweets", __name__, url_prefix="/tweets")


# "@name" where name could be registered (queries.NAME), not inside a longer word or an email address.
MENTION = re.compile(r"(?<![A-Za-z0-9_@])@([A-Za-z0-9_]{3,32})(?![A-Za-z0-9_@])")


@bp.app_template_filter()
def mentions(text: str, profiles: str) -> Markup:
    """The tweet's text, escaped, with every "@name" a name could be linked to that profile.

    Whether the user exists is not asked: the link depends on the text alone, so a kept
    fragment stays right when that name registers later (until then, the profile is a 404).
    """
    if "@" not in text:
        return escape(text)
    parts = MENTION.split(text)  # text, name, text, name, ..., text
    link = Markup('<a class="mention" href="{}{}/">@{}</a>')
    return Markup("").join(link.format(profiles, part, part) if i % 2 else escape(part) for i, part in enumerate(parts))


@bp.app_template_global()
def blank_tweet_field() -> Markup:
    """The empty tweet box is the same on every timeline: rendered once per process, then kept."""
    kept = current_app.extensions.setdefault("tweepy_blank_tweet_field", [])
    if not kept:
        macros = current_app.jinja_env.get_template("_macros.html").module
        kept.append(Markup(macros.field(TweetForm(formdata=None).tweet)))
    return kept[0]


def _render_timeline(form: TweetForm | None = None, status: int = 200):
    """The timeline; ``form`` is the tweet just refused, to show again with its errors."""
    before = tweet_id_arg("before")
    tweets = queries.timeline_of(current_user.id, before)
    context = {
        "form": form,
        "tweets": tweets,
        "before": before,
        "older_url": older_tweets_url(tweets, site.links()["timeline"]),
    }
    if form is None and before is None:
        # The first page, as every visit shows it: the same while its rows are.
        return fragments.kept_page("timeline.html", tweets, **context), status
    return render_template("timeline.html", **context), status


@bp.get("/")
@login_required
def timeline():
    return _render_timeline()


@bp.post("/")
@login_required
def post():
    form = TweetForm()
    if not form.validate_on_submit():
        return _render_timeline(form, 400)
    throttle.count_write("tweets", current_user.id)
    writes.post_tweet(current_user.id, form.tweet.data)
    return redirect(url_for("tweets.timeline"), code=303)


# Bounded like the ids themselves: a bigger number is a missing tweet (404), not an overflow.
@bp.post(f"/<int(max={LARGEST_ID}):tweet_id>/delete")
@login_required
def delete(tweet_id: int):
    writes.delete_tweet(current_user.id, tweet_id)
    return go_back(ActionForm().next.data, "tweets.timeline")
