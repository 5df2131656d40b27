"""A test client that fills forms like a browser: it takes the CSRF token from a page first."""

from __future__ import annotations

from .pages import csrf_token


class Browser:
    def __init__(self, client):
        self.client = client

    def get(self, url, **kwargs):
        return self.client.get(url, **kwargs)

    def post(self, url, data=None, page=None):
        """POST ``data`` with the token of ``page`` (default: the timeline, which every logged-in person can see)."""
        token = csrf_token(self.client.get(page or "/tweets/"))
        return self.client.post(url, data={**(data or {}), "csrf_token": token})

    def fill(self, url, fields):
        """Open the form at ``url`` and submit ``fields`` with its token."""
        return self.post(url, fields, page=url)

    def register(self, name, password="correct horse", email=None):
        fields = {"name": name, "email": email or f"{name}@example.com", "password": password, "confirm": password}
        return self.fill("/register/", fields)

    def login(self, name, password="correct horse"):
        return self.fill("/", {"name": name, "password": password})

    def logout(self):
        return self.post("/logout/")


def sign_up(app, name: str) -> Browser:
    """A new browser (test client) on ``app``, registered and logged in as ``name``."""
    browser = Browser(app.test_client())
    response = browser.register(name)
    assert response.status_code == 303, response.get_data(as_text=True)
    return browser
