"""The ceiling of a stage's stack: the same load generator asking for /healthz
(one trivial query, a few bytes of text) as fast as it can, no think time.
The protocol's QPS as a share of this says how much the app itself costs."""

from locust import FastHttpUser, constant, task


class Prober(FastHttpUser):
    wait_time = constant(0)

    @task
    def health(self) -> None:
        self.client.get("/healthz")
