"""Choosing the suite: quotas per source (``stratify``), features (``vectorize``), clusters
(``cluster``) and the representatives (``select``).
"""
