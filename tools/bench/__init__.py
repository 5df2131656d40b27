"""``make bench``: planning (``plan``), measuring (``measure``, with the load shapes
``capacity_shape`` and ``cold_shape`` run inside locust), the arithmetic on what was measured
(``figures``) and the reports: a run's rows (``runs``), its tables (``tables``) and charts
(``charts``), and what a full run publishes (``publishing``), written by ``report``.
``python -m tools.bench`` runs it; see ``__main__`` for the command line.

Nothing is imported here, so the load shapes can use ``tools.bench.figures`` inside locust
without pulling in the rest."""
