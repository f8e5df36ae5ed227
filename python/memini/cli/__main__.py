"""``python -m memini.cli``: the same as the ``memini`` command."""

from memini.cli import main

raise SystemExit(main())
