"""Writing: the suite and its manifest (``suite``), the client files (``export``, the catalogue in
``formats``, the drop rules in ``clients``, ``RUN.md`` in ``runmd``), the report model
(``report``, measured by ``metrics``) and its rendering (``render``), and the output folder with
atomic writes (``out_dir``).
"""
