"""What the tests share: browsers that fill forms, readers of pages, rows put in directly.

from helpers.browser import Browser, sign_up      # the Flask test client, like a browser
from helpers.http import Visitor                   # the same over real HTTP (requests)
from helpers.pages import csrf_token, tweet_texts  # what a page shows
from helpers.stored import add_users, count        # rows written or read directly
"""
