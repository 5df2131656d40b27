"""``make bench``: planning (``plan``), measuring (``measure``, with the load shape in
``tools/bench/capacity_shape.py``), the arithmetic on what was measured (``figures``) and the reports
(``report``). ``python -m tools.bench`` runs it; see ``__main__`` for the command line.

Nothing is imported here, so the load shape can use ``tools.bench.figures`` inside locust without
pulling in the rest."""
