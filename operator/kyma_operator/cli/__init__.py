"""The ``kyma`` command line (``kyma module ...``): a thin layer over ``kyma_operator.modules`` and the API.

Why typer (+ rich): commands are declared with type hints and ``Annotated`` options, so every flag
is typed and documented in ``--help`` without hand-written parsing; typer ships click inside and
brings rich for tables, progress bars and readable errors. Both are widely used and maintained.
"""
