"""A person with a browser, over real HTTP: for tests of servers started for real."""

from __future__ import annotations

import requests

from .pages import find_csrf_token

SEED_PASSWORD = "tweepy123"  # what `flask seed` gives every seeded user


class Visitor:
    """Keeps cookies, takes CSRF tokens from the pages it reads, and remembers which worker answered."""

    def __init__(self, base_url: str) -> None:
        self.base = base_url.rstrip("/")
        self.http = requests.Session()
        self.token: str | None = None

    def _send(self, method: str, path: str, **kwargs) -> requests.Response:
        """Send once more on a new connection when a kept-alive one was closed before any answer,
        as browsers do: the server closed it idle (nginx does, reloading) and never saw the request
        (a server that fails a request it read answers, with a 502 from nginx)."""
        try:
            return self.http.request(method, self.base + path, allow_redirects=False, timeout=30, **kwargs)
        except requests.ConnectionError as error:
            if "Connection aborted." not in str(error):
                raise
            return self.http.request(method, self.base + path, allow_redirects=False, timeout=30, **kwargs)

    def get(self, path: str) -> requests.Response:
        response = self._send("GET", path)
        token = find_csrf_token(response.text)
        if token:
            self.token = token
        return response

    def post(self, path: str, data: dict | None = None, token: bool = True) -> requests.Response:
        fields = dict(data or {})
        if token:
            fields["csrf_token"] = self.token
        return self._send("POST", path, data=fields)

    def login(self, name: str, password: str = SEED_PASSWORD) -> requests.Response:
        self.get("/")
        return self.post("/", {"name": name, "password": password})


def worker_of(response: requests.Response) -> str:
    """The process that answered (the stage runs with TWEEPY_WORKER_HEADER on)."""
    return response.headers["X-Tweepy-Worker"]


def logged_in(base_url: str, name: str) -> Visitor:
    visitor = Visitor(base_url)
    answer = visitor.login(name)
    assert answer.status_code == 303, f"{name}'s login: {answer.status_code} {answer.headers} {answer.text[:300]}"
    return visitor
