"""Recording: one recording's session (``session.py``), the recorder a
``backend=`` runs (``backend.py``, ``recorders/``), and what a recording
needs around it: the environment switch, the rank and its file names,
files written whole, the live state, staying out of ``torch.compile``'s
way and off the user's stderr."""
