"""The work of the ``dpbandit`` subcommands; :mod:`streaming_dpbandit.cli` parses and dispatches.

One module per subcommand (``simulate``, ``replay``, ``reproduce``, ``budget``, ``explain``,
``serve`` with ``loadgen``) and :mod:`.options`, the argument types and checks they share. Each
command takes the parsed arguments and returns the exit status; a user's mistake raises
:class:`~streaming_dpbandit.errors.ConfigError` (one line, exit status 2).
"""
