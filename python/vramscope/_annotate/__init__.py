"""Annotating: what the memory is, told by the program while it runs
(``tags``, through ``hooks``; ``modules``, ``optimizers``, ``generated``)
and what holds it (``holders``; ``refnames`` and ``objgraph`` name every
reference, for the cycle analysis)."""
