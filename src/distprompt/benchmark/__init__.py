"""Benchmarking a server with a suite: the run (``run``), its wire protocol (``protocol``),
statistics (``stats``), summary files (``report``) and importing AIPerf results (``aiperf``).
"""
