"""Reading: find shards, stream and validate their rows, and run the one pass over them.

``shards`` (discover, open, split, stream lines) → ``validate``/``fastrow`` (one row) →
``scan`` (the pass: per-source statistics and candidate pools) on ``engine`` (processes or Ray).
"""
